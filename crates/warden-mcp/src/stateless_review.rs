//! Review on protocol 2026-07-28, where a server may not send its client a request mid-call:
//! a call that needs review is answered with an `InputRequiredResult` (the elicitation the
//! session protocols send, and a sealed `requestState`), and the client's retry carries the
//! answer, which [`InputReviewer`] judges inside the dispatcher, so that its decision is
//! logged like any other before the call runs.

use crate::request_state::{self, Bound, StateKey, Used};
use crate::review;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ElicitRequest, ElicitResult, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, ProtocolVersion,
};
use serde_json::Value;
use std::sync::{Arc, PoisonError, RwLock};
use warden_core::shown::Escaped;
use warden_core::{
    Asked, BoxFuture, ChangesToReview, Decision, Reviewer, Tool, Verdict, call_digest,
};

/// The key of the one input request a review sends.
pub(crate) const INPUT_KEY: &str = "review";

/// Whether requests on `version` are stateless: the server answers, and never asks.
pub(crate) fn is_stateless(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| *v >= ProtocolVersion::V_2026_07_28)
}

/// What every stateless review shares: the key states are sealed with, and the states
/// answered already.
pub(crate) struct StatelessReview {
    key: RwLock<StateKey>,
    used: Used,
}

/// What to do with a stateless call.
pub(crate) enum Round {
    /// Answer this first: the client asks its user, then calls again with the answer.
    Ask(Box<InputRequiredResult>),
    /// Run the call, reviewed by this reviewer.
    Run(Arc<dyn Reviewer>),
}

/// Why an input request could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    #[error("cannot build the review form: {0}")]
    Form(#[from] serde_json::Error),
    #[error("cannot draw a nonce: {0}")]
    Random(#[from] getrandom::Error),
}

impl StatelessReview {
    /// States sealed with a key of this process alone, until [`StatelessReview::use_token`].
    pub(crate) fn new() -> Result<Self, getrandom::Error> {
        Ok(Self {
            key: RwLock::new(StateKey::random()?),
            used: Used::default(),
        })
    }

    /// Seals states with the key `token` gives (HTTP: every replica is given the token).
    pub(crate) fn use_token(&self, token: &str) {
        *self.key.write().unwrap_or_else(PoisonError::into_inner) = StateKey::from_token(token);
    }

    /// The round a stateless call of `tool` (one that needs review) is in: a first call of a
    /// client that can answer a form is asked about; any other runs, its reviewer deciding on
    /// what the retry carried (`inputResponses` and `requestState`, taken from `request`).
    pub(crate) fn round(
        self: &Arc<Self>,
        tool: &Tool,
        request: &mut CallToolRequestParams,
        client: Option<&ClientCapabilities>,
    ) -> Result<Round, AskError> {
        let retry = Retry {
            state: request.request_state.take(),
            responses: request.input_responses.take(),
        };
        let first = retry.state.is_none() && retry.responses.is_none();
        if first && tool.review_required && answers_forms(client) {
            let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
            return self.ask(tool, &arguments.to_string()).map(Round::Ask);
        }
        let reviewer = InputReviewer {
            shared: self.clone(),
            retry: (!first).then_some(retry),
        };
        Ok(Round::Run(Arc::new(reviewer)))
    }

    /// The input request about the call of `tool` with `arguments` (their text).
    fn ask(&self, tool: &Tool, arguments: &str) -> Result<Box<InputRequiredResult>, AskError> {
        let name = &tool.spec.name;
        let digest = call_digest(name, arguments);
        let form = review::request(review::call_message(name, arguments, &digest))?;
        let bound = Bound::new(name, &digest, tool.policy_digest())?;
        let state = self
            .key
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .seal(&bound);
        let mut requests = InputRequests::new();
        let elicit = InputRequest::Elicitation(ElicitRequest::new(form));
        requests.insert(INPUT_KEY.to_owned(), elicit);
        Ok(Box::new(InputRequiredResult::new(
            Some(requests),
            Some(state),
        )))
    }

    /// The answer `retry` carries to the review of `asked`, once its state is found to be
    /// this server's, unexpired, unused and bound to this very call; else why not.
    fn answer(&self, asked: &Asked<'_>, retry: &Retry) -> Result<ElicitResult, String> {
        let state = retry.state.as_deref().ok_or(NO_STATE)?;
        let now = request_state::now();
        let key = self.key.read().unwrap_or_else(PoisonError::into_inner);
        let bound = key.open(state, now).map_err(|e| e.to_string())?;
        drop(key);
        if bound.tool != asked.call.name {
            return Err(format!(
                "the requestState is for a call of `{}`, not of `{}`: call again without it to \
                 be asked about this one",
                Escaped(&bound.tool),
                Escaped(&asked.call.name)
            ));
        }
        if bound.digest != asked.digest {
            return Err(format!(
                "the review asked about the call with digest {}, and this call's is {}: its \
                 arguments are not the ones asked about; call again without the requestState \
                 to be asked about these",
                bound.digest, asked.digest
            ));
        }
        if bound.policy_digest != asked.policy_digest {
            return Err(format!(
                "the tool's policy changed since the review was asked (it was {}, it is {}): \
                 call again without the requestState to be asked under the policy in force",
                bound.policy_digest, asked.policy_digest
            ));
        }
        self.used.take(&bound, now).map_err(|e| e.to_string())?;
        let answer = retry
            .responses
            .as_ref()
            .and_then(|r| r.get(INPUT_KEY))
            .ok_or(NO_ANSWER)?;
        serde_json::from_value(answer.clone()).map_err(|e| {
            format!(
                "the answer to the input request `{INPUT_KEY}` is not an elicitation result: {e}"
            )
        })
    }
}

/// Whether a client with `capabilities` answers form elicitations (one that names no mode
/// answers forms, as before modes were named).
fn answers_forms(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// What a stateless call carried back from an input request.
struct Retry {
    state: Option<String>,
    responses: Option<InputResponses>,
}

/// Decides a stateless call on what its retry carried: `None` when it carried nothing, which
/// is a client that cannot be asked.
struct InputReviewer {
    shared: Arc<StatelessReview>,
    retry: Option<Retry>,
}

impl Reviewer for InputReviewer {
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision> {
        let decision = match &self.retry {
            None => Decision::Reject {
                reason: NO_FORMS.into(),
            },
            Some(retry) => match self.shared.answer(asked, retry) {
                Ok(answer) => review::decide(answer.action, answer.content.as_ref(), &asked.digest),
                Err(reason) => Decision::Reject { reason },
            },
        };
        Box::pin(std::future::ready(decision))
    }

    fn review_changes<'a>(
        &'a self,
        _asked: &'a Asked<'a>,
        _changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(std::future::ready(Verdict::Reject {
            reason: HELD_CHANGES.into(),
        }))
    }

    fn name(&self) -> &'static str {
        "mcp-input-request"
    }
}

const NO_FORMS: &str = "this tool needs a person to review each call, and this MCP client \
    cannot be asked (its request's clientCapabilities declare no form elicitation); ask the \
    user to run it from a client that answers input requests, or with another reviewer";

const NO_STATE: &str = "the call carries inputResponses without the requestState they answer; \
    call again without them to be asked anew";

const NO_ANSWER: &str = "the call carries a requestState without an answer to the input \
    request `review` in inputResponses";

const HELD_CHANGES: &str = "a person reviews what each call of this tool changes, and on \
    protocol 2026-07-28 (stateless) changes cannot be held across a round trip to the client; \
    use a session (a protocol version before 2026-07-28) to review them";
