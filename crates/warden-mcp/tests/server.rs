//! The server end to end over an in-memory pipe, with the test backend (no sandbox): result
//! shapes (objects, wrapped scalars, results cut by the output limit), and a cancelled call's
//! sandbox being dropped.

use crate::client::Client;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Semaphore, SemaphorePermit};
use warden_core::{
    BoxFuture, CallLog, ErrorKind, Executor, Invocation, Output, Protected, ToolError, Toolbox,
};
use warden_mcp::{Loader, Options, Server};
use warden_test_support::TestBackend;
use warden_test_support::backend::policy_text;

/// Set when a `nap` call's future is dropped, as a sandbox is freed.
static NAP_DROPPED: AtomicBool = AtomicBool::new(false);

/// `nap` calls begun.
static NAPPING: AtomicUsize = AtomicUsize::new(0);

/// `gate` calls begun, and the permits that let them answer, one each.
static AT_GATE: AtomicUsize = AtomicUsize::new(0);
static GATE: Semaphore = Semaphore::const_new(0);

struct Answer(Value);

impl Executor for Answer {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        let value = self.0.clone();
        Box::pin(async move {
            Ok(Output {
                content: value.to_string(),
                structured: Some(value),
                ..Output::default()
            })
        })
    }
}

struct Nap;

struct OnDrop;
impl Drop for OnDrop {
    fn drop(&mut self) {
        NAP_DROPPED.store(true, Ordering::SeqCst);
    }
}

impl Executor for Nap {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            let _guard = OnDrop;
            NAPPING.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok(Output::default())
        })
    }
}

/// Answers `"awake"` after 300 ms.
struct Doze;

impl Executor for Doze {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Output {
                content: "awake".into(),
                ..Output::default()
            })
        })
    }
}

/// Answers `"through"` once the test lets it through [`GATE`].
struct Gate;

impl Executor for Gate {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            AT_GATE.fetch_add(1, Ordering::SeqCst);
            GATE.acquire().await.unwrap().forget();
            Ok(Output {
                content: "through".into(),
                ..Output::default()
            })
        })
    }
}

/// What each `stack` call holds until it has been finished after its answer, as a
/// WebAssembly call holds one of the engine's stacks in its store; the engine has
/// [`STACKS`] of them.
const STACKS: usize = 64;
static STACK: Semaphore = Semaphore::const_new(STACKS);

/// A store holding a stack, whose end takes a while (a store's reset does).
struct Store(#[allow(dead_code, reason = "held, not read")] SemaphorePermit<'static>);

impl Drop for Store {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Answers at once, leaving its store for after its answer; with no stack left it is refused,
/// as the engine refuses a call past its stacks.
struct Stacked;

impl Executor for Stacked {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            let stack = STACK.try_acquire().map_err(|_| {
                ToolError::new(
                    ErrorKind::Unavailable,
                    "every stack of the engine is in use",
                )
            })?;
            warden_core::after_answer::defer(Store(stack));
            Ok(Output {
                content: "done".into(),
                ..Output::default()
            })
        })
    }
}

/// A server over test tools, and its call log.
fn server(dir: &Path) -> (Server, Arc<CallLog>) {
    server_with(dir, Options::default())
}

/// [`server`] with these options, and its call log.
fn server_with(dir: &Path, options: Options) -> (Server, Arc<CallLog>) {
    std::fs::write(
        dir.join("fake.toml"),
        policy_text("[limits]\noutput = \"100B\"\n"),
    )
    .unwrap();
    let point = json!({"type": "object", "properties": {"x": {"type": "integer"}}});
    let backend = TestBackend::new()
        .tool_with("point", Some(point), Arc::new(Answer(json!({"x": 1}))))
        .tool_with(
            "count",
            Some(json!({"type": "integer"})),
            Arc::new(Answer(json!(7))),
        )
        .tool("nap", Arc::new(Nap))
        .tool("doze", Arc::new(Doze))
        .tool("gate", Arc::new(Gate))
        .tool("stacked", Arc::new(Stacked))
        .tool_with(
            "big",
            Some(json!({"type": "string"})),
            Arc::new(Answer(json!("y".repeat(200)))),
        );
    let log = Arc::new(CallLog::open(&dir.join("calls.jsonl")).unwrap());
    let options = Options {
        call_log: Some(log.clone()),
        ..options
    };
    let dir = dir.to_owned();
    let loader: Loader = Arc::new(move || Toolbox::load(&dir, &[&backend], &[] as &[Protected]));
    (Server::new(loader, options).unwrap(), log)
}

/// The call log's records, as JSON.
fn records(log: &CallLog) -> Vec<Value> {
    log.flush();
    std::fs::read_to_string(log.path())
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn object_results_are_structured_as_they_are_scalars_are_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path());
    let mut client = Client::start(server).await;
    let listed = client.request(1, "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let point = tools.iter().find(|t| t["name"] == "point").unwrap();
    assert_eq!(point["outputSchema"]["properties"]["x"]["type"], "integer");
    assert!(
        point["outputSchema"].get("required").is_none(),
        "not wrapped"
    );
    let count = tools.iter().find(|t| t["name"] == "count").unwrap();
    assert_eq!(count["outputSchema"]["required"], json!(["result"]));

    let p = client
        .request(2, "tools/call", json!({"name": "point"}))
        .await;
    assert_eq!(p["result"]["structuredContent"], json!({"x": 1}));
    let c = client
        .request(3, "tools/call", json!({"name": "count"}))
        .await;
    assert_eq!(c["result"]["structuredContent"], json!({"result": 7}));
    assert_eq!(c["result"]["content"][0]["text"], "7");

    // Cut by the output limit: no structured result to give, so an error with the cut text.
    let big = client
        .request(4, "tools/call", json!({"name": "big"}))
        .await;
    assert_eq!(big["result"]["isError"], true);
    assert_eq!(
        big["result"]["_meta"]["warden/error"]["kind"],
        "limit_exceeded"
    );
    assert!(big["result"].get("structuredContent").is_none());
    let text = big["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("output truncated"), "{text}");
}

/// A call still running when the client's input ends is answered and logged before the
/// server returns (a `warden serve` whose stdin closes then exits, dropping whatever runs).
#[tokio::test]
async fn a_call_running_when_input_ends_is_answered_before_the_server_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = server(dir.path());
    let (mut client, serving) = Client::serving(server).await;
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                      "params": {"name": "doze", "arguments": {}}});
    client.send(call).await;
    client.write.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("the server returns")
        .unwrap()
        .unwrap();
    let dozes = records(&log)
        .into_iter()
        .filter(|r| r["tool"] == "doze")
        .count();
    assert_eq!(dozes, 1, "the call was logged before the server returned");
    let line = client.lines.next_line().await.unwrap().expect("an answer");
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["id"], 4, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "awake", "{answer}");
}

#[tokio::test]
async fn a_cancelled_call_drops_its_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = server(dir.path());
    let mut client = Client::start(server).await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "nap"}});
    client.send(call).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!NAP_DROPPED.load(Ordering::SeqCst), "the nap is running");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 9, "reason": "changed my mind"}});
    client.send(cancel).await;
    for _ in 0..100 {
        if NAP_DROPPED.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        NAP_DROPPED.load(Ordering::SeqCst),
        "the call's future was dropped"
    );
    // The server still answers.
    let after = client
        .request(10, "tools/call", json!({"name": "count"}))
        .await;
    assert_eq!(after["result"]["structuredContent"], json!({"result": 7}));

    // The cancelled call has its record, like every other call.
    let records = records(&log);
    let naps: Vec<&Value> = records.iter().filter(|r| r["tool"] == "nap").collect();
    assert_eq!(naps.len(), 1, "{records:#?}");
    let nap = naps[0];
    assert_eq!(nap["event"], "call", "{nap}");
    let outcome: ErrorKind = serde_json::from_value(nap["outcome"].clone()).expect("an error kind");
    assert_eq!(outcome, ErrorKind::Unavailable, "{nap}");
    assert!(
        nap["message"].as_str().unwrap().contains("cancelled"),
        "{nap}"
    );
    assert!(
        nap["tool_call_id"].as_str().unwrap().starts_with("mcp-"),
        "{nap}"
    );
    assert_eq!(nap["executor"], "test", "{nap}");
    // It ran until the cancel: the 300 ms the client waited, less the moment between the
    // client's send and the call's start (the server's clock starts at the call, not the send).
    assert!(nap["duration_ms"].as_f64().unwrap() >= 250.0, "{nap}");
}

/// A client that writes `initialize` and more at once gets initialize's answer first: the
/// stdio transport reads past `initialize` only once rmcp has answered it (a line that is not
/// JSON is answered the moment it is read, faster than anything else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_sent_right_behind_initialize_are_answered_after_it() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let (server, _log) = server(dir.path());
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(theirs);
        let serving = tokio::spawn(server.serve_io(read, write));
        let (read, mut write) = tokio::io::split(ours);
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "test", "version": "0"}}});
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "count"}});
        let lines = format!("{init}\nnot json\n{call}\n");
        write.write_all(lines.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(read).lines();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("the server is still there");
            let answer: Value = serde_json::from_str(&line).unwrap();
            ids.push(answer["id"].clone());
        }
        assert_eq!(ids[0], 0, "initialize is answered first: {ids:?}");
        // The input ends when both halves of the client's end are gone.
        drop((write, lines));
        serving.await.unwrap().unwrap();
    }
}

/// Waits until `count` has reached `n`.
async fn reached(count: &AtomicUsize, n: usize) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while count.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the calls began");
}

/// A stopped server takes no new call, answers those in flight as they finish, cuts the one
/// still running at the drain's deadline, and returns: every call answered once and logged
/// once, whether it was answered on the reader (a plain call) or by rmcp (one with `_meta`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_the_calls_in_flight_and_cuts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        drain: Duration::from_secs(5),
        ..Options::default()
    };
    let (server, log) = server_with(dir.path(), options);
    let (mut client, serving) = Client::serving(server.clone()).await;
    let call = |id: i64, name: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name}});
    for id in 1..=3 {
        client.send(call(id, "gate")).await;
    }
    client
        .send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                     "params": {"name": "gate", "_meta": {"progressToken": 4}}}))
        .await;
    client.send(call(5, "nap")).await;
    reached(&AT_GATE, 4).await;
    reached(&NAPPING, 1).await;

    server.stop();
    let refused = client
        .request(6, "tools/call", json!({"name": "count"}))
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let error = &refused["result"]["_meta"]["warden/error"];
    assert_eq!(error["kind"], "unavailable", "{refused}");
    assert!(
        error["message"].as_str().unwrap().contains("stopping"),
        "{refused}"
    );
    assert!(
        !serving.is_finished(),
        "the calls in flight are still running"
    );

    GATE.add_permits(4);
    let mut answers = std::collections::HashMap::new();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), client.lines.next_line())
        .await
        .expect("the server ends in time")
        .unwrap()
    {
        let answer: Value = serde_json::from_str(&line).unwrap();
        let id = answer["id"].as_i64().unwrap();
        assert!(
            answers.insert(id, answer).is_none(),
            "one answer to call {id}"
        );
    }
    serving.await.unwrap().unwrap();
    for id in 1..=4 {
        assert_eq!(
            answers[&id]["result"]["content"][0]["text"], "through",
            "{answers:?}"
        );
    }
    let cut = &answers[&5]["result"];
    assert_eq!(cut["_meta"]["warden/error"]["kind"], "unavailable", "{cut}");
    let message = cut["_meta"]["warden/error"]["message"].as_str().unwrap();
    assert!(message.contains("cancelled"), "{message}");
    assert!(
        NAP_DROPPED.load(Ordering::SeqCst),
        "the cut call's sandbox was dropped"
    );
    assert_eq!(answers.len(), 5, "{answers:?}");

    let records: Vec<Value> = records(&log)
        .into_iter()
        .filter(|r| r["event"] == "call")
        .collect();
    assert_eq!(records.len(), 6, "each call logged once: {records:#?}");
    let outcomes = |tool: &str| -> Vec<String> {
        records
            .iter()
            .filter(|r| r["tool"] == tool)
            .map(|r| r["outcome"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(outcomes("gate"), ["success"; 4]);
    assert_eq!(outcomes("nap"), ["unavailable"]);
    assert_eq!(outcomes("count"), ["unavailable"]);
}

/// A burst of calls that answer at once, written without waiting: each is answered. Each
/// leaves a store to end after its answer, and the reader ran ahead of their ending until
/// the engine had no stack left, refusing the rest (10,000 `add`s, 8,729 refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_burst_is_answered_whatever_its_ends_cost() {
    const CALLS: i64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path());
    let Client {
        mut write,
        mut lines,
    } = Client::start(server).await;
    let writing = tokio::spawn(async move {
        let mut burst = Vec::new();
        for id in 1..=CALLS {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": "stacked"}});
            burst.extend_from_slice(call.to_string().as_bytes());
            burst.push(b'\n');
        }
        write.write_all(&burst).await.unwrap();
        write
    });
    let mut refused = Vec::new();
    for _ in 0..CALLS {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("the server is still there");
        let answer: Value = serde_json::from_str(&line).unwrap();
        if answer["result"]["isError"] != false {
            refused.push(answer);
        }
    }
    drop(writing.await.unwrap());
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        refused.first()
    );
}

/// Over stdio a burst past the places for calls (one running, two waiting here) is not
/// refused: the reader waits for a place, and the client's pipe holds the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_queue_waits_for_places_on_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        admission: warden_core::Admission {
            global_concurrency: 1,
            ..warden_core::Admission::default()
        },
        queue: 2,
        ..Options::default()
    };
    let (server, log) = server_with(dir.path(), options);
    let mut client = Client::start(server).await;
    for id in 1..=6 {
        client
            .send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": "gate"}}))
            .await;
    }
    reached(&AT_GATE, 1).await;
    GATE.add_permits(6);
    for _ in 1..=6 {
        let line = tokio::time::timeout(Duration::from_secs(30), client.lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            answer["result"]["content"][0]["text"], "through",
            "{answer}"
        );
    }
    let calls = records(&log)
        .iter()
        .filter(|r| r["event"] == "call")
        .count();
    assert_eq!(calls, 6);
}
