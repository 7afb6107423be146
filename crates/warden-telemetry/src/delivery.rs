//! What the receiver took and what it did not: spans ended, spans delivered, exports that
//! failed. The first failure is logged at once; the totals when export ends.

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The counts, shared by the exporters and the span processor.
#[derive(Default)]
pub(crate) struct Delivery {
    /// The receiver's URL, for the log.
    receiver: String,
    /// Sampled spans that ended: each goes to the queue, or is dropped at a full one.
    ended: AtomicU64,
    /// Spans the receiver accepted.
    delivered: AtomicU64,
    /// Metric exports the receiver refused or never answered.
    metric_exports_failed: AtomicU64,
    /// Set at the first failure, which alone is logged at once.
    failing: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl Delivery {
    pub(crate) fn new(receiver: String) -> Self {
        Self {
            receiver,
            ..Self::default()
        }
    }

    /// `processor`, with every span that ends counted.
    pub(crate) fn count_ended<P: SpanProcessor>(self: &Arc<Self>, processor: P) -> CountEnded<P> {
        CountEnded {
            inner: processor,
            delivery: self.clone(),
        }
    }

    fn failed(&self, what: &str, error: &dyn fmt::Display) {
        let error = error.to_string();
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the OTLP receiver at {} did not take {what} ({error}); calls go on, and what \
                 it does not take is counted and reported when warden ends",
                self.receiver
            );
        }
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
    }

    /// Logs what never reached the receiver, if anything did not.
    pub(crate) fn report(&self) {
        let ended = self.ended.load(Ordering::Relaxed);
        let lost = ended.saturating_sub(self.delivered.load(Ordering::Relaxed));
        let metrics = self.metric_exports_failed.load(Ordering::Relaxed);
        if lost == 0 && metrics == 0 {
            return;
        }
        let last = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "the queue was full or the flush ran out of time".into());
        tracing::warn!(
            spans_lost = lost,
            spans_ended = ended,
            metric_exports_failed = metrics,
            "telemetry not delivered to {}: {lost} of {ended} spans, {metrics} metric exports \
             (last error: {last})",
            self.receiver
        );
    }
}

/// A span processor that counts the spans that end before handing them on.
#[derive(Debug)]
pub(crate) struct CountEnded<P> {
    inner: P,
    delivery: Arc<Delivery>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery").finish_non_exhaustive()
    }
}

impl<P: SpanProcessor> SpanProcessor for CountEnded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.delivery.ended.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter whose successes (spans) and failures are counted.
#[derive(Debug)]
pub(crate) struct Counted<E> {
    inner: E,
    delivery: Arc<Delivery>,
}

impl<E> Counted<E> {
    pub(crate) fn new(inner: E, delivery: Arc<Delivery>) -> Self {
        Self { inner, delivery }
    }
}

/// Lowers the calling thread (an exporter's, which encodes what it sends) to the lowest
/// priority, once: on a machine whose cores the calls keep busy, export then takes what they
/// leave, and a queue that fills meanwhile drops spans (counted) rather than slowing calls.
fn yield_to_calls() {
    thread_local!(static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if LOWERED.replace(true) {
        return;
    }
    // SAFETY: setpriority reads no memory of ours; on Linux, PRIO_PROCESS with 0 is the
    // calling thread alone. Failing (not permitted) leaves the priority as it was.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        yield_to_calls();
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                self.delivery.delivered.fetch_add(spans, Ordering::Relaxed);
            }
            Err(e) => self.delivery.failed("spans", e),
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Counted<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if let Err(e) = &result {
            self.delivery
                .metric_exports_failed
                .fetch_add(1, Ordering::Relaxed);
            self.delivery.failed("metrics", e);
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
