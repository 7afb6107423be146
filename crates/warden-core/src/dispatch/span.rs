//! What telemetry hears of calls: each call, at its end, as an [`EndedCall`] handed to the
//! process's [`CallTelemetry`] (warden-telemetry's, when an operator turns export on), and a
//! batch as a `tracing` span that parents its calls. Nothing here exports. With no telemetry
//! installed a call costs one load; with one, a call's bookkeeping is its start time and its
//! parent span, and everything else is read from its record at the end, off any `tracing`
//! machinery (a `tracing` span per call, its fields recorded one by one, cost a batch of
//! trivial calls about a third of its time).

use super::Facts;
use crate::executor::{Denial, Usage};
use crate::message::{ToolCall, ToolMessage};
use crate::redact::Secrets;
use crate::toolbox::Tool;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};
use tracing::Span;
use tracing::field::Empty;

/// Hears every call of this process as it ends: answered, refused, panicked or cancelled.
/// Called on the call's own thread, after its answer is made and logged: keep it short.
pub trait CallTelemetry: Send + Sync {
    /// `call` has ended.
    fn ended(&self, call: &EndedCall<'_>);
}

static TELEMETRY: OnceLock<Arc<dyn CallTelemetry>> = OnceLock::new();

/// Installs the process's call telemetry; false (and nothing changed) when one already is.
pub fn export_calls(telemetry: Arc<dyn CallTelemetry>) -> bool {
    TELEMETRY.set(telemetry).is_ok()
}

/// One ended call, as its record says it; every text but [`EndedCall::arguments`] is
/// already redacted of the tool's secrets.
#[non_exhaustive]
pub struct EndedCall<'a> {
    /// The tool called.
    pub tool: &'a str,
    /// The call's id.
    pub call_id: &'a str,
    /// The span the call ran under: its batch's, or the caller's (an MCP request's).
    pub parent: Option<&'a Span>,
    /// When its checks began.
    pub started: SystemTime,
    /// How long it took, checks to answer.
    pub took: Duration,
    /// warden's error kind on failure; `cancelled` or `internal` for a call whose future was
    /// dropped or panicked before it answered.
    pub error: Option<&'static str>,
    /// The error's message.
    pub error_message: Option<&'a str>,
    /// The answer's text (empty for a call that never answered).
    pub result: &'a str,
    /// The arguments as the model wrote them, not redacted: see [`EndedCall::redact`].
    pub arguments: &'a str,
    /// The executor's kind, when the tool exists.
    pub executor: Option<&'a str>,
    /// The tool's policy file.
    pub policy_path: Option<&'a str>,
    /// The digest of the grants in force, as the call log keys them.
    pub policy_digest: Option<&'a str>,
    /// The session the call ran in (none for a call that never answered).
    pub session: Option<u64>,
    /// Attempts made (retries of an idempotent tool).
    pub attempts: u32,
    /// Wasm fuel burnt.
    pub fuel: Option<u64>,
    /// What the call used.
    pub usage: Usage,
    /// The gate's refusals, the first few of them.
    pub denied: &'a [Denial],
    /// Every refusal, counted.
    pub denied_total: u64,
    /// Distinct destinations reached, counted.
    pub reached_total: u64,
    /// The hosts whose credentials the gate set, the first few (never a value).
    pub credentials: &'a [String],
    /// Every credential use, counted.
    pub credentials_total: u64,
    /// A program's exit status (`warden exec`).
    pub exit_status: Option<i32>,
    secrets: Option<&'a Secrets>,
}

impl EndedCall<'_> {
    /// `text` redacted of the tool's secrets.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.secrets {
            Some(s) => Cow::Owned(s.redact(text)),
            None => Cow::Borrowed(text),
        }
    }
}

/// A batch's span, the parent of its calls.
pub(super) fn batch_span(calls: usize) -> Span {
    tracing::info_span!(
        "warden.batch",
        otel.name = "warden.batch",
        warden.batch.calls = i64::try_from(calls).unwrap_or(i64::MAX),
        warden.batch.failed = Empty,
    )
}

/// One call between its start and its end, for telemetry. Ended without an answer (its
/// future dropped, or unwinding from a panic), it tells telemetry so.
pub(super) struct CallSpan {
    /// warden's own id of the call (see `crate::call_id`), in its answer, its record and its
    /// invocation.
    id: String,
    /// `None` when no telemetry is installed.
    open: Option<Box<Open>>,
    answered: AtomicBool,
}

struct Open {
    telemetry: &'static dyn CallTelemetry,
    started: SystemTime,
    parent: Span,
    /// For an end without an answer, which has no call to read them from.
    tool: String,
    call_id: String,
}

impl CallSpan {
    /// `call` starting now, the child of `parent` (its batch's span) or of the current span.
    pub(super) fn new(call: &ToolCall, parent: Option<&Span>) -> CallSpan {
        let Some(telemetry) = TELEMETRY.get() else {
            return CallSpan::none();
        };
        let open = Open {
            telemetry: telemetry.as_ref(),
            started: SystemTime::now(),
            parent: parent.cloned().unwrap_or_else(Span::current),
            tool: call.name.clone(),
            call_id: call.id.clone(),
        };
        CallSpan {
            id: crate::call_id::next(),
            open: Some(Box::new(open)),
            answered: AtomicBool::new(false),
        }
    }

    /// Nothing to tell: for an answer whose call's span has ended already (a cancelled or
    /// panicked call's, which said so).
    pub(super) fn none() -> CallSpan {
        CallSpan {
            id: crate::call_id::next(),
            open: None,
            answered: AtomicBool::new(true),
        }
    }

    /// warden's own id of the call.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Tells telemetry how the call ended: what its record says.
    pub(super) fn answered(&self, answer: Answer<'_>) {
        self.answered.store(true, Ordering::Relaxed);
        let Some(open) = &self.open else {
            return;
        };
        let Answer {
            call,
            tool,
            secrets,
            message,
            facts,
            session,
        } = answer;
        let error = message.error.as_ref();
        let facts_of = tool.map(|t| &t.facts);
        open.telemetry.ended(&EndedCall {
            tool: &call.name,
            call_id: &call.id,
            parent: Some(&open.parent),
            started: open.started,
            took: facts.took,
            error: error.map(|e| e.kind.as_str()),
            error_message: error.map(|e| e.message.as_str()),
            result: &message.content,
            arguments: &call.arguments,
            executor: facts_of.map(|f| f.executor.as_str()),
            policy_path: facts_of.map(|f| f.policy.as_str()),
            policy_digest: facts_of.map(|f| f.policy_digest.as_str()),
            session: Some(session),
            attempts: facts.attempts,
            fuel: facts.fuel,
            usage: facts.usage,
            denied: &facts.denied.kept,
            denied_total: facts.denied.total,
            reached_total: facts.reached.total,
            credentials: &facts.credentials.kept,
            credentials_total: facts.credentials.total,
            exit_status: facts.exec.as_ref().and_then(|e| e.exit_status),
            secrets: Some(secrets),
        });
    }
}

impl Drop for CallSpan {
    fn drop(&mut self) {
        let Some(open) = &self.open else {
            return;
        };
        if self.answered.load(Ordering::Relaxed) {
            return;
        }
        // Unwinding from a panic in the executor, or dropped by whoever awaited it.
        let why = match std::thread::panicking() {
            true => "internal",
            false => "cancelled",
        };
        open.telemetry.ended(&EndedCall {
            tool: &open.tool,
            call_id: &open.call_id,
            parent: Some(&open.parent),
            started: open.started,
            took: open.started.elapsed().unwrap_or_default(),
            error: Some(why),
            error_message: None,
            result: "",
            arguments: "",
            executor: None,
            policy_path: None,
            policy_digest: None,
            session: None,
            attempts: 0,
            fuel: None,
            usage: Usage::default(),
            denied: &[],
            denied_total: 0,
            reached_total: 0,
            credentials: &[],
            credentials_total: 0,
            exit_status: None,
            secrets: None,
        });
    }
}

/// What [`CallSpan::answered`] reads: the call, its tool, its answer (already redacted) and
/// the facts of its record.
pub(super) struct Answer<'a> {
    pub(super) call: &'a ToolCall,
    pub(super) tool: Option<&'a Tool>,
    pub(super) secrets: &'a Secrets,
    pub(super) message: &'a ToolMessage,
    pub(super) facts: &'a Facts,
    pub(super) session: u64,
}
