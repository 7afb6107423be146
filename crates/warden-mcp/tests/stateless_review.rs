//! Review on protocol 2026-07-28 (stateless): a call that needs review is answered with an
//! `InputRequiredResult`, and runs when the client calls again with an approval and the
//! `requestState`; every other retry is `rejected`, and the decisions are in the call log.
//!
//! Neither rmcp's client (this crate builds rmcp's server side only) nor the Python SDK in the
//! project's venv (1.30, protocols up to 2025-11-25) speaks the multi round-trip requests of
//! 2026-07-28, so the client here writes the spec's messages itself.

use crate::client::Client;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::BufReader;
use warden_core::{
    BoxFuture, CallLog, Executor, Invocation, Output, Protected, ToolError, Toolbox, call_digest,
};
use warden_mcp::{Loader, Options, Server};
use warden_test_support::TestBackend;
use warden_test_support::backend::policy_text;

const STATELESS: &str = "2026-07-28";

/// Answers `"ran"`, counting its runs.
struct Counted(Arc<AtomicUsize>);

impl Executor for Counted {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Ok(Output {
                content: "ran".into(),
                ..Output::default()
            })
        })
    }
}

/// A server whose one tool, `rm`, needs review; its runs; its call log's path.
fn server(dir: &Path) -> (Server, Arc<AtomicUsize>, std::path::PathBuf) {
    replica(dir, "calls.jsonl")
}

/// [`server`] over the toolbox in `dir`, logging to its file `log`.
fn replica(dir: &Path, log: &str) -> (Server, Arc<AtomicUsize>, std::path::PathBuf) {
    std::fs::write(
        dir.join("rm.toml"),
        policy_text("[review]\nrequired = true\n"),
    )
    .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let backend = TestBackend::new().tool("rm", Arc::new(Counted(runs.clone())));
    let log_path = dir.join(log);
    let options = Options {
        call_log: Some(Arc::new(CallLog::open(&log_path).unwrap())),
        ..Options::default()
    };
    let dir = dir.to_owned();
    let loader: Loader = Arc::new(move || Toolbox::load(&dir, &[&backend], &[] as &[Protected]));
    (Server::new(loader, options).unwrap(), runs, log_path)
}

/// A `tools/call` of `rm` on 2026-07-28: its `_meta` says the version and what the client
/// answers (`elicitation`: forms); `retry` adds `inputResponses` and `requestState`.
fn call(arguments: Value, elicitation: bool, retry: Option<(Value, &str)>) -> Value {
    let capabilities = if elicitation {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    let mut params = json!({"name": "rm", "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }});
    if let Some((responses, state)) = retry {
        params["inputResponses"] = responses;
        params["requestState"] = state.into();
    }
    params
}

/// The answer `action` to the review, with `content`.
fn answer(action: &str, content: Value) -> Value {
    json!({"review": {"action": action, "content": content}})
}

/// An approval of the call with `digest`.
fn approve(digest: &str) -> Value {
    answer("accept", json!({"decision": "approve", "digest": digest}))
}

/// The tests' client, numbering its requests and reading their results, speaking 2026-07-28
/// only.
struct Stateless {
    client: Client,
    next: i64,
}

impl Stateless {
    fn start(server: Server) -> Stateless {
        Stateless {
            client: Client::connect(server).0,
            next: 1,
        }
    }

    /// The result of `tools/call` with `params`.
    async fn call(&mut self, params: Value) -> Value {
        self.request("tools/call", params).await
    }

    /// The result of the request `method` with `params`.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.client.request(id, method, params).await["result"].clone()
    }

    async fn send(&mut self, message: Value) {
        self.client.send(message).await;
    }
}

/// The input request's message and the `requestState` of an `InputRequiredResult`.
fn asked(result: &Value) -> (String, String) {
    assert_eq!(result["resultType"], "input_required", "{result}");
    let request = &result["inputRequests"]["review"];
    assert_eq!(request["method"], "elicitation/create", "{result}");
    let form = &request["params"]["requestedSchema"]["properties"];
    assert!(
        form["decision"].is_object() && form["digest"].is_object(),
        "{result}"
    );
    let message = request["params"]["message"].as_str().unwrap().to_owned();
    (message, result["requestState"].as_str().unwrap().to_owned())
}

/// The message of a `rejected` result.
fn rejected(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["_meta"]["warden/error"]["kind"], "rejected",
        "{result}"
    );
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

/// The call log's `decision` records.
fn decisions(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "decision")
        .collect()
}

#[tokio::test]
async fn an_approved_retry_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let (server, runs, log) = server(dir.path());
    let mut client = Stateless::start(server);
    let arguments = json!({"path": "build"});
    let digest = call_digest("rm", &arguments.to_string());

    let first = client.call(call(arguments.clone(), true, None)).await;
    let (message, state) = asked(&first);
    assert!(message.contains(&format!("Digest: {digest}")), "{message}");
    assert!(
        message.contains("`rm`") && message.contains("build"),
        "{message}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "asking runs nothing");
    assert!(decisions(&log).is_empty(), "nothing is decided yet");

    let retry = Some((approve(&digest), state.as_str()));
    let ran = client
        .call(call(arguments.clone(), true, retry.clone()))
        .await;
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(ran["content"][0]["text"], "ran");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The same approval again: the call does not run twice.
    let replayed = client.call(call(arguments, true, retry)).await;
    assert!(
        rejected(&replayed).contains("answered already"),
        "{replayed}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let decided = decisions(&log);
    assert_eq!(decided.len(), 2, "{decided:?}");
    for d in &decided {
        assert_eq!(d["reviewer"], "mcp-input-request");
        assert_eq!(d["digest"], digest.as_str());
    }
    assert_eq!(decided[0]["decision"], "approve");
    assert_eq!(decided[1]["decision"], "reject");
}

#[tokio::test]
async fn a_declined_review_is_rejected_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (server, runs, log) = server(dir.path());
    let mut client = Stateless::start(server);
    let arguments = json!({"path": "build"});
    let (_, state) = asked(&client.call(call(arguments.clone(), true, None)).await);
    let declined = answer("decline", Value::Null);
    let result = client
        .call(call(arguments, true, Some((declined, &state))))
        .await;
    assert!(rejected(&result).contains("declined"), "{result}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let decided = decisions(&log);
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["decision"], "reject");
    assert_eq!(decided[0]["reviewer"], "mcp-input-request");
}

#[tokio::test]
async fn forged_states_and_malformed_answers_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (server, runs, _) = server(dir.path());
    let mut client = Stateless::start(server);
    let arguments = json!({"path": "build"});
    let digest = call_digest("rm", &arguments.to_string());
    let (_, state) = asked(&client.call(call(arguments.clone(), true, None)).await);
    // One character of the state changed: its tag no longer matches.
    let mut tampered = state.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for forged in [tampered.as_str(), "", "not base64 at all!", "AAAA"] {
        let retry = Some((approve(&digest), forged));
        let result = client.call(call(arguments.clone(), true, retry)).await;
        assert!(
            rejected(&result).contains("not one this server made"),
            "{result}"
        );
    }
    // The state's own answer, but not an elicitation result; then no answer at all.
    for responses in [
        json!({"review": 5}),
        json!({}),
        json!({"other": {"action": "accept"}}),
    ] {
        let (_, state) = asked(&client.call(call(arguments.clone(), true, None)).await);
        let retry = Some((responses.clone(), state.as_str()));
        let result = client.call(call(arguments.clone(), true, retry)).await;
        assert!(
            rejected(&result).contains("review"),
            "{responses}: {result}"
        );
    }
    // An answer without the state it answers.
    let mut bare = call(arguments.clone(), true, None);
    bare["inputResponses"] = approve(&digest);
    let result = client.call(bare).await;
    assert!(
        rejected(&result).contains("without the requestState"),
        "{result}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_retry_with_other_arguments_is_rejected_naming_both_digests() {
    let dir = tempfile::tempdir().unwrap();
    let (server, runs, log) = server(dir.path());
    let mut client = Stateless::start(server);
    let asked_about = json!({"path": "build"});
    let sent = json!({"path": "/"});
    let (d1, d2) = (
        call_digest("rm", &asked_about.to_string()),
        call_digest("rm", &sent.to_string()),
    );
    let (_, state) = asked(&client.call(call(asked_about, true, None)).await);
    // The approval names the digest asked about; the retry carries other arguments.
    let result = client
        .call(call(sent, true, Some((approve(&d1), &state))))
        .await;
    let why = rejected(&result);
    assert!(why.contains(&d1) && why.contains(&d2), "{why}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(decisions(&log)[0]["digest"], d2.as_str());
}

#[tokio::test]
async fn a_client_that_answers_no_forms_is_rejected_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let (server, runs, log) = server(dir.path());
    let mut client = Stateless::start(server);
    let result = client.call(call(json!({"path": "x"}), false, None)).await;
    assert!(rejected(&result).contains("cannot be asked"), "{result}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(decisions(&log)[0]["decision"], "reject");
}

/// Two servers given one token, as replicas behind a load balancer: the one that asked and
/// the one that takes the approval need not be the same.
#[tokio::test]
async fn over_http_another_replica_takes_the_approval() {
    use crate::http::{post_with, serve};
    use tokio::net::TcpStream;
    // One toolbox folder, as replicas share it: the policy's digest names its file.
    let dir = tempfile::tempdir().unwrap();
    let (one, _, _) = replica(dir.path(), "one.jsonl");
    let (two, runs, log) = replica(dir.path(), "two.jsonl");
    let (one, two) = (serve(one).await, serve(two).await);
    let post = |addr, params: Value| async move {
        let mut stream = BufReader::new(TcpStream::connect(addr).await.unwrap());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let headers = [
            ("MCP-Protocol-Version", STATELESS),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "rm"),
        ];
        let (status, _, message) = post_with(&mut stream, &headers, &body.to_string()).await;
        assert_eq!(status, 200);
        message.unwrap()["result"].clone()
    };
    let arguments = json!({"path": "build"});
    let digest = call_digest("rm", &arguments.to_string());
    let (_, state) = asked(&post(one, call(arguments.clone(), true, None)).await);
    let retry = Some((approve(&digest), state.as_str()));
    let ran = post(two, call(arguments.clone(), true, retry.clone())).await;
    assert_eq!(ran["content"][0]["text"], "ran", "{ran}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(decisions(&log)[0]["decision"], "approve");

    // A replica whose policy differs (here its file is elsewhere) opens the state, and
    // refuses the approval, naming both policies.
    let elsewhere = tempfile::tempdir().unwrap();
    let (three, runs, _) = server(elsewhere.path());
    let refused = post(serve(three).await, call(arguments, true, retry)).await;
    assert!(rejected(&refused).contains("policy changed"), "{refused}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A session opened by `initialize` on an earlier protocol keeps elicitation: a client that
/// did not declare it is rejected as before, whatever its call carries.
#[tokio::test]
async fn sessions_before_2026_07_28_are_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (server, runs, log) = server(dir.path());
    let mut client = Stateless::start(server);
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "test", "version": "0"}});
    client.request("initialize", init).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client.send(initialized).await;
    let arguments = json!({"path": "build"});
    let digest = call_digest("rm", &arguments.to_string());
    let params = json!({"name": "rm", "arguments": arguments,
                        "inputResponses": approve(&digest), "requestState": "AAAA"});
    let result = client.call(params).await;
    assert!(
        rejected(&result).contains("elicitation capability"),
        "{result}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(decisions(&log)[0]["reviewer"], "mcp-elicitation");
}
