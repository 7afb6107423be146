//! The agent's spans under OpenTelemetry's GenAI names: the run (`invoke_agent warden`), each
//! step, and each request to the model (`chat {model}`, a client span). A step's tool calls
//! are its children through the dispatcher's batch span.

use crate::limits::StopReason;
use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;

/// The run's span.
pub(crate) fn run_span(model: &str) -> Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent warden",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "warden",
        gen_ai.request.model = model,
        warden.stop = Empty,
    )
}

/// Why the run stopped, by the kind its transcript names it with.
pub(crate) fn stopped(span: &Span, reason: &StopReason) {
    if span.is_disabled() {
        return;
    }
    if let Ok(v) = serde_json::to_value(reason) {
        span.record("warden.stop", v["kind"].as_str());
    }
}

/// Step `n`'s span: the model's turn, then its calls.
pub(crate) fn step_span(n: u32) -> Span {
    tracing::info_span!(
        "warden.step",
        otel.name = %format_args!("step {n}"),
        warden.step = i64::from(n),
    )
}

/// One request to the model (a retry is a request of its own).
pub(crate) fn chat_span(model: &str, url: Option<&reqwest::Url>, attempt: u32) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = "openai",
        gen_ai.request.model = model,
        server.address = url.and_then(reqwest::Url::host_str),
        server.port = url.and_then(reqwest::Url::port_or_known_default).map(i64::from),
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        warden.attempt = i64::from(attempt),
    )
}

/// What the model's reply says of itself: its model, why it stopped, its tokens.
pub(crate) fn replied(span: &Span, reply: &Value) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", 200_i64);
    span.record("gen_ai.response.model", reply["model"].as_str());
    let finish = reply["choices"][0]["finish_reason"].as_str();
    span.record("gen_ai.response.finish_reasons", finish);
    let usage = &reply["usage"];
    span.record("gen_ai.usage.input_tokens", usage["prompt_tokens"].as_i64());
    span.record(
        "gen_ai.usage.output_tokens",
        usage["completion_tokens"].as_i64(),
    );
}

/// A request that failed: by its HTTP status when it has one, else by `kind` (what went wrong).
pub(crate) fn failed(span: &Span, status: Option<u16>, kind: &str) {
    span.record("otel.status_code", "ERROR");
    match status {
        Some(code) => {
            span.record("http.response.status_code", i64::from(code));
            span.record("error.type", code.to_string().as_str());
        }
        None => {
            span.record("error.type", kind);
        }
    }
}
