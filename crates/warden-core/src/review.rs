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

/// Decides calls that need review. Keyed by the call (its `tool_call_id`), never by position.
pub trait Reviewer: Send + Sync {
    /// Whether `call` may run (`[review] required = true`).
    fn review<'a>(&'a self, call: &'a ToolCall, spec: &'a ToolSpec) -> BoxFuture<'a, Decision>;

    /// Whether the changes `call` made are kept (`[review] changes = true`); asked once the
    /// call has run, its changes held. Secrets are redacted from `changes` already; the
    /// paths and text are the sandbox's, so a reviewer shows them escaped.
    fn review_changes<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
        changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict>;
}
