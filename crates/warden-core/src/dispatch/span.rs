//! A call as `tracing` sees it, under OpenTelemetry's names: an `execute_tool {tool}` span
//! (GenAI semantic conventions, warden's own attributes under `warden.`), an event per
//! refusal and per credential use, and its metric events. Nothing here exports: with no
//! subscriber that wants them (warden-telemetry's, when an operator turns export on) the
//! spans are disabled and cost a check each.

use super::Facts;
use crate::message::{ToolCall, ToolMessage};
use crate::redact::Secrets;
use crate::toolbox::Tool;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::Span;
use tracing::field::Empty;

/// The `tracing` target of the metric events (fields named `histogram.…`,
/// `monotonic_counter.…`): kept apart so that they become metrics, not span events.
pub const METRICS_TARGET: &str = "warden_metrics";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Puts each call's arguments and result (redacted of the tool's secrets) on its span: off
/// unless the operator turns it on, for this whole process.
pub fn capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// A batch's span, the parent of its calls' spans.
pub(super) fn batch_span(calls: usize) -> Span {
    tracing::info_span!(
        "warden.batch",
        otel.name = "warden.batch",
        warden.batch.calls = int(calls as u64),
        warden.batch.failed = Empty,
    )
}

/// One call's span, from before its checks to its answer. Ended without an answer (its
/// future dropped: a cancelled call) it says so.
pub(super) struct CallSpan {
    span: Span,
    answered: AtomicBool,
}

impl CallSpan {
    /// A span for `call`, the child of `parent` (the batch's span), or of the current span.
    pub(super) fn new(call: &ToolCall, parent: Option<&Span>) -> CallSpan {
        // Off (no layer wants `info` spans), a call costs one compare, not a lookup of the
        // current span.
        if !tracing::level_enabled!(tracing::Level::INFO) {
            return CallSpan::none();
        }
        let parent = match parent {
            Some(p) => p.id(),
            None => Span::current().id(),
        };
        let span = tracing::info_span!(
            parent: parent,
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.kind = "internal",
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.type = "function",
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            error.type = Empty,
            warden.executor = Empty,
            warden.policy.path = Empty,
            warden.policy.digest = Empty,
            warden.session.id = Empty,
            warden.attempts = Empty,
            warden.fuel = Empty,
            warden.usage.cpu_ms = Empty,
            warden.usage.peak_memory_bytes = Empty,
            warden.usage.net_bytes_out = Empty,
            warden.usage.net_bytes_in = Empty,
            warden.usage.net_connections = Empty,
            warden.denied_count = Empty,
            warden.reached_count = Empty,
            warden.credential_uses = Empty,
            warden.exec.exit_status = Empty,
        );
        CallSpan {
            span,
            answered: AtomicBool::new(false),
        }
    }

    /// No span: for an answer whose call's span has ended already (a cancelled or panicked
    /// call's, which says so).
    pub(super) fn none() -> CallSpan {
        CallSpan {
            span: Span::none(),
            answered: AtomicBool::new(true),
        }
    }

    pub(super) fn span(&self) -> &Span {
        &self.span
    }

    /// Records how the call ended: what the call record says, on the span and as metrics.
    pub(super) fn answered(&self, answer: Answer<'_>) {
        self.answered.store(true, Ordering::Relaxed);
        let Answer {
            call,
            tool,
            secrets,
            message,
            facts,
            session,
        } = answer;
        let kind = message.error.as_ref().map(|e| e.kind.as_str());
        metrics(&call.name, tool, kind, facts);
        let span = &self.span;
        if span.is_disabled() {
            return;
        }
        if let Some(kind) = kind {
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
        if let Some(t) = tool {
            span.record("warden.executor", t.facts.executor.as_str());
            span.record("warden.policy.path", t.facts.policy.as_str());
            span.record("warden.policy.digest", t.facts.policy_digest.as_str());
        }
        span.record("warden.session.id", int(session));
        span.record("warden.attempts", i64::from(facts.attempts));
        // Only what was measured, and counts that are not zero: each record costs.
        let u = &facts.usage;
        let measured = [
            ("warden.fuel", facts.fuel),
            ("warden.usage.peak_memory_bytes", u.peak_memory_bytes),
            ("warden.usage.net_bytes_out", u.net_bytes_out),
            ("warden.usage.net_bytes_in", u.net_bytes_in),
            ("warden.usage.net_connections", u.net_connections),
            ("warden.denied_count", Some(facts.denied.total)),
            ("warden.reached_count", Some(facts.reached.total)),
            ("warden.credential_uses", Some(facts.credentials.total)),
        ];
        for (field, value) in measured {
            if let Some(n) = value.filter(|n| *n > 0) {
                span.record(field, int(n));
            }
        }
        if let Some(cpu_ms) = u.cpu_ms {
            span.record("warden.usage.cpu_ms", cpu_ms);
        }
        if let Some(status) = facts.exec.as_ref().and_then(|e| e.exit_status) {
            span.record("warden.exec.exit_status", status);
        }
        for d in &facts.denied.kept {
            tracing::info!(
                parent: span,
                destination = %secrets.redact(&d.destination),
                reason = %secrets.redact(&d.reason),
                "warden.denial"
            );
        }
        for host in &facts.credentials.kept {
            tracing::info!(parent: span, server.address = %host, "warden.credential");
        }
        if CAPTURE_CONTENT.load(Ordering::Relaxed) {
            span.record(
                "gen_ai.tool.call.arguments",
                secrets.redact(&call.arguments).as_str(),
            );
            span.record("gen_ai.tool.call.result", message.content.as_str());
            if let Some(e) = &message.error {
                span.record("otel.status_description", e.message.as_str());
            }
        }
    }
}

impl Drop for CallSpan {
    fn drop(&mut self) {
        if !self.answered.load(Ordering::Relaxed) && !self.span.is_disabled() {
            // Unwinding from a panic in the executor, or dropped by whoever awaited it.
            let why = match std::thread::panicking() {
                true => "internal",
                false => "cancelled",
            };
            self.span.record("error.type", why);
            self.span.record("otel.status_code", "ERROR");
        }
    }
}

/// A count as OpenTelemetry's integers are: signed (the exporter writes an unsigned field as
/// text).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What [`CallSpan::answered`] records: the call, its tool, its answer (already redacted) and
/// the facts of its record.
pub(super) struct Answer<'a> {
    pub(super) call: &'a ToolCall,
    pub(super) tool: Option<&'a Tool>,
    pub(super) secrets: &'a Secrets,
    pub(super) message: &'a ToolMessage,
    pub(super) facts: &'a Facts,
    pub(super) session: u64,
}

/// The call's metric events: its duration by tool, executor and outcome; then, when there are
/// any, its refusals, its credential uses and its bytes through the gate, counted. `error.type`
/// is absent on success, as the conventions want (a `None` field is not recorded).
fn metrics(tool_name: &str, tool: Option<&Tool>, error: Option<&str>, facts: &Facts) {
    let executor = tool.map_or("none", |t| t.facts.executor.as_str());
    // One set of attributes for both events.
    macro_rules! metric {
        ($($figures:tt)*) => {
            tracing::event!(
                target: METRICS_TARGET,
                tracing::Level::TRACE,
                gen_ai.tool.name = tool_name,
                warden.executor = executor,
                error.type = error,
                $($figures)*
            )
        };
    }
    metric!(histogram.gen_ai.execute_tool.duration = facts.took.as_secs_f64());
    let denials = facts.denied.total;
    let credentials = facts.credentials.total;
    let out = facts.usage.net_bytes_out.unwrap_or(0);
    let back = facts.usage.net_bytes_in.unwrap_or(0);
    if denials == 0 && credentials == 0 && out == 0 && back == 0 {
        return;
    }
    metric!(
        monotonic_counter.warden.denials = denials,
        monotonic_counter.warden.credential.uses = credentials,
        monotonic_counter.warden.gate.bytes_out = out,
        monotonic_counter.warden.gate.bytes_in = back,
    );
}
