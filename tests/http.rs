//! `warden serve --http` against connections that never show the token (idle ones, and ones
//! sending their head a byte now and then) and a request for a foreign `Host`: a client that
//! holds the token is answered all the same, the others are closed in time, and a session
//! ends only by a request that passes every check.

use crate::common::answered_while_stopping;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use warden_test_support::guests::wasm;
use warden_test_support::servers::header;

const TOKEN: &str = "http-test-token-0123456789abcdef";

/// A `warden serve --http` over a toolbox holding the `trivial` component's tools, and the
/// `hostile` one's (`sleep`).
struct Served {
    dir: tempfile::TempDir,
    child: Child,
    addr: SocketAddr,
    /// What it wrote on stderr after the line saying where it serves.
    stderr: Arc<Mutex<String>>,
}

impl Served {
    /// Started with at most `open_files` descriptors (the shell's `ulimit -n`, so a flood of
    /// connections meets the limit soon) and these extra arguments.
    fn start(open_files: u32, args: &[&str]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let toolbox = dir.path().join("policies");
        std::fs::create_dir(&toolbox).unwrap();
        let home = dir.path().join("home");
        for component in ["trivial", "hostile"] {
            let added = Command::new(env!("CARGO_BIN_EXE_warden"))
                .args(["add", wasm(component).to_str().unwrap()])
                .env("WARDEN_TOOLBOX", &toolbox)
                .env("WARDEN_HOME", &home)
                .output()
                .unwrap();
            assert!(added.status.success(), "{added:?}");
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(PathBuf::from(env!("CARGO_BIN_EXE_warden")))
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(args)
            .env("WARDEN_TOOLBOX", &toolbox)
            .env("WARDEN_HOME", &home)
            .env_remove("WARDEN_CACHE")
            .env("WARDEN_MCP_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let addr = loop {
            line.clear();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "the server stopped before serving"
            );
            if let Some(url) = line
                .trim()
                .strip_prefix("warden: serving MCP over streamable HTTP at http://")
            {
                break url.trim_end_matches("/mcp").parse().unwrap();
            }
        };
        // Its later lines go on being read, so the server never blocks on a full pipe.
        let written = Arc::new(Mutex::new(String::new()));
        let keep = written.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                keep.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Served {
            dir,
            child,
            addr,
            stderr: written,
        }
    }

    /// What the server has written on stderr since it started serving.
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The call log's records of calls.
    fn records(&self) -> Vec<Value> {
        let log =
            std::fs::read_to_string(self.dir.path().join("home/calls.jsonl")).unwrap_or_default();
        log.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["event"] == "call")
            .collect()
    }

    /// One request on a connection of its own: the status, the session id it names, and the
    /// JSON-RPC message of its body (plain JSON or the first event of a stream).
    fn post(&self, session: Option<&str>, body: &Value) -> (u16, Option<String>, Option<Value>) {
        let (status, headers, text) = answer_to(self.send(&self.post_request(session, body)));
        (
            status,
            header(&headers, "mcp-session-id"),
            message_in(&text),
        )
    }

    /// A POST of `body` to the endpoint, with the token (and the session's id).
    fn post_request(&self, session: Option<&str>, body: &Value) -> String {
        let body = body.to_string();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(id) = session {
            head.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
        }
        format!("{head}\r\n{body}")
    }

    /// Sends a whole request and reads its answer: the status, the head's lines, the body
    /// (up to the end of the first event of a stream).
    fn exchange(&self, request: &str) -> (u16, Vec<String>, String) {
        answer_to(self.send(request))
    }

    /// Sends a whole request on a connection of its own, to read its answer from.
    fn send(&self, request: &str) -> BufReader<TcpStream> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))
            .expect("the server takes the connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        BufReader::new(stream)
    }

    /// An initialized session's id.
    fn initialize(&self) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}});
        let (status, session, message) = self.post(None, &init);
        assert_eq!(status, 200, "{message:?}");
        let session = session.expect("a session id");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _, _) = self.post(Some(&session), &note);
        assert_eq!(status, 202);
        session
    }

    /// `add(a, 1)` in the session: its answer.
    fn add(&self, session: &str, a: i64) -> Value {
        let call = json!({"jsonrpc": "2.0", "id": a, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": a, "b": 1}}});
        let (status, _, message) = self.post(Some(session), &call);
        assert_eq!(status, 200, "{message:?}");
        message.expect("an answer")
    }
}

/// The answer read from `reader`: the status, the head's lines, the body (up to the end of
/// the first event of a stream).
fn answer_to(mut reader: BufReader<TcpStream>) -> (u16, Vec<String>, String) {
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .expect("the server answers in time");
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            break;
        }
        headers.push(line);
    }
    let status = headers
        .first()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {headers:?}"));
    let mut body = String::new();
    if let Some(length) = header(&headers, "content-length") {
        let mut bytes = vec![0; length.parse().unwrap()];
        reader.read_exact(&mut bytes).unwrap();
        body = String::from_utf8(bytes).unwrap();
    } else {
        // A chunked event stream: read until the first event is whole.
        while !body.contains("\n\n") || !body.contains('{') {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            body.push_str(&line);
        }
    }
    (status, headers, body)
}

/// The JSON-RPC message of a body: plain JSON, or the first event of a stream.
fn message_in(body: &str) -> Option<Value> {
    body.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes room for this test's own connections: the soft limit raised to the hard one.
fn allow_open_files(at_least: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < at_least {
            assert!(
                limit.rlim_max >= at_least,
                "this test needs {at_least} open files; the hard limit is {}",
                limit.rlim_max
            );
            limit.rlim_cur = limit.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
}

/// Connections that say nothing, and ones that send a head's first line and then a byte now
/// and then; the latter go on until `stop` is set or the server closes them. Opening them
/// stops at the first the server no longer takes: its queue of connections is full.
struct Flood {
    idle: Vec<TcpStream>,
    slow: Vec<std::thread::JoinHandle<Option<Duration>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Flood {
    fn open(addr: SocketAddr, idle: usize, slow: usize) -> Flood {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Past a full queue the kernel drops a SYN and the client sends it again a second
        // later, then two: a connection the server still takes gets in within a few seconds.
        let connect = || TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok();
        let idle = (0..idle).map_while(|_| connect()).collect();
        let slow = (0..slow)
            .map_while(|_| connect())
            .map(|mut stream| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let opened = Instant::now();
                    if stream.write_all(b"POST /mcp HTTP/1.1\r\n").is_err() {
                        return Some(opened.elapsed());
                    }
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(200));
                        // A write fails once the server has closed its end (a reset).
                        if stream.write_all(b"X").is_err() {
                            return Some(opened.elapsed());
                        }
                    }
                    None
                })
            })
            .collect();
        Flood { idle, slow, stop }
    }

    /// Whether every idle connection is closed by the server within `within`.
    fn idle_closed(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        self.idle.iter_mut().all(|stream| {
            let left = deadline.saturating_duration_since(Instant::now());
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut byte = [0u8; 1];
            // End of stream or a reset: closed. A timeout: still open.
            match stream.read(&mut byte) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            }
        })
    }

    /// How long each slow connection lasted, `None` for one still open after `within`.
    fn slow_lasted(self, within: Duration) -> Vec<Option<Duration>> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline
            && !self.slow.iter().all(std::thread::JoinHandle::is_finished)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.slow.into_iter().map(|t| t.join().unwrap()).collect()
    }
}

/// 300 idle connections and 20 slow ones against a server with 160 descriptors: a client
/// that holds the token still initializes and calls a tool. Before connections were capped,
/// they took every descriptor and the client's connection was never accepted.
#[test]
fn a_client_is_answered_past_300_idle_and_slow_connections() {
    allow_open_files(1024);
    let served = Served::start(160, &[]);
    let flood = Flood::open(served.addr, 300, 20);
    // Time for the server to accept them all.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let session = served.initialize();
    let answer = served.add(&session, 41);
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"result": 42}),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(flood.idle.len(), 300, "every idle connection was taken");
    assert_eq!(flood.slow_lasted(Duration::ZERO).len(), 20);
    // Room was made by closing silent connections, and that is on stderr.
    let logged = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        served
            .stderr()
            .contains("closed a connection from 127.0.0.1:")
    });
    assert!(logged, "{}", served.stderr());
}

/// With a short header timeout, idle connections and slow ones are closed after it, not
/// before, while a session that holds the token goes on being answered.
#[test]
fn idle_and_slow_connections_are_closed_after_the_header_timeout() {
    allow_open_files(1024);
    let served = Served::start(1024, &["--header-timeout", "2s"]);
    let session = served.initialize();
    let opened = Instant::now();
    let mut flood = Flood::open(served.addr, 50, 10);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        served.add(&session, 1)["result"]["structuredContent"],
        json!({"result": 2})
    );
    assert!(
        flood.idle_closed(Duration::from_secs(5)),
        "idle connections closed after the timeout"
    );
    let waited = opened.elapsed();
    assert!(
        waited >= Duration::from_millis(1900),
        "not before: {waited:?}"
    );
    for lasted in flood.slow_lasted(Duration::from_secs(5)) {
        let lasted = lasted.expect("the slow connection was closed");
        assert!(
            (Duration::from_millis(1900)..Duration::from_secs(6)).contains(&lasted),
            "closed after the timeout, though it kept sending: {lasted:?}"
        );
    }
    // The session outlived its connections: each request above had its own.
    assert_eq!(
        served.add(&session, 2)["result"]["structuredContent"],
        json!({"result": 3})
    );
}

/// A `DELETE` that names a foreign `Host` is refused like any other request, with a valid
/// token and session id, and the session goes on; the same request for the server's own
/// `Host` ends it.
#[test]
fn a_delete_for_a_foreign_host_is_refused_and_the_session_survives() {
    let served = Served::start(1024, &[]);
    let session = served.initialize();
    let delete = |host: &str| {
        let request = format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Mcp-Session-Id: {session}\r\nContent-Length: 0\r\n\r\n"
        );
        served.exchange(&request).0
    };
    let port = served.addr.port();
    assert_eq!(delete(&format!("evil.example:{port}")), 403);
    assert_eq!(delete("evil.example"), 403);
    assert_eq!(
        served.add(&session, 5)["result"]["structuredContent"],
        json!({"result": 6})
    );
    assert_eq!(delete(&format!("localhost:{port}")), 200);
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 1, "b": 1}}});
    assert_eq!(
        served.post(Some(&session), &call).0,
        404,
        "the session has ended"
    );
}

/// 500 clients holding the token open a session each at once, under the default limits: every
/// one is answered, and none is closed to make room. (With the oldest connection without the
/// token closed to make room past 64 of them, 436 of 500 were closed at `initialize`.)
#[test]
fn five_hundred_sessions_at_once_are_all_answered() {
    const SESSIONS: usize = 500;
    allow_open_files(4096);
    let served = Served::start(4096, &[]);
    let start = Barrier::new(SESSIONS);
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..SESSIONS)
            .map(|i| {
                let (served, start) = (&served, &start);
                scope.spawn(move || {
                    start.wait();
                    let session = served.initialize();
                    served.add(&session, i as i64)
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(
            answer["result"]["structuredContent"],
            json!({"result": i + 1}),
            "{answer}"
        );
    }
    assert!(
        !served.stderr().contains("closed a connection"),
        "{}",
        served.stderr()
    );
}

/// `warden serve --http` stopped by SIGTERM with calls in flight (sleeps of 0.2 s, and of
/// ten minutes) answers each, cancelling those still running after the drain's 2 s, logs
/// each once, says on stderr that it drains, and exits cleanly. (It used to exit at once:
/// no answers, no records.)
#[test]
fn sigterm_answers_or_cancels_each_call_in_flight() {
    let mut served = Served::start(1024, &[]);
    let session = served.initialize();
    let sleeps: Vec<u64> = [200, 600_000].repeat(4);
    let written = Barrier::new(sleeps.len() + 1);
    let answers: Vec<(u64, u16, Option<Value>)> = std::thread::scope(|scope| {
        let calls: Vec<_> = sleeps
            .iter()
            .enumerate()
            .map(|(id, &ms)| {
                let (served, session, written) = (&served, &session, &written);
                scope.spawn(move || {
                    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                        "params": {"name": "sleep", "arguments": {"ms": ms}}});
                    let sent = served.send(&served.post_request(Some(session), &call));
                    written.wait();
                    let (status, _, body) = answer_to(sent);
                    (ms, status, message_in(&body))
                })
            })
            .collect();
        written.wait();
        // Connections are accepted in the order they were made: once this later one is
        // answered, the server holds every call above. (Its id is not theirs: ids in flight
        // in a session are unique.)
        assert_eq!(
            served.add(&session, 100)["result"]["structuredContent"],
            json!({"result": 101})
        );
        let killed = Command::new("kill")
            .args(["-TERM", &served.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "stopped cleanly: {status}");
    let mut succeeded = 0;
    for (ms, status, answer) in &answers {
        assert_eq!(*status, 200);
        let result = &answer.as_ref().expect("an answer")["result"];
        succeeded += usize::from(answered_while_stopping(*ms, result));
    }
    let records = served.records();
    assert_eq!(
        records.len(),
        sleeps.len() + 1,
        "one record a call: {records:#?}"
    );
    let logged_successes = records
        .iter()
        .filter(|r| r["tool"] == "sleep" && r["outcome"] == "success")
        .count();
    assert_eq!(logged_successes, succeeded, "{records:#?}");
    let stderr = served.stderr();
    assert!(stderr.contains("SIGTERM: draining"), "{stderr}");
}
