//! The HTTP server in this process, with the test backend: what its accepted sockets are set
//! to, seen on the sockets themselves, and how it stops.

use serde_json::{Value, json};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use warden_core::{
    BoxFuture, CallLog, Executor, Invocation, Output, Protected, SessionId, ToolError, Toolbox,
};
use warden_mcp::{ConnectionLimits, HttpOptions, HttpServer, Loader, Options, Server};
use warden_test_support::TestBackend;
use warden_test_support::backend::policy_text;
use warden_test_support::servers::header;

const TOKEN: &str = "mcp-http-test-token-0123456789";

/// Answers `"ok"`; counts the sessions that ended in [`ENDED`].
struct Fine;

/// The sessions of `ok` and `held` that ended.
static ENDED: AtomicUsize = AtomicUsize::new(0);

impl Executor for Fine {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async {
            Ok(Output {
                content: "ok".into(),
                ..Output::default()
            })
        })
    }

    fn end_session(&self, _: SessionId) -> BoxFuture<'_, ()> {
        ENDED.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {})
    }
}

/// `held` calls begun, and the permits that let them answer, one each.
static HELD: AtomicUsize = AtomicUsize::new(0);
static RELEASE: Semaphore = Semaphore::const_new(0);

/// Answers `"released"` once the test releases it.
struct Held;

impl Executor for Held {
    fn execute(&self, _: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async {
            HELD.fetch_add(1, Ordering::SeqCst);
            RELEASE.acquire().await.unwrap().forget();
            Ok(Output {
                content: "released".into(),
                ..Output::default()
            })
        })
    }
}

/// A server over test tools (`ok`, `held`), with `options` and a call log in `dir`.
fn server(dir: &Path, options: Options) -> (Server, Arc<CallLog>) {
    std::fs::write(dir.join("fake.toml"), policy_text("")).unwrap();
    let backend = TestBackend::new()
        .tool("ok", Arc::new(Fine))
        .tool("held", Arc::new(Held));
    let log = Arc::new(CallLog::open(&dir.join("calls.jsonl")).unwrap());
    let options = Options {
        call_log: Some(log.clone()),
        ..options
    };
    let dir = dir.to_owned();
    let loader: Loader = Arc::new(move || Toolbox::load(&dir, &[&backend], &[] as &[Protected]));
    (Server::new(loader, options).unwrap(), log)
}

/// A server listening on a free loopback port, run on this runtime.
pub(crate) async fn serve(server: Server) -> SocketAddr {
    serving(server).await.0
}

/// [`serve`], and the task running the server.
async fn serving(
    server: Server,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<(), warden_mcp::Error>>,
) {
    serving_idle(server, None).await
}

/// [`serving`] with sessions ending after `session_idle` idle.
async fn serving_idle(
    server: Server,
    session_idle: Option<Duration>,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<(), warden_mcp::Error>>,
) {
    serving_until_idle(server, session_idle, None).await
}

/// [`serving_idle`], the server stopping once idle `stop_idle`.
async fn serving_until_idle(
    server: Server,
    session_idle: Option<Duration>,
    stop_idle: Option<Duration>,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<(), warden_mcp::Error>>,
) {
    let http = HttpServer::bind(HttpOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: TOKEN.into(),
        allow_origins: Vec::new(),
        allow_remote: false,
        limits: ConnectionLimits::default(),
        session_idle,
        stop_idle,
    })
    .await
    .unwrap();
    let addr = http.local_addr();
    (addr, tokio::spawn(http.run(server)))
}

/// A connection to `addr`, with an initialized session: the connection and the session's id.
async fn session(addr: SocketAddr) -> (BufReader<TcpStream>, String) {
    session_with(addr, initialize()).await
}

/// [`session`], initialized with `initialize`.
async fn session_with(addr: SocketAddr, initialize: Value) -> (BufReader<TcpStream>, String) {
    let mut stream = BufReader::new(TcpStream::connect(addr).await.unwrap());
    let (status, headers, _) = post(&mut stream, None, &initialize).await;
    assert_eq!(status, 200, "{headers:?}");
    let session = header(&headers, "mcp-session-id").unwrap();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&mut stream, Some(&session), &note).await.0, 202);
    (stream, session)
}

fn call(id: i64, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": {}}})
}

/// Calls `name` as request `id` of `session`, on a connection of its own, in a task.
fn call_apart(
    addr: SocketAddr,
    session: &str,
    id: i64,
    name: &str,
) -> tokio::task::JoinHandle<(u16, Vec<String>, Option<Value>)> {
    let (session, body) = (session.to_owned(), call(id, name));
    tokio::spawn(async move {
        let mut stream = BufReader::new(TcpStream::connect(addr).await.unwrap());
        post(&mut stream, Some(&session), &body).await
    })
}

/// Waits until `n` calls of `held` have begun.
async fn held(n: usize) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while HELD.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the held calls began");
}

/// Sends one POST of `body` on `stream` and reads its answer: the status, the head's lines
/// and the JSON-RPC message in its body (plain JSON, or the first event of a stream).
async fn post(
    stream: &mut BufReader<TcpStream>,
    session: Option<&str>,
    body: &Value,
) -> (u16, Vec<String>, Option<Value>) {
    post_text(stream, session, &body.to_string()).await
}

/// [`post`] of a body that need not be JSON.
async fn post_text(
    stream: &mut BufReader<TcpStream>,
    session: Option<&str>,
    body: &str,
) -> (u16, Vec<String>, Option<Value>) {
    let session = session.map(|id| ("Mcp-Session-Id", id));
    post_with(stream, session.as_slice(), body).await
}

/// [`post_text`] with the headers `extra`.
pub(crate) async fn post_with(
    stream: &mut BufReader<TcpStream>,
    extra: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<String>, Option<Value>) {
    let addr = stream.get_ref().peer_addr().unwrap();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    stream
        .get_mut()
        .write_all(format!("{head}\r\n{body}").as_bytes())
        .await
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            break;
        }
        headers.push(line);
    }
    let status = headers[0].split(' ').nth(1).unwrap().parse().unwrap();
    let length = header(&headers, "content-length").map(|l| l.parse::<usize>().unwrap());
    let mut text = String::new();
    match length {
        Some(length) => {
            let mut bytes = vec![0; length];
            stream.read_exact(&mut bytes).await.unwrap();
            text = String::from_utf8(bytes).unwrap();
        }
        // A chunked event stream, read to its end.
        None => loop {
            let mut size = String::new();
            stream.read_line(&mut size).await.unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await.unwrap();
            if size == 0 {
                break;
            }
            text.push_str(std::str::from_utf8(&chunk[..size]).unwrap());
        },
    }
    let message = text
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap());
    (status, headers, message)
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "test", "version": "0"}}})
}

/// This process's TCP socket from `local` to `peer`, as a stream of its own (a duplicate of
/// the descriptor), found among the process's descriptors.
fn socket_between(local: SocketAddr, peer: SocketAddr) -> Option<std::net::TcpStream> {
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: the descriptor was open a moment ago, and the sockets this test looks for
        // stay open while it looks (it holds their connections); a descriptor another thread
        // closed in between fails to duplicate, and is skipped.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(owned) = borrowed.try_clone_to_owned() else {
            continue;
        };
        let stream = std::net::TcpStream::from(owned);
        if stream.local_addr().ok() == Some(local) && stream.peer_addr().ok() == Some(peer) {
            return Some(stream);
        }
    }
    None
}

/// The server's end of a connection has `TCP_NODELAY`: an answer leaves in several writes,
/// and on a kept-alive connection each write after the first would otherwise wait for the
/// client's delayed ACK (~40 ms a call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_connections_send_without_delay() {
    let dir = tempfile::tempdir().unwrap();
    let addr = serve(server(dir.path(), Options::default()).0).await;
    // Answered: the server has accepted the connection and set it up.
    let (mut stream, session) = session(addr).await;
    let client = stream.get_ref().local_addr().unwrap();
    let (status, _, answer) = post(&mut stream, Some(&session), &call(1, "ok")).await;
    assert_eq!(status, 200);
    assert_eq!(answer.unwrap()["result"]["content"][0]["text"], "ok");

    let accepted = socket_between(addr, client).expect("the server's end of the connection");
    assert!(
        accepted.nodelay().unwrap(),
        "TCP_NODELAY on the server's end"
    );
    let ours = socket_between(client, addr).expect("the client's end");
    assert!(
        !ours.nodelay().unwrap(),
        "the client's end keeps the default, so the check can tell them apart"
    );
}

/// A stopped HTTP server takes no new call (one on a connection already open is answered
/// `unavailable`), answers those in flight as they finish and cuts the rest at the drain's
/// deadline, each answered and logged once, then returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_the_calls_in_flight_and_cuts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        drain: Duration::from_secs(5),
        ..Options::default()
    };
    let (server, log) = server(dir.path(), options);
    let (addr, running) = serving(server.clone()).await;
    let (mut open, session) = session(addr).await;
    // Four calls in flight, each on a connection of its own; one is never released.
    let calls: Vec<_> = (1..=4)
        .map(|id| call_apart(addr, &session, id, "held"))
        .collect();
    held(4).await;

    server.stop();
    let (status, _, refused) = post(&mut open, Some(&session), &call(5, "ok")).await;
    assert_eq!(status, 200);
    let refused = refused.unwrap();
    let error = &refused["result"]["_meta"]["warden/error"];
    assert_eq!(error["kind"], "unavailable", "{refused}");
    assert!(
        error["message"].as_str().unwrap().contains("stopping"),
        "{refused}"
    );

    RELEASE.add_permits(3);
    let mut texts = Vec::new();
    for call in calls {
        let (status, _, answer) = call.await.unwrap();
        assert_eq!(status, 200);
        let answer = answer.expect("an answer");
        texts.push(
            answer["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    texts.sort();
    let cut = texts.remove(0);
    assert!(cut.contains("cancelled"), "{cut}");
    assert_eq!(texts, ["released"; 3]);
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the server returns")
        .unwrap()
        .unwrap();

    log.flush();
    let records: Vec<Value> = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "call")
        .collect();
    let mut outcomes: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap().into(),
                r["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    outcomes.sort();
    let expected = [
        ("held", "success"),
        ("held", "success"),
        ("held", "success"),
        ("held", "unavailable"),
        ("ok", "unavailable"),
    ]
    .map(|(t, o)| (t.to_owned(), o.to_owned()));
    assert_eq!(outcomes, expected, "each call logged once: {records:#?}");
}

/// Over HTTP a call past the places for calls (one running, two waiting here) is answered
/// `unavailable` at once, and logged; the others are answered as places free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_queue_is_answered_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        admission: warden_core::Admission {
            global_concurrency: 1,
            ..warden_core::Admission::default()
        },
        queue: 2,
        ..Options::default()
    };
    let (server, log) = server(dir.path(), options);
    let addr = serve(server).await;
    let (_open, session) = session(addr).await;
    let mut calls: Vec<_> = (1..=4)
        .map(|id| call_apart(addr, &session, id, "held"))
        .collect();
    // Three hold places and wait; the fourth, whichever it is, is answered at once.
    let refused = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(i) = calls.iter().position(tokio::task::JoinHandle::is_finished) {
                break calls.remove(i).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("a call is refused");
    let refused = refused.2.expect("an answer");
    let error = &refused["result"]["_meta"]["warden/error"];
    assert_eq!(error["kind"], "unavailable", "{refused}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("--max-queued-calls"),
        "{refused}"
    );
    RELEASE.add_permits(3);
    for call in calls {
        let answer = call.await.unwrap().2.expect("an answer");
        assert_eq!(
            answer["result"]["content"][0]["text"], "released",
            "{answer}"
        );
    }
    log.flush();
    let logged = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .filter(|l| l.contains(r#""event":"call""#))
        .count();
    assert_eq!(logged, 4, "each call logged once");
}

/// A body that is not a message, or a known method's params that do not fit it, get the
/// JSON-RPC errors stdio answers, with the request's id when it can be read: not rmcp's
/// plain-text 415, nor "method not found".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_get_json_rpc_errors() {
    let dir = tempfile::tempdir().unwrap();
    let addr = serve(server(dir.path(), Options::default()).0).await;
    let (mut stream, session) = session(addr).await;
    let mut answer = async |body: &str| {
        let (status, headers, message) = post_text(&mut stream, Some(&session), body).await;
        assert_eq!(
            header(&headers, "content-type").as_deref(),
            Some("application/json"),
            "{headers:?}"
        );
        (status, message.expect("a JSON-RPC message"))
    };
    let (status, garbage) = answer("this is not json").await;
    assert_eq!(
        (status, &garbage["error"]["code"]),
        (400, &json!(-32700)),
        "{garbage}"
    );
    assert_eq!(garbage["id"], Value::Null);
    let (status, batch) = answer("[1, 2]").await;
    assert_eq!(
        (status, &batch["error"]["code"]),
        (400, &json!(-32600)),
        "{batch}"
    );
    let no_params = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call"});
    let (status, misfit) = answer(&no_params.to_string()).await;
    assert_eq!(
        (status, &misfit["error"]["code"]),
        (200, &json!(-32602)),
        "{misfit}"
    );
    assert_eq!(misfit["id"], 3);
    let depth = 100_000;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"ok","_meta":{{"x":{}1{}}}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let (status, deep) = answer(&deep).await;
    assert_eq!(
        (status, &deep["error"]["code"]),
        (200, &json!(-32602)),
        "{deep}"
    );
    assert_eq!(deep["id"], 4);
    // The connection and the session are still good.
    let (status, _, ok) = post(&mut stream, Some(&session), &call(5, "ok")).await;
    assert_eq!(status, 200);
    assert_eq!(ok.unwrap()["result"]["content"][0]["text"], "ok");
}

/// A request reusing the id of one of its session's requests still waiting is refused with a
/// JSON-RPC error naming the id, at once; the waiting one is answered, and the id is free again
/// once it has been.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_with_an_id_in_flight_is_refused_and_the_first_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path(), Options::default());
    let addr = serve(server).await;
    let (_open, session) = session(addr).await;
    let first = call_apart(addr, &session, 5, "held");
    held(1).await;
    let mut stream = BufReader::new(TcpStream::connect(addr).await.unwrap());
    let (status, _, again) = post(&mut stream, Some(&session), &call(5, "ok")).await;
    let again = again.expect("an answer");
    assert_eq!(status, 200);
    assert_eq!(again["id"], 5, "{again}");
    assert_eq!(again["error"]["code"], -32600, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("id 5 is still waiting"),
        "{again}"
    );
    RELEASE.add_permits(1);
    let answered = first.await.unwrap().2.expect("an answer");
    assert_eq!(answered["id"], 5);
    assert_eq!(answered["result"]["content"][0]["text"], "released");
    let (_, _, reused) = post(&mut stream, Some(&session), &call(5, "ok")).await;
    assert_eq!(
        reused.expect("an answer")["result"]["content"][0]["text"],
        "ok"
    );
}

/// `initialize` setting the session's idle limit to `idle`.
fn initialize_idle(idle: Value) -> Value {
    let mut message = initialize();
    message["params"]["_meta"] = json!({"warden/idle": idle});
    message
}

/// A `HEAD` asking `addr` whether it holds session `id`.
fn head_request(addr: SocketAddr, id: &str) -> String {
    format!(
        "HEAD /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nMcp-Session-Id: {id}\r\n\r\n"
    )
}

/// The status of a HEAD's answer on `stream`, its head read whole.
async fn head_status(stream: &mut BufReader<TcpStream>) -> u16 {
    let mut status = String::new();
    stream.read_line(&mut status).await.unwrap();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        if line.trim_end().is_empty() {
            break;
        }
    }
    status.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Waits until `n` sessions have ended.
async fn ended(n: usize) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while ENDED.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the idle sessions ended");
}

/// A session idle past the server's limit ends with its sandboxes, as a DELETE would end it
/// (its id is then unknown: 404); one that set a longer limit of its own at `initialize`
/// goes on; a limit that is no positive number is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends_after_its_own_limit_or_the_server_s() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path(), Options::default());
    let (addr, _served) = serving_idle(server, Some(Duration::from_secs(1))).await;
    let (mut lasting, long) = session_with(addr, initialize_idle(json!(3600))).await;
    let (mut brief, short) = session(addr).await;
    for (stream, id) in [(&mut lasting, &long), (&mut brief, &short)] {
        let (status, _, answer) = post(stream, Some(id), &call(1, "ok")).await;
        assert_eq!(status, 200);
        assert_eq!(answer.unwrap()["result"]["content"][0]["text"], "ok");
    }

    // Asking whether a session is held is no use of it.
    let head = |id: &str| head_request(addr, id);
    let mut asking = BufReader::new(TcpStream::connect(addr).await.unwrap());
    while ENDED.load(Ordering::SeqCst) == 0 {
        asking
            .get_mut()
            .write_all(head(&short).as_bytes())
            .await
            .unwrap();
        let status = head_status(&mut asking).await;
        if status == 404 {
            break;
        }
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ended(1).await;
    let (status, _, _) = post(&mut brief, Some(&short), &call(2, "ok")).await;
    assert_eq!(status, 404, "the idle session is gone");
    let (status, _, answer) = post(&mut lasting, Some(&long), &call(2, "ok")).await;
    assert_eq!(status, 200);
    assert_eq!(answer.unwrap()["result"]["content"][0]["text"], "ok");
    assert_eq!(ENDED.load(Ordering::SeqCst), 1, "the other session goes on");

    let mut stream = BufReader::new(TcpStream::connect(addr).await.unwrap());
    for bad in [json!(0), json!(-1), json!("60")] {
        let (_, _, answer) = post(&mut stream, None, &initialize_idle(bad.clone())).await;
        let error = &answer.unwrap()["error"];
        assert_eq!(error["code"], -32602, "{bad}: {error}");
        assert!(error["message"].as_str().unwrap().contains("warden/idle"));
    }
}

/// A session whose client sent `initialize` but never `notifications/initialized` ends after
/// the server's idle limit (at most a minute), though no call of it was ever answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_never_started_ends_after_the_idle_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path(), Options::default());
    let (addr, _served) = serving_idle(server, Some(Duration::from_secs(1))).await;
    let mut stream = BufReader::new(TcpStream::connect(addr).await.unwrap());
    let (status, headers, _) = post(&mut stream, None, &initialize()).await;
    assert_eq!(status, 200, "{headers:?}");
    let id = header(&headers, "mcp-session-id").unwrap();
    let head = head_request(addr, &id);
    let mut asking = BufReader::new(TcpStream::connect(addr).await.unwrap());
    asking.get_mut().write_all(head.as_bytes()).await.unwrap();
    assert_eq!(head_status(&mut asking).await, 200, "held while it starts");
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            asking.get_mut().write_all(head.as_bytes()).await.unwrap();
            if head_status(&mut asking).await == 404 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the session that never started ended");
}

/// A server told to stop once idle keeps serving while it holds a session, and stops by
/// itself once its last session has ended and nothing has come for that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_no_session_left_stops_once_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path(), Options::default());
    let idle = Duration::from_secs(1);
    let (addr, served) = serving_until_idle(server, None, Some(idle)).await;
    let (mut stream, id) = session(addr).await;
    tokio::time::sleep(idle * 3).await;
    let (status, _, answer) = post(&mut stream, Some(&id), &call(1, "ok")).await;
    assert_eq!(status, 200, "a server holding a session goes on");
    assert_eq!(answer.unwrap()["result"]["content"][0]["text"], "ok");
    assert!(!served.is_finished());

    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nMcp-Session-Id: {id}\r\nContent-Length: 0\r\n\r\n"
    );
    stream.get_mut().write_all(delete.as_bytes()).await.unwrap();
    assert_eq!(head_status(&mut stream).await, 200);
    let stopped = tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("the idle server stopped");
    stopped.unwrap().unwrap();
}

/// A session with a call being answered is not idle, however long the call takes; once it
/// has answered, the session's own limit runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answering_a_call_is_not_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _log) = server(dir.path(), Options::default());
    let (addr, _served) = serving_idle(server, None).await;
    let (_stream, id) = session_with(addr, initialize_idle(json!(0.2))).await;
    let running = call_apart(addr, &id, 1, "held");
    held(1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ENDED.load(Ordering::SeqCst),
        0,
        "ended while answering a call"
    );
    RELEASE.add_permits(1);
    let (status, _, answer) = running.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer.unwrap()["result"]["content"][0]["text"], "released");
    ended(1).await;
}
