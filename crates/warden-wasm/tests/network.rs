//! Network grants hold: only the granted hosts, addresses and ports, no way into loopback by
//! name, credentials the tool never sees, capped bodies, and every refusal logged. Against
//! real HTTP, TCP and UDP servers on 127.0.0.1 and the netprobe fixture built from source.

use crate::common::{Bench, kind};
use serde_json::{Value, json};
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use warden_core::{CallLog, Dispatcher, ToolCall, ToolMessage};
use warden_net::Resolver;
use warden_test_support::servers::{HttpServer, tcp_echo};

/// The credential WARDEN_TEST_API_TOKEN holds ([`crate::common::host_vars`]).
pub(crate) const TOKEN: &str = "warden-test-token-5d1e9b";

fn udp_echo() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let mut answer = b"echo:".to_vec();
            answer.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&answer, from);
        }
    });
    port
}

/// A bench running netprobe under `grants`, names pinned to loopback, calls logged.
fn probe(grants: &str, limits: &str, names: &[&str]) -> (Bench, Dispatcher, Arc<CallLog>) {
    let mut bench = Bench::new();
    bench.resolver =
        Resolver::with_overrides(names.iter().map(|n| format!("{n}:127.0.0.1"))).unwrap();
    bench.policy(
        "netprobe.toml",
        "netprobe",
        &format!("[grants]\n{grants}\n[limits]\n{limits}\n"),
    );
    let log = Arc::new(CallLog::open(&bench.dir.path().join("calls.jsonl")).unwrap());
    let d = bench.dispatcher().call_log(log.clone());
    (bench, d, log)
}

async fn http(d: &Dispatcher, url: &str, headers: Value) -> ToolMessage {
    let args = json!({"method": "GET", "url": url, "headers": headers});
    d.call(ToolCall::new("h", "http", &args)).await
}

async fn tcp(d: &Dispatcher, addr: &str) -> ToolMessage {
    let args = json!({"addr": addr, "line": "ping"});
    d.call(ToolCall::new("t", "tcp", &args)).await
}

/// The destinations refused in one message's details (error or artifact).
fn denied(m: &ToolMessage) -> Vec<String> {
    let details = match &m.error {
        Some(e) => e.details.clone(),
        None => m.artifact.clone().unwrap_or_default(),
    };
    details["denied"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| d["destination"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The log as written so far.
fn log_text(log: &CallLog) -> String {
    log.flush();
    std::fs::read_to_string(log.path()).unwrap_or_default()
}

fn log_lines(log: &CallLog) -> Vec<Value> {
    log_text(log)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_granted_address_works_and_nothing_else_does() {
    let web = HttpServer::start();
    let other = HttpServer::start();
    let (tcp_port, _) = tcp_echo();
    let (tcp_other, tcp_other_seen) = tcp_echo();
    let udp_port = udp_echo();
    let udp_other = udp_echo();
    let (_bench, d, log) = probe(
        &format!(
            "net = [\"127.0.0.1:{}\", \"127.0.0.1:{tcp_port}\", \"127.0.0.1:{udp_port}\"]",
            web.port
        ),
        "",
        &["other.test"],
    );

    let ok = http(&d, &format!("http://127.0.0.1:{}/hi", web.port), json!([])).await;
    assert_eq!(kind(&ok), "success", "{ok:?}");
    assert_eq!(
        ok.artifact.as_ref().unwrap()["result"]["body"],
        "hello from /hi"
    );
    let ok = tcp(&d, &format!("127.0.0.1:{tcp_port}")).await;
    assert_eq!(ok.content, "echo:ping", "{ok:?}");
    let udp_args = json!({"addr": format!("127.0.0.1:{udp_port}"), "data": "dgram"});
    let ok = d.call(ToolCall::new("u", "udp", &udp_args)).await;
    assert_eq!(ok.content, "echo:dgram", "{ok:?}");

    // Another port, another name, another address: each refused before any connection.
    let refused = [
        http(&d, &format!("http://127.0.0.1:{}/", other.port), json!([])).await,
        http(&d, &format!("http://other.test:{}/", web.port), json!([])).await,
        http(&d, &format!("http://127.0.0.2:{}/", web.port), json!([])).await,
        tcp(&d, &format!("127.0.0.1:{tcp_other}")).await,
        tcp(&d, &format!("127.0.0.2:{tcp_port}")).await,
    ];
    for m in &refused {
        assert_eq!(kind(m), "tool_error", "{m:?}");
        assert_eq!(denied(m).len(), 1, "one denial in the details: {m:?}");
    }
    assert!(refused[0].content.contains("denied"), "{:?}", refused[0]);
    let udp_args = json!({"addr": format!("127.0.0.1:{udp_other}"), "data": "x"});
    let m = d.call(ToolCall::new("u2", "udp", &udp_args)).await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    assert!(!denied(&m).is_empty(), "{m:?}");
    assert_eq!(other.connections.load(Ordering::SeqCst), 0);
    assert_eq!(tcp_other_seen.load(Ordering::SeqCst), 0);

    let records = log_lines(&log);
    let denials: Vec<&Value> = records.iter().filter(|r| r["event"] == "denied").collect();
    assert_eq!(denials.len(), 6, "{records:#?}");
    for d in &denials {
        assert!(
            ["http", "tcp", "udp"].contains(&d["tool"].as_str().unwrap()),
            "{d}"
        );
        assert!(!d["call_id"].as_str().unwrap().is_empty(), "{d}");
        assert!(d["reason"].as_str().unwrap().contains("not granted"), "{d}");
    }
    let destinations: Vec<&str> = denials
        .iter()
        .map(|d| d["destination"].as_str().unwrap())
        .collect();
    assert!(
        destinations.contains(&format!("http://other.test:{}", web.port).as_str()),
        "{destinations:?}"
    );
    assert!(
        destinations.contains(&format!("tcp 127.0.0.2:{tcp_port}").as_str()),
        "{destinations:?}"
    );
    let calls: Vec<&Value> = records.iter().filter(|r| r["event"] == "call").collect();
    assert_eq!(calls.iter().filter(|r| r["denied_count"] == 1).count(), 6);
    // The count's old name is still written for one release.
    assert_eq!(calls.iter().filter(|r| r["denied"] == 1).count(), 6);
}

#[tokio::test]
async fn no_grant_means_no_lookup_no_socket_no_http() {
    let web = HttpServer::start();
    let (tcp_port, tcp_seen) = tcp_echo();
    let (_bench, d, log) = probe("", "", &["svc.test"]);
    let lookup = d
        .call(ToolCall::new("l", "lookup", &json!({"name": "localhost"})))
        .await;
    assert_eq!(kind(&lookup), "tool_error", "{lookup:?}");
    assert_eq!(
        denied(&lookup),
        vec!["dns localhost".to_owned()],
        "{lookup:?}"
    );
    let m = tcp(&d, &format!("127.0.0.1:{tcp_port}")).await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    for url in [
        format!("http://127.0.0.1:{}/", web.port),
        format!("http://svc.test:{}/", web.port),
        format!("https://svc.test:{}/", web.port),
    ] {
        let m = http(&d, &url, json!([])).await;
        assert_eq!(kind(&m), "tool_error", "{m:?}");
        assert!(m.content.contains("denied"), "{m:?}");
    }
    assert_eq!(web.connections.load(Ordering::SeqCst), 0);
    assert_eq!(tcp_seen.load(Ordering::SeqCst), 0);
    let denials = log_lines(&log)
        .into_iter()
        .filter(|r| r["event"] == "denied")
        .count();
    assert_eq!(denials, 5, "the lookup, tcp and three requests");
}

#[tokio::test]
async fn guest_lookups_need_their_own_switch() {
    let (_bench, d, _) = probe("dns = true", "", &[]);
    let m = d
        .call(ToolCall::new("l", "lookup", &json!({"name": "localhost"})))
        .await;
    assert_eq!(kind(&m), "success", "{m:?}");
    assert!(
        m.content.contains("127.0.0.1") || m.content.contains("::1"),
        "{m:?}"
    );
}

#[tokio::test]
async fn a_wildcard_matches_subdomains_only() {
    let web = HttpServer::start();
    let names = [
        "a.example.org",
        "example.org",
        "example.org.evil",
        "evilexample.org",
    ];
    let (_bench, d, _) = probe(
        &format!("net = [\"*.example.org:{0}\", \"127.0.0.1:{0}\"]", web.port),
        "",
        &names,
    );
    let ok = http(
        &d,
        &format!("http://a.example.org:{}/w", web.port),
        json!([]),
    )
    .await;
    assert_eq!(kind(&ok), "success", "{ok:?}");
    for name in &names[1..] {
        let m = http(&d, &format!("http://{name}:{}/", web.port), json!([])).await;
        assert_eq!(
            denied(&m),
            vec![format!("http://{name}:{}", web.port)],
            "{m:?}"
        );
    }
    assert_eq!(web.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_needs_loopback_granted() {
    let web = HttpServer::start();
    let url = format!("http://svc.test:{}/x", web.port);
    let (_bench, d, _) = probe(
        &format!("net = [\"svc.test:{}\"]", web.port),
        "",
        &["svc.test"],
    );
    let m = http(&d, &url, json!([])).await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    let reason = m.error.as_ref().unwrap().details["denied"][0]["reason"].to_string();
    assert!(reason.contains("resolves to 127.0.0.1"), "{reason}");
    assert_eq!(web.connections.load(Ordering::SeqCst), 0);

    let (_bench, d, _) = probe(
        &format!("net = [\"svc.test:{0}\", \"127.0.0.1:{0}\"]", web.port),
        "",
        &["svc.test"],
    );
    let m = http(&d, &url, json!([])).await;
    assert_eq!(kind(&m), "success", "{m:?}");
    assert!(web.heads()[0].contains("host: svc.test") || web.heads()[0].contains("Host: svc.test"));
}

#[tokio::test]
async fn credentials_reach_their_host_only_and_never_the_tool() {
    crate::common::host_vars();
    let web = HttpServer::start();
    let grants = format!(
        "net = [\"api.test:{0}\", \"other.test:{0}\", \"127.0.0.1:{0}\"]\n\
         net_credentials = [{{ host = \"api.test\", header = \"Authorization\", \
         from_host = \"WARDEN_TEST_API_TOKEN\", prefix = \"Bearer \", allow_plain_http = true }}]\ncredential_host_shared = true",
        web.port
    );
    let (_bench, d, log) = probe(&grants, "", &["api.test", "other.test"]);
    let forged = json!([["Authorization", "Bearer forged"]]);
    let api = http(&d, &format!("http://api.test:{}/a", web.port), forged).await;
    assert_eq!(kind(&api), "success", "{api:?}");
    let other = http(&d, &format!("http://other.test:{}/b", web.port), json!([])).await;
    assert_eq!(kind(&other), "success", "{other:?}");
    // A server that echoes the header back: the tool now holds the secret; the message and
    // the log still must not.
    let echoed = http(
        &d,
        &format!("http://api.test:{}/echo-auth", web.port),
        json!([]),
    )
    .await;
    assert_eq!(kind(&echoed), "success", "{echoed:?}");

    let heads = web.heads();
    let auth = |head: &str| {
        head.lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        auth(&heads[0]),
        vec![format!("authorization: Bearer {TOKEN}")],
        "{heads:?}"
    );
    assert!(
        auth(&heads[1]).is_empty(),
        "another host got the credential: {heads:?}"
    );
    for m in [&api, &other, &echoed] {
        let text = m.to_langchain().to_string();
        assert!(
            !text.contains(TOKEN),
            "the secret reached the message: {text}"
        );
    }
    assert!(
        echoed
            .to_langchain()
            .to_string()
            .contains("[redacted:WARDEN_TEST_API_TOKEN]")
    );
    let log = log_text(&log);
    assert!(!log.contains(TOKEN), "the secret reached the log");
    assert!(
        log.contains("WARDEN_TEST_API_TOKEN"),
        "the log names the credential"
    );
}

/// A credential with `env`: the guest's variable holds a placeholder, which never becomes the
/// value, not even at the credential's host (a header that host echoes would hand it back):
/// there the credential's own header is set, whatever the guest put in it. The same scheme
/// as for shell tools.
#[tokio::test]
async fn a_placeholder_never_becomes_the_value() {
    crate::common::host_vars();
    let web = HttpServer::start();
    let grants = format!(
        "net = [\"api.test:{0}\", \"other.test:{0}\", \"127.0.0.1:{0}\"]\n\
         net_credentials = [{{ host = \"api.test\", header = \"Authorization\", \
         from_host = \"WARDEN_TEST_API_TOKEN\", prefix = \"Bearer \", env = \"API_TOKEN\", allow_plain_http = true }}]\ncredential_host_shared = true",
        web.port
    );
    let (_bench, d, _log) = probe(&grants, "", &["api.test", "other.test"]);
    let sent = json!([
        ["X-Token", "$API_TOKEN"],
        ["Authorization", "Bearer $API_TOKEN"]
    ]);
    let api = http(&d, &format!("http://api.test:{}/a", web.port), sent.clone()).await;
    assert_eq!(kind(&api), "success", "{api:?}");
    let other = http(&d, &format!("http://other.test:{}/b", web.port), sent).await;
    assert_eq!(kind(&other), "success", "{other:?}");
    // The answer names the host whose credential went out (never the value); the other
    // host's request carried none.
    let artifact = api.artifact.as_ref().expect("a success has an artifact");
    assert_eq!(artifact["credentials_used"], json!(["api.test"]));
    assert_eq!(artifact["credentials_used_count"], 1);
    let other_artifact = other.artifact.as_ref().expect("a success has an artifact");
    assert!(
        other_artifact.get("credentials_used").is_none(),
        "{other:?}"
    );
    let heads = web.heads();
    let header = |head: &str, name: &str| {
        head.lines()
            .find(|l| l.to_ascii_lowercase().starts_with(name))
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    assert_eq!(
        header(&heads[0], "authorization:"),
        format!("authorization: bearer {TOKEN}")
    );
    for head in &heads {
        assert!(
            header(head, "x-token:").contains("warden-placeholder-api_token-"),
            "{heads:?}"
        );
    }
    assert!(
        !heads[1].contains(TOKEN),
        "another host got the value: {heads:?}"
    );
}

/// A credential goes over TLS unless it says `allow_plain_http`: an `http://` request to its
/// host is denied before any connection.
#[tokio::test]
async fn a_credential_goes_over_plain_http_only_with_leave() {
    crate::common::host_vars();
    let web = HttpServer::start();
    let grants = format!(
        "net = [\"api.test:{0}\", \"127.0.0.1:{0}\"]\n\
         net_credentials = [{{ host = \"api.test\", header = \"Authorization\", \
         from_host = \"WARDEN_TEST_API_TOKEN\" }}]\ncredential_host_shared = true",
        web.port
    );
    let (_bench, d, _log) = probe(&grants, "", &["api.test"]);
    let m = http(&d, &format!("http://api.test:{}/a", web.port), json!([])).await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    assert_eq!(denied(&m), vec![format!("http://api.test:{}", web.port)]);
    assert_eq!(web.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_missing_credential_is_unavailable_not_sent_bare() {
    let web = HttpServer::start();
    let grants = format!(
        "net = [\"127.0.0.1:{}\"]\nnet_credentials = [{{ host = \"127.0.0.1\", \
         header = \"X-Api-Key\", from_host = \"WARDEN_TEST_SURELY_UNSET\" }}]",
        web.port
    );
    let (_bench, d, _) = probe(&grants, "", &[]);
    let m = http(&d, &format!("http://127.0.0.1:{}/", web.port), json!([])).await;
    assert_eq!(kind(&m), "unavailable", "{m:?}");
    assert!(m.content.contains("WARDEN_TEST_SURELY_UNSET"), "{m:?}");
    assert_eq!(web.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn big_bodies_are_cut_and_slow_servers_meet_the_deadline() {
    let web = HttpServer::start();
    let (_bench, d, _) = probe(
        &format!("net = [\"127.0.0.1:{}\"]", web.port),
        "timeout = \"2s\"\nresponse = \"64KiB\"",
        &[],
    );
    let big = http(&d, &format!("http://127.0.0.1:{}/big", web.port), json!([])).await;
    assert_eq!(kind(&big), "tool_error", "{big:?}");
    assert!(
        big.content.contains("exceeds limit: 65536 bytes"),
        "{big:?}"
    );

    let start = Instant::now();
    let hang = http(
        &d,
        &format!("http://127.0.0.1:{}/hang", web.port),
        json!([]),
    )
    .await;
    assert_eq!(kind(&hang), "timeout", "{hang:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );

    let after = http(&d, &format!("http://127.0.0.1:{}/ok", web.port), json!([])).await;
    assert_eq!(kind(&after), "success", "the host stays healthy: {after:?}");
}
