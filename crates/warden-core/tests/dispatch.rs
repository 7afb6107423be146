//! The dispatcher's promises that hold for any executor, here a fake one: every call gets one
//! message and one call-log record, and the observer hears of it — a panic, an unknown tool,
//! malformed arguments, a run limit, a cancellation alike.

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_core::{
    Admission, BoxFuture, CallLog, CallObserver, Dispatcher, ErrorKind, Executor, Invocation,
    Output, RunLimitHit, RunLimits, ToolCall, ToolError, ToolMessage,
};
use warden_test_support::TestBackend;

/// Answers `{"n": N}` with N; panics when N is 13, fails when N is negative, first sleeps
/// `ms` milliseconds when asked to.
struct Superstitious;

impl Executor for Superstitious {
    fn execute(&self, inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            let n = inv.arguments["n"].as_i64().unwrap_or_default();
            if let Some(ms) = inv.arguments["ms"].as_u64() {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            assert!(n != 13, "unlucky number");
            if n < 0 {
                return Err(ToolError::new(ErrorKind::ToolError, "negative"));
            }
            Ok(Output {
                content: n.to_string(),
                ..Output::default()
            })
        })
    }
}

/// Notes the deadline and the time to answer by of its invocation, then sleeps past both.
#[derive(Default)]
struct Sleepy(Mutex<Option<(Instant, Instant)>>);

impl Executor for Sleepy {
    fn execute(&self, inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        *self.0.lock().unwrap() = Some((inv.deadline, inv.answer_by()));
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Output::default())
        })
    }
}

/// Every answer the observer heard, in order.
#[derive(Default)]
struct Heard(Mutex<Vec<ToolMessage>>);

impl Heard {
    fn ids(&self) -> Vec<String> {
        let heard = self.0.lock().unwrap();
        heard.iter().map(|m| m.tool_call_id.clone()).collect()
    }
}

impl CallObserver for Heard {
    fn started(&self, _: &ToolCall, _: &Value) {}

    fn answered(&self, message: &ToolMessage) {
        self.0.lock().unwrap().push(message.clone());
    }
}

/// A dispatcher over `count` with a call log and an observer.
struct Bench {
    _dir: tempfile::TempDir,
    log: Arc<CallLog>,
    dispatcher: Dispatcher,
    heard: Arc<Heard>,
}

impl Bench {
    fn new(run: RunLimits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let toolbox = TestBackend::new()
            .tool("count", Arc::new(Superstitious))
            .toolbox(dir.path(), "")
            .unwrap();
        let log = Arc::new(CallLog::open(&dir.path().join("calls.jsonl")).unwrap());
        let heard = Arc::new(Heard::default());
        let admission = Admission {
            run,
            ..Admission::default()
        };
        let dispatcher = Dispatcher::with_admission(Arc::new(toolbox), admission)
            .call_log(log.clone())
            .observer(heard.clone());
        Self {
            _dir: dir,
            log,
            dispatcher,
            heard,
        }
    }

    /// The call records of `id`.
    fn records(&self, id: &str) -> Vec<Value> {
        self.log.flush();
        std::fs::read_to_string(self.log.path())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["event"] == "call" && r["tool_call_id"] == id)
            .collect()
    }

    /// The one call record of `id`.
    fn record(&self, id: &str) -> Value {
        let mut records = self.records(id);
        assert_eq!(records.len(), 1, "one record of {id}: {records:?}");
        records.remove(0)
    }
}

/// A call's record is in the file, unflushed, when its answer comes back: a process killed
/// right after it answered keeps the record (the file is read without `flush`).
#[tokio::test]
async fn a_calls_record_is_in_the_file_when_its_answer_comes_back() {
    let b = Bench::new(RunLimits::default());
    let in_file = |id: &str| {
        std::fs::read_to_string(b.log.path())
            .unwrap()
            .lines()
            .any(|l| serde_json::from_str::<Value>(l).unwrap()["tool_call_id"] == id)
    };
    for i in 0..50 {
        let id = format!("alone{i}");
        let arguments = if i % 2 == 0 {
            json!({"n": i})
        } else {
            json!({"n": -1})
        };
        b.dispatcher.call(count(&id, arguments)).await;
        assert!(in_file(&id), "{id} answered without its record");
    }
    let unknown = ToolCall::new("nameless", "no-such-tool", &json!({}));
    b.dispatcher.call(unknown).await;
    assert!(
        in_file("nameless"),
        "an unknown tool's call answered without its record"
    );
    let calls: Vec<ToolCall> = (0..20)
        .map(|n| count(&format!("batch{n}"), json!({"n": n})))
        .collect();
    b.dispatcher.dispatch(calls).await;
    for n in 0..20 {
        assert!(
            in_file(&format!("batch{n}")),
            "batch{n} answered without its record"
        );
    }
}

fn count(id: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, "count", &arguments)
}

fn kind(m: &ToolMessage) -> ErrorKind {
    m.error.as_ref().expect("an error").kind
}

#[tokio::test]
async fn a_panicking_executor_fails_only_its_own_call_and_is_logged_and_heard() {
    let b = Bench::new(RunLimits::default());
    let calls: Vec<ToolCall> = [12, 13, 14]
        .iter()
        .map(|n| count(&format!("c{n}"), json!({"n": n})))
        .collect();
    let messages = b.dispatcher.dispatch(calls).await;
    let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents[0], "12");
    assert_eq!(contents[2], "14");
    let e = messages[1].error.as_ref().unwrap();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("panicked"));
    assert_eq!(messages[1].tool_call_id, "c13");
    let _: Value = messages[1].to_openai();

    // A lone call runs in the caller's task; its panic is caught all the same.
    let alone = b.dispatcher.call(count("solo", json!({"n": 13}))).await;
    assert_eq!(kind(&alone), ErrorKind::Internal);
    let next = b.dispatcher.call(count("after", json!({"n": 1}))).await;
    assert_eq!(next.content, "1");

    for id in ["c13", "solo"] {
        let r = b.record(id);
        assert_eq!(r["outcome"], "internal", "{r}");
        assert_eq!(r["tool"], "count", "{r}");
        assert_eq!(r["executor"], "test", "the tool is known: {r}");
        assert!(r["message"].as_str().unwrap().contains("panicked"), "{r}");
    }
    let mut heard = b.heard.ids();
    heard.sort();
    assert_eq!(heard, ["after", "c12", "c13", "c14", "solo"]);
}

#[tokio::test]
async fn unknown_tools_and_malformed_arguments_are_logged_and_heard_alone_and_in_batches() {
    let b = Bench::new(RunLimits::default());
    let unknown = ToolCall::new("u", "cuont", &json!({"n": 1}));
    let malformed = |id: &str| ToolCall {
        id: id.into(),
        name: "count".into(),
        arguments: r#"{"n": "#.into(),
    };
    let m = b.dispatcher.call(unknown.clone()).await;
    assert_eq!(kind(&m), ErrorKind::UnknownTool);
    assert!(m.content.contains("Did you mean `count`"), "{m:?}");
    let m = b.dispatcher.call(malformed("m")).await;
    assert_eq!(kind(&m), ErrorKind::MalformedArguments);

    let batch = vec![
        ToolCall {
            id: "bu".into(),
            ..unknown
        },
        malformed("bm"),
        count("ok", json!({"n": 1})),
    ];
    let m = b.dispatcher.dispatch(batch).await;
    assert_eq!(kind(&m[0]), ErrorKind::UnknownTool);
    assert_eq!(kind(&m[1]), ErrorKind::MalformedArguments);
    assert_eq!(m[2].content, "1");

    for id in ["u", "bu"] {
        let r = b.record(id);
        assert_eq!(r["outcome"], "unknown_tool", "{r}");
        assert_eq!(r["tool"], "cuont", "{r}");
        assert!(r.get("executor").is_none(), "no such tool: {r}");
    }
    for id in ["m", "bm"] {
        let r = b.record(id);
        assert_eq!(r["outcome"], "malformed_arguments", "{r}");
        assert_eq!(r["executor"], "test", "{r}");
        assert_eq!(r["attempts"], 0, "never ran: {r}");
    }
    let mut heard = b.heard.ids();
    heard.sort();
    assert_eq!(heard, ["bm", "bu", "m", "ok", "u"]);
}

#[tokio::test]
async fn a_reused_id_is_logged_but_not_run_and_not_heard() {
    let b = Bench::new(RunLimits::default());
    let batch = vec![count("x", json!({"n": 1})), count("x", json!({"n": 2}))];
    let m = b.dispatcher.dispatch(batch).await;
    assert_eq!(m[0].content, "1");
    assert_eq!(kind(&m[1]), ErrorKind::InvalidArguments);
    assert!(m[1].content.contains("used by an earlier call"), "{m:?}");
    let outcomes: Vec<Value> = b
        .records("x")
        .iter()
        .map(|r| r["outcome"].clone())
        .collect();
    assert!(
        outcomes.contains(&json!("success")) && outcomes.contains(&json!("invalid_arguments")),
        "{outcomes:?}"
    );
    // The observer knows calls by id, and `x` is the call that ran.
    let heard = b.heard.0.lock().unwrap();
    assert_eq!(heard.len(), 1);
    assert_eq!(heard[0].content, "1");
}

#[tokio::test]
async fn run_limits_refuse_alone_and_in_batches_and_seeded_counts_carry_over() {
    let b = Bench::new(RunLimits {
        max_calls: Some(2),
        max_calls_per_tool: None,
    });
    let d = &b.dispatcher;
    assert_eq!(d.call(count("a", json!({"n": 1}))).await.content, "1");
    let unknown = d.call(ToolCall::new("u", "nosuch", &json!({}))).await;
    assert_eq!(kind(&unknown), ErrorKind::UnknownTool);
    assert_eq!(d.calls_counted(), 1, "a call of no tool does not count");
    let m = d
        .dispatch(vec![
            count("b", json!({"n": 2})),
            count("c", json!({"n": 3})),
        ])
        .await;
    assert_eq!(m[0].content, "2");
    let e = m[1].error.as_ref().unwrap();
    assert_eq!(RunLimitHit::of(e), Some(RunLimitHit::MaxCalls { limit: 2 }));
    assert_eq!(b.record("c")["outcome"], "limit_exceeded");
    let alone = d.call(count("d", json!({"n": 4}))).await;
    assert_eq!(
        RunLimitHit::of(alone.error.as_ref().unwrap()),
        Some(RunLimitHit::MaxCalls { limit: 2 })
    );
    assert_eq!(b.record("d")["outcome"], "limit_exceeded");
    assert!(b.heard.ids().contains(&"d".to_owned()));
    assert_eq!(d.calls_counted(), 2);

    // A run carried on by another process: its earlier calls count from the start.
    let resumed = d.new_run(RunLimits {
        max_calls: Some(5),
        max_calls_per_tool: Some(3),
    });
    assert_eq!(resumed.calls_counted(), 0, "a new run counts from zero");
    resumed.seed_counts(["count", "count", "nosuch"]);
    assert_eq!(
        resumed.calls_counted(),
        2,
        "a tool the toolbox lacks is left out"
    );
    assert_eq!(resumed.call(count("e", json!({"n": 5}))).await.content, "5");
    let over = resumed.call(count("f", json!({"n": 6}))).await;
    assert_eq!(
        RunLimitHit::of(over.error.as_ref().unwrap()),
        Some(RunLimitHit::MaxCallsPerTool {
            tool: "count".into(),
            limit: 3
        })
    );
    assert_eq!(d.calls_counted(), 2, "the first run is its own");
}

#[tokio::test]
async fn cancelled_calls_are_answered_logged_and_heard() {
    let b = Bench::new(RunLimits::default());
    let d = b.dispatcher.clone().fail_fast(true);
    let began = Instant::now();
    let m = d
        .dispatch(vec![
            count("slow", json!({"n": 1, "ms": 20_000})),
            count("bad", json!({"n": -1})),
        ])
        .await;
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "the slow call was stopped"
    );
    assert_eq!(kind(&m[1]), ErrorKind::ToolError);
    assert_eq!(kind(&m[0]), ErrorKind::Unavailable);
    assert!(m[0].content.contains("fail_fast"), "{m:?}");
    assert_eq!(b.record("slow")["outcome"], "unavailable");

    // A front end that dropped a call's future answers it through the dispatcher.
    let call = count("gone", json!({"n": 1}));
    let error = ToolError::new(ErrorKind::Unavailable, "cancelled: the client went away");
    let m = b
        .dispatcher
        .answer_cancelled(&call, error, Duration::from_millis(5));
    assert_eq!(kind(&m), ErrorKind::Unavailable);
    let r = b.record("gone");
    assert_eq!(r["outcome"], "unavailable");
    assert_eq!(r["message"], "cancelled: the client went away");
    assert_eq!(r["executor"], "test");
    let mut heard = b.heard.ids();
    heard.sort();
    assert_eq!(heard, ["bad", "gone", "slow"]);
}

/// The dispatcher owns a call's deadline: the executor is handed it, with the time to answer
/// by a little before it, and a call not answered by it gets the one wording of a timeout,
/// naming the limit and carrying it as `timeout_ms`.
#[tokio::test]
async fn a_call_past_its_deadline_is_answered_a_timeout_naming_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let sleepy = Arc::new(Sleepy::default());
    let toolbox = TestBackend::new()
        .tool("sleepy", sleepy.clone())
        .toolbox(dir.path(), "[limits]\ntimeout = \"300ms\"")
        .unwrap();
    let d = Dispatcher::new(Arc::new(toolbox));
    let start = Instant::now();
    let m = d.call(ToolCall::new("late", "sleepy", &json!({}))).await;
    let took = start.elapsed();
    let e = m.error.as_ref().expect("a timeout");
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert_eq!(
        e.message,
        "the tool did not finish within its time limit of 300ms and was stopped; try smaller \
         input or a cheaper request"
    );
    assert_eq!(e.details["timeout_ms"], 300);
    let limit = Duration::from_millis(300);
    assert!(took >= limit && took < Duration::from_secs(3), "{took:?}");
    let (deadline, answer_by) = sleepy.0.lock().unwrap().expect("the executor ran");
    assert!(deadline >= start + limit && deadline <= start + took);
    assert_eq!(deadline - answer_by, Duration::from_millis(15));
}

/// Callers reuse their ids (`call-1` in every batch file); warden's own id of each call, in its
/// answer and its record, is new every time: this process's instance part, then a count.
#[tokio::test]
async fn every_answer_and_record_carries_wardens_own_call_id() {
    let b = Bench::new(RunLimits::default());
    let answers = [
        b.dispatcher.call(count("same", json!({"n": 1}))).await,
        b.dispatcher.call(count("same", json!({"n": -1}))).await,
        b.dispatcher
            .call(count("same", json!("not an object")))
            .await,
    ];
    let ids: Vec<String> = answers
        .iter()
        .map(|m| {
            let details = match &m.error {
                Some(e) => &e.details,
                None => m.artifact.as_ref().expect("a success has an artifact"),
            };
            details["call_id"]
                .as_str()
                .expect("call_id in details")
                .to_owned()
        })
        .collect();
    let records = b.records("same");
    assert_eq!(records.len(), 3, "{records:?}");
    for (id, record) in ids.iter().zip(&records) {
        assert_eq!(record["call_id"], id.as_str(), "{record}");
        let (instance, n) = id.rsplit_once('-').expect("instance-count");
        assert_eq!(instance.len(), 12, "{id}");
        assert!(n.parse::<u64>().is_ok(), "{id}");
    }
    assert!(ids[0] != ids[1] && ids[1] != ids[2], "{ids:?}");
    let instances: Vec<&str> = ids.iter().map(|i| i.rsplit_once('-').unwrap().0).collect();
    assert!(instances.iter().all(|i| *i == instances[0]), "{ids:?}");
}
