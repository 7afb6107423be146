//! The review gate: a person decides calls whose policy requires review.

use crate::changes::ChangesToReview;
use crate::executor::BoxFuture;
use crate::message::ToolCall;
use crate::spec::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a reviewer decided about one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run the call as the model wrote it.
    Approve,
    /// Run the same tool with these arguments instead (checked against its schema again).
    Edit { arguments: Value },
    /// Do not run it; the model gets a `rejected` error with the reason.
    Reject { reason: String },
    /// Do not run it; the model gets this text as the tool's successful answer.
    Respond { content: String },
}

/// What a reviewer decided about the changes a call made (`[review] changes = true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Verdict {
    /// Keep them: they are applied to the roots.
    Approve,
    /// Discard them; the model gets a `rejected` error with the reason.
    Reject { reason: String },
}

/// A call put to a reviewer, with what an approval of it is bound to.
#[derive(Debug, Clone)]
pub struct Asked<'a> {
    pub call: &'a ToolCall,
    pub spec: &'a ToolSpec,
    /// [`call_digest`] of the tool and the call's arguments: an approval is for this call,
    /// never for another with other arguments.
    pub digest: String,
    /// The digest of the tool's policy as the call log names it (`policy_digest`).
    pub policy_digest: &'a str,
}

/// Decides calls that need review. Keyed by the call (its `tool_call_id`), never by position.
pub trait Reviewer: Send + Sync {
    /// Whether `asked.call` may run (`[review] required = true`).
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision>;

    /// Whether the changes `asked.call` made are kept (`[review] changes = true`); asked once
    /// the call has run, its changes held. Secrets are redacted from `changes` already; the
    /// paths and text are the sandbox's, so a reviewer shows them escaped.
    fn review_changes<'a>(
        &'a self,
        asked: &'a Asked<'a>,
        changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict>;

    /// Who decides, as the call log's `decision` records name them (`terminal`, `file`, …).
    fn name(&self) -> &'static str;
}

/// The digest an approval is bound to: `sha256:` and the hex of the sha256 of the RFC 8785
/// (JSON Canonicalization Scheme) form of `[tool, arguments]`. Anyone can compute it before a
/// run: `sha256(JCS(["rm", {"path": "build"}]))`. Arguments that are not JSON are taken as
/// the string they are.
pub fn call_digest(tool: &str, arguments: &str) -> String {
    use sha2::Digest;
    let arguments: Value =
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()));
    let canonical = serde_jcs::to_string(&serde_json::json!([tool, arguments]))
        // Every JSON value has a canonical form; only a number JSON cannot hold fails.
        .unwrap_or_else(|_| format!("[{tool:?},{arguments}]"));
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(canonical)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_of_the_canonical_form() {
        use sha2::Digest;
        // Keys sorted, numbers in their shortest form, strings unescaped where JSON allows.
        let canonical = r#"["rm",{"a":[1,2.5,"é"],"path":"build"}]"#;
        let expected = format!("sha256:{}", hex::encode(sha2::Sha256::digest(canonical)));
        let written = "{ \"path\": \"build\", \"a\": [1.0, 2.50, \"\\u00e9\"] }";
        assert_eq!(call_digest("rm", written), expected);
        assert_ne!(call_digest("rm", r#"{"path": "/"}"#), expected);
    }
}
