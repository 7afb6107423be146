//! Each ended call as an `execute_tool {tool}` span and its metrics, made with the SDK
//! directly from what warden-core tells of the call ([`EndedCall`]): one span built whole at
//! the end, its start time the call's, not a `tracing` span whose fields are recorded one by
//! one (which cost about three times as much a call).

use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::SdkTracer;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use warden_core::{CallTelemetry, EndedCall};

/// The GenAI conventions' buckets for `gen_ai.execute_tool.duration`, in seconds.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// Calls into spans (when traces are exported) and metrics (when metrics are).
pub(crate) struct Calls {
    pub(crate) tracer: Option<SdkTracer>,
    pub(crate) metrics: Option<Instruments>,
    /// Arguments and results on spans (redacted).
    pub(crate) capture_content: bool,
}

/// The instruments a call feeds.
pub(crate) struct Instruments {
    duration: Histogram<f64>,
    denials: Counter<u64>,
    credential_uses: Counter<u64>,
    bytes_out: Counter<u64>,
    bytes_in: Counter<u64>,
}

impl Instruments {
    pub(crate) fn new(meter: &Meter) -> Instruments {
        Instruments {
            duration: meter
                .f64_histogram("gen_ai.execute_tool.duration")
                .with_unit("s")
                .with_description("How long tool calls took, checks to answer")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            denials: meter
                .u64_counter("warden.denials")
                .with_description("Destinations the gate refused")
                .build(),
            credential_uses: meter
                .u64_counter("warden.credential.uses")
                .with_description("Requests the gate set a credential in")
                .build(),
            bytes_out: meter
                .u64_counter("warden.gate.bytes_out")
                .with_unit("By")
                .build(),
            bytes_in: meter
                .u64_counter("warden.gate.bytes_in")
                .with_unit("By")
                .build(),
        }
    }

    /// The call's duration by tool, executor and outcome (`error.type` absent on success,
    /// as the conventions want); then its refusals, credential uses and bytes, when any.
    fn record(&self, c: &EndedCall<'_>) {
        let mut attributes = Vec::with_capacity(3);
        attributes.push(KeyValue::new("gen_ai.tool.name", c.tool.to_owned()));
        attributes.push(KeyValue::new(
            "warden.executor",
            c.executor.unwrap_or("none").to_owned(),
        ));
        if let Some(kind) = c.error {
            attributes.push(KeyValue::new("error.type", kind));
        }
        self.duration.record(c.took.as_secs_f64(), &attributes);
        let counts = [
            (&self.denials, c.denied_total),
            (&self.credential_uses, c.credentials_total),
            (&self.bytes_out, c.usage.net_bytes_out.unwrap_or(0)),
            (&self.bytes_in, c.usage.net_bytes_in.unwrap_or(0)),
        ];
        for (counter, n) in counts {
            if n > 0 {
                counter.add(n, &attributes);
            }
        }
    }
}

impl CallTelemetry for Calls {
    fn ended(&self, c: &EndedCall<'_>) {
        if let Some(metrics) = &self.metrics {
            metrics.record(c);
        }
        if let Some(tracer) = &self.tracer {
            self.span(tracer, c);
        }
    }
}

impl Calls {
    fn span(&self, tracer: &SdkTracer, c: &EndedCall<'_>) {
        let parent = c
            .parent
            .map(OpenTelemetrySpanExt::context)
            .unwrap_or_default();
        let mut a = Vec::with_capacity(24);
        a.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        a.push(KeyValue::new("gen_ai.tool.name", c.tool.to_owned()));
        a.push(KeyValue::new("gen_ai.tool.call.id", c.call_id.to_owned()));
        a.push(KeyValue::new("gen_ai.tool.type", "function"));
        if let Some(kind) = c.error {
            a.push(KeyValue::new("error.type", kind));
        }
        let texts = [
            ("warden.executor", c.executor),
            ("warden.policy.path", c.policy_path),
            ("warden.policy.digest", c.policy_digest),
        ];
        for (key, text) in texts {
            if let Some(text) = text {
                a.push(KeyValue::new(key, text.to_owned()));
            }
        }
        if let Some(session) = c.session {
            a.push(KeyValue::new("warden.session.id", int(session)));
            a.push(KeyValue::new("warden.attempts", i64::from(c.attempts)));
        }
        // Only what was measured, and counts that are not zero.
        let u = &c.usage;
        let measured = [
            ("warden.fuel", c.fuel),
            ("warden.usage.peak_memory_bytes", u.peak_memory_bytes),
            ("warden.usage.net_bytes_out", u.net_bytes_out),
            ("warden.usage.net_bytes_in", u.net_bytes_in),
            ("warden.usage.net_connections", u.net_connections),
            ("warden.denied_count", Some(c.denied_total)),
            ("warden.reached_count", Some(c.reached_total)),
            ("warden.credential_uses", Some(c.credentials_total)),
        ];
        for (key, value) in measured {
            if let Some(n) = value.filter(|n| *n > 0) {
                a.push(KeyValue::new(key, int(n)));
            }
        }
        if let Some(cpu_ms) = u.cpu_ms {
            a.push(KeyValue::new("warden.usage.cpu_ms", cpu_ms));
        }
        if let Some(status) = c.exit_status {
            a.push(KeyValue::new("warden.exec.exit_status", i64::from(status)));
        }
        if self.capture_content {
            let arguments = c.redact(c.arguments).into_owned();
            a.push(KeyValue::new("gen_ai.tool.call.arguments", arguments));
            a.push(KeyValue::new(
                "gen_ai.tool.call.result",
                c.result.to_owned(),
            ));
        }
        let mut span = tracer
            .span_builder(format!("execute_tool {}", c.tool))
            .with_kind(SpanKind::Internal)
            .with_start_time(c.started)
            .with_attributes(a)
            .start_with_context(tracer, &parent);
        for d in c.denied {
            let destination = Value::from(c.redact(&d.destination).into_owned());
            let reason = Value::from(c.redact(&d.reason).into_owned());
            span.add_event(
                "warden.denial",
                vec![
                    KeyValue::new("destination", destination),
                    KeyValue::new("reason", reason),
                ],
            );
        }
        for host in c.credentials {
            let address = KeyValue::new("server.address", host.clone());
            span.add_event("warden.credential", vec![address]);
        }
        if c.error.is_some() {
            let description = match (self.capture_content, c.error_message) {
                (true, Some(message)) => message.to_owned(),
                _ => String::new(),
            };
            span.set_status(Status::error(description));
        }
        span.end_with_timestamp(c.started + c.took);
    }
}

/// A count as OpenTelemetry's integers are: signed.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
