//! What the process's call telemetry hears: every call once, at its end, under its batch's
//! span, however it ended (answered, failed, refused, panicked, dropped). A binary of its own:
//! the telemetry it installs is the process's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

use serde_json::json;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};
use warden_core::{
    BoxFuture, CallTelemetry, Dispatcher, EndedCall, Executor, Invocation, Output, ToolCall,
    ToolError,
};
use warden_test_support::TestBackend;

/// What a test reads of an [`EndedCall`].
#[derive(Debug, Clone)]
struct Heard {
    call_id: String,
    parent: Option<&'static str>,
    error: Option<String>,
    executor: Option<String>,
    has_digest: bool,
    session: Option<u64>,
    started: SystemTime,
    took: Duration,
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Heard>>);

impl CallTelemetry for Recorder {
    fn ended(&self, c: &EndedCall<'_>) {
        self.0.lock().unwrap().push(Heard {
            call_id: c.call_id.to_owned(),
            parent: c
                .parent
                .and_then(tracing::Span::metadata)
                .map(tracing::Metadata::name),
            error: c.error.map(str::to_owned),
            executor: c.executor.map(str::to_owned),
            has_digest: c.policy_digest.is_some(),
            session: c.session,
            started: c.started,
            took: c.took,
        });
    }
}

/// The process's telemetry, installed by the first test that asks.
fn heard(id: &str) -> Vec<Heard> {
    static RECORDER: OnceLock<Arc<Recorder>> = OnceLock::new();
    let recorder = RECORDER.get_or_init(|| {
        let recorder = Arc::new(Recorder::default());
        assert!(warden_core::export_calls(recorder.clone()));
        recorder
    });
    let all = recorder.0.lock().unwrap();
    all.iter().filter(|h| h.call_id == id).cloned().collect()
}

/// Answers after `ms` milliseconds; panics for `{"panic": true}`, fails for `{"fail": true}`.
struct Obliging;

impl Executor for Obliging {
    fn execute(&self, inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            let ms = inv.arguments["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            assert!(inv.arguments["panic"].is_null(), "asked to panic");
            if inv.arguments["fail"].is_boolean() {
                return Err(ToolError::new(
                    warden_core::ErrorKind::ToolError,
                    "asked to",
                ));
            }
            Ok(Output::default())
        })
    }
}

fn dispatcher(dir: &tempfile::TempDir) -> Dispatcher {
    let toolbox = TestBackend::new()
        .tool("oblige", Arc::new(Obliging))
        .toolbox(dir.path(), "")
        .unwrap();
    Dispatcher::new(Arc::new(toolbox))
}

fn only(id: &str) -> Heard {
    let mut heard = heard(id);
    assert_eq!(heard.len(), 1, "{id} heard once: {heard:?}");
    heard.remove(0)
}

#[tokio::test]
async fn every_call_of_a_batch_is_heard_once_under_the_batch_however_it_ended() {
    heard("");
    // A subscriber, so that spans exist (with none, the batch's is `Span::none()`).
    let _spans = tracing::subscriber::set_default(tracing_subscriber::registry());
    let dir = tempfile::tempdir().unwrap();
    let d = dispatcher(&dir);
    let before = SystemTime::now();
    d.dispatch(vec![
        ToolCall::new("t-ok", "oblige", &json!({"ms": 30})),
        ToolCall::new("t-fail", "oblige", &json!({"fail": true})),
        ToolCall::new("t-panic", "oblige", &json!({"panic": true})),
        ToolCall::new("t-unknown", "nowhere", &json!({})),
    ])
    .await;
    let ok = only("t-ok");
    assert_eq!(ok.error, None);
    assert_eq!(ok.executor.as_deref(), Some("test"));
    assert!(ok.has_digest && ok.session.is_some(), "{ok:?}");
    assert!(
        ok.started >= before && ok.took >= Duration::from_millis(30),
        "{ok:?}"
    );
    assert_eq!(only("t-fail").error.as_deref(), Some("tool_error"));
    assert_eq!(only("t-panic").error.as_deref(), Some("internal"));
    let unknown = only("t-unknown");
    assert_eq!(unknown.error.as_deref(), Some("unknown_tool"));
    assert_eq!(unknown.executor, None);
    for id in ["t-ok", "t-fail", "t-panic", "t-unknown"] {
        assert_eq!(only(id).parent, Some("warden.batch"), "{id}");
    }
}

#[tokio::test]
async fn a_call_whose_future_is_dropped_is_heard_as_cancelled() {
    heard("");
    let dir = tempfile::tempdir().unwrap();
    let d = dispatcher(&dir);
    let call = ToolCall::new("t-dropped", "oblige", &json!({"ms": 20_000}));
    let ran = tokio::time::timeout(Duration::from_millis(100), d.call(call)).await;
    assert!(ran.is_err(), "the call outlived its caller's wait");
    let dropped = only("t-dropped");
    assert_eq!(dropped.error.as_deref(), Some("cancelled"));
    assert_eq!(dropped.session, None, "it never answered");
    assert!(dropped.took < Duration::from_secs(10), "{dropped:?}");
}
