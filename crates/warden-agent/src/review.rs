//! Review inside a run: decisions from a person or a file, written to the transcript before
//! they take effect, and calls without a decision held, unanswered, so the run can pause.

use crate::transcript::{Event, Transcript};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use warden_core::{
    Asked, BoxFuture, CallObserver, ChangesToReview, Decision, Reviewer, ToolCall, ToolMessage,
    Verdict,
};

/// Where decisions about calls that need review come from.
#[derive(Clone)]
pub enum ReviewSource {
    /// Ask this reviewer (a prompt on a terminal), call by call.
    Ask(Arc<dyn Reviewer>),
    /// A decisions file; a call it has no decision for pauses the run.
    File(Arc<Decisions>),
    /// No one to ask: calls that need review are rejected.
    Nobody,
}

/// Why a decisions file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DecisionsError {
    #[error("cannot read the decisions file {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("the decisions file {0} is not valid: {1}")]
    Invalid(PathBuf, String),
}

/// Decisions keyed by `tool_call_id`: `{"call_1": {"decision": "approve"}, …}`; an entry's
/// `changes` (`{"decision": "approve"}` or `{"decision": "reject", "reason": …}`) decides
/// whether the changes the call made are kept, where its policy reviews them.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    path: PathBuf,
    by_id: HashMap<String, Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    /// Whether the call runs; `None` when the entry decides only its changes.
    decision: Option<Decision>,
    /// Whether its changes are kept.
    changes: Option<Verdict>,
    /// The call it is for: `call_digest` of its tool and arguments, when the file says.
    digest: Option<String>,
    /// The policy it was made under, when the file says.
    policy_digest: Option<String>,
    /// The tool the decision is meant for, when the file says.
    tool: Option<String>,
}

const FIELDS: [&str; 9] = [
    "decision",
    "arguments",
    "reason",
    "content",
    "tool",
    "name",
    "changes",
    "digest",
    "policy_digest",
];

impl Decisions {
    /// Reads a decisions file. Unknown fields are errors: a typo must not approve a call.
    pub fn load(path: &Path) -> Result<Self, DecisionsError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| DecisionsError::Io(path.to_owned(), e))?;
        Self::parse(path, &text)
    }

    fn parse(path: &Path, text: &str) -> Result<Self, DecisionsError> {
        let invalid = |m: String| DecisionsError::Invalid(path.to_owned(), m);
        let value: Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let Value::Object(map) = value else {
            return Err(invalid(
                "expected an object keyed by tool_call_id, like {\"call_1\": {\"decision\": \"approve\"}}"
                    .into(),
            ));
        };
        let mut by_id = HashMap::new();
        for (id, mut entry) in map {
            let Value::Object(fields) = &mut entry else {
                return Err(invalid(format!("the decision for `{id}` is not an object")));
            };
            if let Some(bad) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
                return Err(invalid(format!(
                    "the decision for `{id}` has an unknown field `{bad}`; the fields are: {}",
                    FIELDS.join(", ")
                )));
            }
            let mut text = |key: &str| match fields.remove(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(invalid(format!("`{key}` of `{id}` is not a string"))),
            };
            let tool = match text("tool")? {
                Some(tool) => Some(tool),
                None => text("name")?,
            };
            let (digest, policy_digest) = (text("digest")?, text("policy_digest")?);
            let changes =
                match fields.remove("changes") {
                    None => None,
                    Some(v) => Some(serde_json::from_value(v).map_err(|e| {
                        invalid(format!("the decision on the changes of `{id}`: {e}"))
                    })?),
                };
            let decision = if fields.is_empty() && changes.is_some() {
                None
            } else {
                Some(
                    serde_json::from_value(entry)
                        .map_err(|e| invalid(format!("the decision for `{id}`: {e}")))?,
                )
            };
            by_id.insert(
                id,
                Entry {
                    decision,
                    changes,
                    tool,
                    digest,
                    policy_digest,
                },
            );
        }
        Ok(Self {
            path: path.to_owned(),
            by_id,
        })
    }

    /// Where the decisions were read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decision for one call. A decision that names another tool than the call's, or
    /// another call's digest or another policy than the one in force, is a rejection: an edit
    /// may change the arguments, never the tool, and an approval is for one call alone.
    pub fn decide(&self, asked: &Asked<'_>) -> Option<Decision> {
        let entry = self.by_id.get(&asked.call.id)?;
        match Self::not_for(entry, asked) {
            Some(reason) => Some(Decision::Reject { reason }),
            None => entry.decision.clone(),
        }
    }

    /// The decision on the changes of one call: a rejection when the file has none, since
    /// the changes cannot wait for a resume (they are held by this process).
    pub fn decide_changes(&self, asked: &Asked<'_>) -> Verdict {
        let call = asked.call;
        let entry = self.by_id.get(&call.id);
        let other = entry.and_then(|e| Self::not_for(e, asked));
        match (entry.and_then(|e| e.changes.clone()), other) {
            (_, Some(reason)) => Verdict::Reject { reason },
            (Some(verdict), None) => verdict,
            (None, None) => Verdict::Reject {
                reason: format!(
                    "the decisions file {} has no decision on this call's changes (`changes` \
                     in the entry for `{}`), so they were discarded",
                    self.path.display(),
                    call.id
                ),
            },
        }
    }

    /// Why `entry` cannot decide `asked`: it names another tool, another call's digest, or
    /// another policy.
    fn not_for(entry: &Entry, asked: &Asked<'_>) -> Option<String> {
        let call = asked.call;
        if let Some(tool) = entry.tool.as_ref().filter(|t| **t != call.name) {
            return Some(format!(
                "the reviewer's decision names the tool `{tool}`, but this call is for `{}`; a \
                 review cannot switch a call to another tool",
                call.name
            ));
        }
        if let Some(digest) = entry.digest.as_ref().filter(|d| **d != asked.digest) {
            return Some(format!(
                "the reviewer's decision is for the call with digest {digest}, and this call's \
                 tool and arguments make {}: a decision is for the call it names alone",
                asked.digest
            ));
        }
        if let Some(policy) = entry
            .policy_digest
            .as_ref()
            .filter(|p| **p != asked.policy_digest)
        {
            return Some(format!(
                "the reviewer's decision was made under the policy {policy}, and the tool's \
                 policy is now {}: decide again under the policy in force",
                asked.policy_digest
            ));
        }
        None
    }
}

/// What the review gate and the call observer of one run share.
pub(crate) struct Ledger {
    pub transcript: Arc<Transcript>,
    /// Calls held for want of a decision; they did not run and get no answer.
    pub pending: Mutex<HashSet<String>>,
    /// Answers of the current batch as they arrive, for a batch cut short.
    pub answered: Mutex<HashMap<String, ToolMessage>>,
    /// Told of every answer and every held call.
    pub changed: Notify,
}

impl Ledger {
    pub(crate) fn new(transcript: Arc<Transcript>) -> Arc<Self> {
        Arc::new(Self {
            transcript,
            pending: Mutex::default(),
            answered: Mutex::default(),
            changed: Notify::new(),
        })
    }

    pub(crate) fn take_pending(&self) -> Vec<String> {
        let mut p = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        p.drain().collect()
    }

    pub(crate) fn take_answered(&self) -> HashMap<String, ToolMessage> {
        std::mem::take(
            &mut *self
                .answered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// True when some of `ids` are held for a decision and all the others are answered:
    /// nothing more will happen until a person decides.
    pub(crate) fn only_held_left(&self, ids: &[String]) -> bool {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let answered = self
            .answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !pending.is_empty()
            && ids
                .iter()
                .all(|id| pending.contains(id) || answered.contains_key(id))
    }
}

/// The full ToolMessage as the transcript keeps it.
pub(crate) fn full_message(m: &ToolMessage) -> Value {
    let mut v = m.to_openai();
    v["status"] = serde_json::to_value(m.status).unwrap_or_default();
    v
}

impl CallObserver for Ledger {
    fn started(&self, call: &ToolCall, arguments: &Value) {
        self.transcript.record(Event::Started {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: arguments.clone(),
        });
    }

    fn answered(&self, message: &ToolMessage) {
        self.transcript.record(Event::Answered {
            message: full_message(message),
        });
        self.answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(message.tool_call_id.clone(), message.clone());
        self.changed.notify_one();
    }
}

/// The dispatcher's reviewer in a run: every decision is written down before it takes effect.
pub(crate) struct ReviewGate {
    pub source: ReviewSource,
    pub ledger: Arc<Ledger>,
    /// Decisions made before a resume, for calls that had not started.
    pub earlier: Mutex<HashMap<String, Decision>>,
}

impl ReviewGate {
    async fn decide(&self, asked: &Asked<'_>) -> Decision {
        let call = asked.call;
        let earlier = self
            .earlier
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&call.id);
        if let Some(d) = earlier {
            self.write(call, &d, "transcript");
            return d;
        }
        let (decision, source) = match &self.source {
            ReviewSource::Ask(r) => (r.review(asked).await, "terminal"),
            ReviewSource::File(file) => match file.decide(asked) {
                Some(d) => (d, "file"),
                None => {
                    self.ledger.transcript.record(Event::Pending {
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                        arguments: call.arguments.clone(),
                    });
                    self.ledger
                        .pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(call.id.clone());
                    self.ledger.changed.notify_one();
                    // The call waits, unanswered and unlogged, until the run drops the batch
                    // to pause; a resume asks again.
                    return std::future::pending().await;
                }
            },
            ReviewSource::Nobody => (
                Decision::Reject {
                    reason: "this tool needs a person to review each call, and no reviewer is \
                             available (no terminal, no --decisions file); ask the user to run \
                             it with a reviewer"
                        .into(),
                },
                "none",
            ),
        };
        self.write(call, &decision, source);
        decision
    }

    async fn decide_changes(&self, asked: &Asked<'_>, changes: &ChangesToReview) -> Verdict {
        let call = asked.call;
        let (verdict, source) = match &self.source {
            ReviewSource::Ask(r) => (r.review_changes(asked, changes).await, "terminal"),
            ReviewSource::File(file) => (file.decide_changes(asked), "file"),
            ReviewSource::Nobody => (
                Verdict::Reject {
                    reason: "this tool needs a person to review what each call changed, and no \
                             reviewer is available (no terminal, no --decisions file)"
                        .into(),
                },
                "none",
            ),
        };
        self.ledger.transcript.record(Event::ChangesDecision {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            verdict: verdict.clone(),
            source: source.into(),
        });
        verdict
    }

    fn write(&self, call: &ToolCall, decision: &Decision, source: &str) {
        self.ledger.transcript.record(Event::Decision {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            decision: decision.clone(),
            source: source.into(),
        });
    }
}

impl Reviewer for ReviewGate {
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(self.decide(asked))
    }

    fn review_changes<'a>(
        &'a self,
        asked: &'a Asked<'a>,
        changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(self.decide_changes(asked, changes))
    }

    fn name(&self) -> &'static str {
        match &self.source {
            ReviewSource::Ask(r) => r.name(),
            ReviewSource::File(_) => "file",
            ReviewSource::Nobody => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Decisions, DecisionsError> {
        Decisions::parse(Path::new("d.json"), &v.to_string())
    }

    /// Asks `d` about the call `id` of `add` with `arguments`, under the policy `p1`.
    fn ask<T>(id: &str, arguments: &Value, ask: impl FnOnce(&Asked<'_>) -> T) -> T {
        let call = ToolCall::new(id, "add", arguments);
        let spec = warden_core::ToolSpec {
            name: "add".into(),
            description: String::new(),
            input_schema: json!({}),
            output_schema: None,
        };
        ask(&Asked {
            call: &call,
            spec: &spec,
            digest: warden_core::call_digest("add", &call.arguments),
            policy_digest: "p1",
        })
    }

    fn decide(d: &Decisions, id: &str) -> Option<Decision> {
        ask(id, &json!({}), |a| d.decide(a))
    }

    fn decide_changes(d: &Decisions, id: &str) -> Verdict {
        ask(id, &json!({}), |a| d.decide_changes(a))
    }

    #[test]
    fn reads_decisions_by_call_id() {
        let d = parse(json!({
            "b": {"decision": "edit", "arguments": {"a": 1}},
            "a": {"decision": "approve", "tool": "add"},
            "c": {"decision": "edit", "tool": "rm", "arguments": {}},
        }))
        .unwrap();
        assert_eq!(decide(&d, "a"), Some(Decision::Approve));
        assert_eq!(
            decide(&d, "b"),
            Some(Decision::Edit {
                arguments: json!({"a": 1})
            })
        );
        assert!(
            matches!(decide(&d, "c"), Some(Decision::Reject { reason }) if reason.contains("another tool"))
        );
        assert_eq!(decide(&d, "z"), None);
    }

    #[test]
    fn reads_decisions_on_a_calls_changes() {
        let d = parse(json!({
            "a": {"changes": {"decision": "approve"}},
            "b": {"decision": "approve", "changes": {"decision": "reject", "reason": "no"}},
            "c": {"decision": "approve"},
            "d": {"tool": "rm", "changes": {"decision": "approve"}},
        }))
        .unwrap();
        assert_eq!(decide(&d, "a"), None, "a decision on changes alone");
        assert_eq!(decide_changes(&d, "a"), Verdict::Approve);
        assert_eq!(decide(&d, "b"), Some(Decision::Approve));
        assert_eq!(
            decide_changes(&d, "b"),
            Verdict::Reject {
                reason: "no".into()
            }
        );
        for id in ["c", "d", "z"] {
            assert!(
                matches!(decide_changes(&d, id), Verdict::Reject { .. }),
                "{id}"
            );
        }
        assert!(parse(json!({"a": {"changes": {"decision": "edit"}}})).is_err());
    }

    /// An approval names the call it approves by digest (and may name the policy): the same id
    /// with other arguments, or under another policy, is refused.
    #[test]
    fn a_decision_bound_to_a_digest_approves_that_call_alone() {
        let build = json!({"command": "rm -rf build"});
        let digest = warden_core::call_digest("add", &build.to_string());
        let d = parse(json!({
            "c1": {"decision": "approve", "digest": digest},
            "c2": {"decision": "approve", "digest": digest, "policy_digest": "p0"},
        }))
        .unwrap();
        assert_eq!(ask("c1", &build, |a| d.decide(a)), Some(Decision::Approve));
        let root = json!({"command": "rm -rf /"});
        let refused = ask("c1", &root, |a| d.decide(a));
        assert!(
            matches!(&refused, Some(Decision::Reject { reason }) if reason.contains("digest")),
            "{refused:?}"
        );
        let stale = ask("c2", &build, |a| d.decide(a));
        assert!(
            matches!(&stale, Some(Decision::Reject { reason }) if reason.contains("policy p1") || reason.contains("policy is now p1")),
            "{stale:?}"
        );
    }

    #[test]
    fn refuses_what_it_cannot_read_for_sure() {
        assert!(parse(json!([])).is_err());
        assert!(parse(json!({"a": {"decision": "approve", "argument": {}}})).is_err());
        assert!(parse(json!({"a": {"decision": "maybe"}})).is_err());
        assert!(parse(json!({"a": {"decision": "reject"}})).is_err());
    }
}
