//! Review through MCP elicitation: the client that made a call asks its user to approve it.

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use warden_core::shown::Escaped;
use warden_core::{Asked, BoxFuture, ChangesToReview, Decision, Reviewer, ToolCall, Verdict};

/// Asks the client that sent each call, when it declared the elicitation capability.
#[derive(Default)]
pub(crate) struct ElicitationReviewer {
    /// The client of each call in flight that needs review, by `tool_call_id`.
    asking: Mutex<HashMap<String, Peer<RoleServer>>>,
}

/// While alive, reviews of the call go to its client.
pub(crate) struct Registration {
    reviewer: Arc<ElicitationReviewer>,
    id: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut asking = self.reviewer.lock();
        asking.remove(&self.id);
    }
}

impl ElicitationReviewer {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Peer<RoleServer>>> {
        self.asking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Routes the review of call `id` to `peer` until the registration is dropped.
    pub(crate) fn register(self: &Arc<Self>, id: &str, peer: Peer<RoleServer>) -> Registration {
        self.lock().insert(id.to_owned(), peer);
        Registration {
            reviewer: self.clone(),
            id: id.to_owned(),
        }
    }
}

impl ElicitationReviewer {
    /// Asks the client of `call` with the form [`request`] makes of `message`; an answer that
    /// names a digest must name `digest`, the call's.
    async fn ask(&self, call: &ToolCall, message: String, digest: &str) -> Decision {
        let peer = self.lock().get(&call.id).cloned();
        let Some(peer) = peer else {
            return reject(NO_REVIEWER);
        };
        if !peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return reject(NO_REVIEWER);
        }
        let params = match request(message) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("cannot build the review form: {e}");
                return reject("warden could not build the review form; this is a bug");
            }
        };
        match peer.create_elicitation(params).await {
            Ok(answer) => decide(answer.action, answer.content.as_ref(), digest),
            Err(e) => {
                tracing::warn!(call = %call.id, "the review request failed: {e}");
                reject("the review request to the client failed, so the call was not run")
            }
        }
    }
}

impl Reviewer for ElicitationReviewer {
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision> {
        let message = call_message(&asked.spec.name, &asked.call.arguments, &asked.digest);
        Box::pin(self.ask(asked.call, message, &asked.digest))
    }

    fn review_changes<'a>(
        &'a self,
        asked: &'a Asked<'a>,
        changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict> {
        let message = format!(
            "The tool `{}` ran with {} and changed files. Approve to keep its changes, \
             reject to discard them.\n{}",
            Escaped(&asked.spec.name),
            Escaped(&asked.call.arguments),
            changes.to_text()
        );
        Box::pin(async move {
            match self.ask(asked.call, message, &asked.digest).await {
                Decision::Approve => Verdict::Approve,
                Decision::Reject { reason } => Verdict::Reject { reason },
                _ => Verdict::Reject {
                    reason: "the reviewer answered neither approve nor reject".into(),
                },
            }
        })
    }

    fn name(&self) -> &'static str {
        "mcp-elicitation"
    }
}

const NO_REVIEWER: &str = "this tool needs a person to review each call, and this MCP client \
    cannot ask one (it did not declare the elicitation capability); ask the user to run it from \
    a client that supports elicitation, or with another reviewer";

/// What a reviewer is asked about a call of `tool` with `arguments` (their text), whose
/// digest is `digest`: by elicitation, or in an input request on a stateless protocol.
pub(crate) fn call_message(tool: &str, arguments: &str, digest: &str) -> String {
    // A client may show this on a terminal: the model's arguments are shown, not obeyed.
    format!(
        "The tool `{}` needs your review before it runs.\nArguments: {}\nDigest: {digest}",
        Escaped(tool),
        Escaped(arguments),
    )
}

fn reject(reason: &str) -> Decision {
    Decision::Reject {
        reason: reason.to_owned(),
    }
}

/// The form a reviewer fills in below `message`: approve or reject, and why.
pub(crate) fn request(message: String) -> Result<ElicitRequestParams, serde_json::Error> {
    let schema: rmcp::model::JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "enum": ["approve", "reject"],
                "description": "Approve or refuse what the message asks about",
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why it is rejected; the model reads this",
            },
            "digest": {
                "type": "string",
                "title": "Digest",
                "description": "The digest the message names: the decision is for that call alone",
            },
        },
        "required": ["decision"],
    }))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::from_json_schema(schema)?,
    })
}

/// What the client's answer decides about the call whose digest is `digest`: an approval that
/// names another digest approves another call, so it is a rejection.
pub(crate) fn decide(action: ElicitationAction, content: Option<&Value>, digest: &str) -> Decision {
    match action {
        ElicitationAction::Accept => {
            let field = |k: &str| content.and_then(|c| c.get(k)).and_then(Value::as_str);
            if let Some(named) = field("digest").filter(|d| *d != digest) {
                return reject(&format!(
                    "the reviewer's answer is for the call with digest {named}, and this call's \
                     is {digest}: a decision is for the call it names alone"
                ));
            }
            match field("decision") {
                Some("approve") => Decision::Approve,
                _ => reject(
                    field("reason")
                        .filter(|r| !r.trim().is_empty())
                        .unwrap_or("the reviewer gave no reason"),
                ),
            }
        }
        ElicitationAction::Decline => reject("the reviewer declined the call"),
        _ => reject("the reviewer dismissed the review without deciding"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let approve = json!({"decision": "approve"});
        assert_eq!(
            decide(ElicitationAction::Accept, Some(&approve), "d"),
            Decision::Approve
        );
        let no = json!({"decision": "reject", "reason": "not on Fridays"});
        assert_eq!(
            decide(ElicitationAction::Accept, Some(&no), "d"),
            reject("not on Fridays")
        );
        assert!(matches!(
            decide(ElicitationAction::Accept, None, "d"),
            Decision::Reject { .. }
        ));
        assert!(matches!(
            decide(ElicitationAction::Decline, None, "d"),
            Decision::Reject { .. }
        ));
    }

    #[test]
    fn an_approval_naming_another_digest_is_a_rejection() {
        let bound = json!({"decision": "approve", "digest": "d"});
        assert_eq!(
            decide(ElicitationAction::Accept, Some(&bound), "d"),
            Decision::Approve
        );
        let other = json!({"decision": "approve", "digest": "e"});
        assert!(matches!(
            decide(ElicitationAction::Accept, Some(&other), "d"),
            Decision::Reject { reason } if reason.contains("digest e")
        ));
    }

    #[test]
    fn the_form_is_a_valid_elicitation_schema() {
        assert!(request("review".into()).is_ok());
    }
}
