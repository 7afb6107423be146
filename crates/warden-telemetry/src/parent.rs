//! A span that continues its client's trace: W3C trace context carried in MCP's
//! `params._meta` (`traceparent`, `tracestate`).

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Makes `span` a child of the trace `meta` names, when it names a valid one; otherwise the
/// span stays where it is (a root, or the current span's child). Free when export is off.
pub fn continue_trace(span: &tracing::Span, meta: Option<&Map<String, Value>>) {
    let Some(meta) = meta.filter(|m| m.contains_key("traceparent")) else {
        return;
    };
    if span.is_disabled() {
        return;
    }
    let context = TraceContextPropagator::new().extract(&Meta(meta));
    if context.span().span_context().is_valid() {
        // Fails only for a span already started, which a new one is not.
        let _ = span.set_parent(context);
    }
}

/// `_meta`'s string members, as trace-context headers.
struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}
