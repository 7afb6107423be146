//! OpenTelemetry export of warden's calls: OTLP over HTTP/protobuf, off unless an endpoint is
//! given, and never on a call's path.
//!
//! The libraries write `tracing` spans under OpenTelemetry's names (a batch's, an MCP
//! request's, an agent's steps and `chat` requests), and warden-core tells each ended call to
//! the process's [`warden_core::CallTelemetry`]; this crate turns both into OTLP when the
//! operator asks for it ([`Telemetry::layer`] and [`Telemetry::calls`]). Every setting is the
//! standard `OTEL_*` environment variable of the OpenTelemetry SDKs, read where the SDK reads
//! it:
//!
//! | Setting | Default |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` (or `--otlp-endpoint`): traces at `/v1/traces`, metrics at `/v1/metrics` | unset: export is off |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `…_METRICS_ENDPOINT`: one signal's URL, as is | unset |
//! | `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`), `OTEL_EXPORTER_OTLP_TIMEOUT` (ms) | none, 10 000 |
//! | `OTEL_SERVICE_NAME` | `warden` ([`SERVICE_NAME`]) |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | `parentbased_always_on` |
//! | `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER` = `none` | `otlp` |
//! | `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_SCHEDULE_DELAY` (ms) | 2048 spans, 5000 |
//! | `OTEL_METRIC_EXPORT_INTERVAL` (ms) | 60 000 |
//! | `OTEL_SDK_DISABLED=true` | export as configured |
//! | [`CAPTURE_CONTENT`]`=true`: arguments and results on `execute_tool` spans, redacted | off |
//!
//! Spans wait in a bounded queue and go out from a thread of their own; a full queue drops
//! them, and a receiver that fails is reported once. A failed export is not retried (the
//! exporter's backoff held a short command's exit for 1.7 s when the receiver was down): its
//! spans are counted as lost, and the next batch tries again. At the end
//! ([`Telemetry::shutdown`]), what is queued is sent within [`SHUTDOWN_WAIT`] and what never
//! arrived is counted.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, RetryPolicy, SpanExporter, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use std::sync::Arc;
use std::time::Duration;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

mod calls;
mod delivery;
mod parent;

use calls::{Calls, Instruments};
use delivery::{Counted, Delivery};
pub use parent::continue_trace;

/// The service name spans carry when `OTEL_SERVICE_NAME` does not name one.
pub const SERVICE_NAME: &str = "warden";
/// Set to `true`, `execute_tool` spans carry the call's arguments and result (redacted of the
/// tool's secrets): OpenTelemetry's switch for GenAI content.
pub const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
/// How long [`Telemetry::shutdown`] waits for what is queued to be sent.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Where warden's telemetry goes, as the environment and `--otlp-endpoint` say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where spans go: `None` leaves that to the exporter's reading of the environment.
    traces: Signal,
    metrics: Signal,
    /// Arguments and results on spans.
    capture_content: bool,
    service_name: String,
    /// Where the receiver is, as the log names it.
    receiver: String,
}

/// One signal's destination.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Signal {
    Off,
    /// The URL, as given or made from a base endpoint.
    At(String),
    /// As the exporter reads it from its `OTEL_EXPORTER_OTLP_…` variables.
    FromEnvironment,
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{variable}={value} asks for OTLP over {value}; warden exports OTLP over HTTP/protobuf \
         only: unset it or set it to http/protobuf"
    )]
    Protocol {
        variable: &'static str,
        value: String,
    },
    #[error("the OTLP {signal} exporter: {source}; check the OTEL_EXPORTER_OTLP_* settings")]
    Exporter {
        signal: &'static str,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

impl Config {
    /// The configuration `endpoint` (a base URL, like `OTEL_EXPORTER_OTLP_ENDPOINT`) and the
    /// environment make, or `None` when export is off.
    pub fn new(endpoint: Option<&str>) -> Result<Option<Config>, Error> {
        Self::from_lookup(endpoint, |name| std::env::var(name).ok())
    }

    fn from_lookup(
        endpoint: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Config>, Error> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        ] {
            if let Some(value) = set(variable).filter(|v| v.trim() != "http/protobuf") {
                return Err(Error::Protocol { variable, value });
            }
        }
        let signal = |exporter: &str, own: &str, path: &str| {
            if set(exporter).is_some_and(|v| v.trim() == "none") {
                Signal::Off
            } else if let Some(base) = endpoint {
                Signal::At(format!("{}{path}", base.trim_end_matches('/')))
            } else if set(own).is_some() || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
                Signal::FromEnvironment
            } else {
                Signal::Off
            }
        };
        let traces = signal(
            "OTEL_TRACES_EXPORTER",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "/v1/traces",
        );
        let metrics = signal(
            "OTEL_METRICS_EXPORTER",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "/v1/metrics",
        );
        if traces == Signal::Off && metrics == Signal::Off {
            return Ok(None);
        }
        let receiver = endpoint.map(str::to_owned).or_else(|| {
            [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            ]
            .into_iter()
            .find_map(set)
        });
        Ok(Some(Config {
            traces,
            metrics,
            receiver: receiver.unwrap_or_default(),
            capture_content: set(CAPTURE_CONTENT).is_some_and(|v| v.trim() == "true"),
            service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| SERVICE_NAME.into()),
        }))
    }
}

/// Export running: the providers and what their receivers did not take.
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
    delivery: Arc<Delivery>,
    capture_content: bool,
}

impl Telemetry {
    /// Starts the exporters' threads. Call it outside an async runtime: the HTTP client they
    /// use blocks.
    pub fn start(config: &Config) -> Result<Telemetry, Error> {
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let delivery = Arc::new(Delivery::new(config.receiver.clone()));
        let traces = match &config.traces {
            Signal::Off => None,
            signal => {
                let builder = SpanExporter::builder().with_http();
                let exporter = with_endpoint(builder, signal)
                    .with_retry_policy(RetryPolicy::disabled())
                    .build()
                    .map_err(|source| Error::Exporter {
                        signal: "traces",
                        source,
                    })?;
                let exporter = Counted::new(exporter, delivery.clone());
                let processor = BatchSpanProcessor::builder(exporter).build();
                let provider = SdkTracerProvider::builder()
                    .with_span_processor(delivery.count_ended(processor))
                    .with_resource(resource.clone())
                    .build();
                Some(provider)
            }
        };
        let metrics = match &config.metrics {
            Signal::Off => None,
            signal => {
                let builder = MetricExporter::builder().with_http();
                let exporter = with_endpoint(builder, signal)
                    .with_retry_policy(RetryPolicy::disabled())
                    .build()
                    .map_err(|source| Error::Exporter {
                        signal: "metrics",
                        source,
                    })?;
                let reader = PeriodicReader::builder(Counted::new(exporter, delivery.clone()));
                let provider = SdkMeterProvider::builder()
                    .with_reader(reader.build())
                    .with_resource(resource)
                    .build();
                Some(provider)
            }
        };
        Ok(Telemetry {
            traces,
            metrics,
            delivery,
            capture_content: config.capture_content,
        })
    }

    /// What turns ended calls into `execute_tool` spans and metrics: install it with
    /// [`warden_core::export_calls`].
    pub fn calls(&self) -> Arc<dyn warden_core::CallTelemetry> {
        Arc::new(Calls {
            tracer: self.traces.as_ref().map(|p| p.tracer("warden")),
            metrics: self
                .metrics
                .as_ref()
                .map(|p| Instruments::new(&p.meter("warden"))),
            capture_content: self.capture_content,
        })
    }

    /// The layer that hands warden's `tracing` spans to the exporter: only warden's own
    /// targets, at `info` and above.
    pub fn layer<S>(&self) -> Option<impl Layer<S> + use<S>>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        self.traces.as_ref().map(|provider| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("warden"))
                .with_tracked_inactivity(false)
                .with_threads(false)
                .with_location(false)
                .with_target(false)
                .with_filter(
                    Targets::new()
                        .with_target("warden", LevelFilter::INFO)
                        .with_target("warden_telemetry", LevelFilter::OFF),
                )
        })
    }

    /// Sends what is queued (waiting at most [`SHUTDOWN_WAIT`]) and says on the log what never
    /// reached the receiver. Call it outside an async runtime.
    pub fn shutdown(self) {
        // Side by side, so that a receiver that never answers holds warden's exit for one
        // wait, not one per signal.
        std::thread::scope(|scope| {
            if let Some(traces) = &self.traces {
                scope.spawn(|| traces.shutdown_with_timeout(SHUTDOWN_WAIT));
            }
            if let Some(metrics) = &self.metrics {
                scope.spawn(|| metrics.shutdown_with_timeout(SHUTDOWN_WAIT));
            }
        });
        self.delivery.report();
    }
}

/// Sets the exporter's URL when warden chose it; otherwise the exporter reads its variables.
fn with_endpoint<B: opentelemetry_otlp::WithExportConfig>(builder: B, signal: &Signal) -> B {
    match signal {
        Signal::At(url) => builder.with_endpoint(url.clone()),
        Signal::Off | Signal::FromEnvironment => builder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<Config>, Error> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(flag, |name| vars.get(name).cloned())
    }

    #[test]
    fn export_is_off_without_an_endpoint() {
        assert_eq!(config(None, &[]).ok().flatten(), None);
        let disabled = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(config(None, &disabled).ok().flatten(), None);
    }

    #[test]
    fn the_flag_is_a_base_endpoint_for_both_signals() {
        let c = config(Some("http://127.0.0.1:4318/"), &[]).ok().flatten();
        let c = c.map(|c| (c.traces, c.metrics, c.service_name));
        assert_eq!(
            c,
            Some((
                Signal::At("http://127.0.0.1:4318/v1/traces".into()),
                Signal::At("http://127.0.0.1:4318/v1/metrics".into()),
                SERVICE_NAME.into()
            ))
        );
    }

    #[test]
    fn a_traces_endpoint_alone_exports_no_metrics() {
        let vars = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/t")];
        let c = config(None, &vars).ok().flatten();
        let c = c.map(|c| (c.traces, c.metrics));
        assert_eq!(c, Some((Signal::FromEnvironment, Signal::Off)));
    }

    #[test]
    fn grpc_is_refused_by_name() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        let message = config(None, &vars).err().map(|e| e.to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
                    && m.contains("http/protobuf")),
            "{message:?}"
        );
    }

    #[test]
    fn content_is_captured_only_when_asked() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h");
        let off = config(None, &[base]).ok().flatten();
        assert_eq!(off.map(|c| c.capture_content), Some(false));
        let on = config(None, &[base, (CAPTURE_CONTENT, "true")])
            .ok()
            .flatten();
        assert_eq!(on.map(|c| c.capture_content), Some(true));
    }
}
