//! Net grants for docker tools: a container's only way out is warden's gate, bound in its own
//! network namespace, which lets the granted hosts through and refuses the rest, each refusal
//! a denial of the call. Real containers of the Debian image (curl, wget, python, pip, bash),
//! servers on this machine's 127.0.0.1 and on all its addresses.

use crate::common::*;
use serde_json::{Value, json};
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use warden_core::{Status, ToolMessage};
use warden_test_support::servers::{HttpServer, PackageIndex, TlsServer, accepted};

under_runc_and_gvisor!(
    granted_hosts_are_reached_through_the_gate_and_nothing_else,
    nothing_gets_around_a_containers_gate,
    a_session_containers_gate_is_its_own_and_its_commands,
    pip_reaches_a_granted_package_index_through_a_containers_gate,
    https_reaches_a_granted_tls_server_through_a_containers_tunnel,
    a_redirect_to_an_ungranted_host_is_refused_at_its_hop,
    a_containers_gate_answers_malformed_requests_with_400,
    a_thousand_connections_leave_a_containers_gate_serving,
    a_tunnel_that_never_ends_ends_with_the_calls_deadline,
    one_sessions_container_cannot_reach_anothers_gate_or_listener,
);

/// The destinations the call was refused, from its message.
fn denied(m: &ToolMessage) -> Vec<String> {
    let list = match &m.error {
        Some(e) => e.details.get("denied").cloned(),
        None => m.artifact.as_ref().and_then(|a| a.get("denied").cloned()),
    };
    list.and_then(|l| l.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|d| d["destination"].as_str().map(str::to_owned))
        .collect()
}

fn granted(port: u16) -> String {
    format!("net = [\"api.test:{port}\", \"127.0.0.1:{port}\"]")
}

async fn granted_hosts_are_reached_through_the_gate_and_nothing_else(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let other = HttpServer::start();
    let (port, other_port) = (server.port, other.port);
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(port), "timeout = \"30s\""),
    );
    let command = format!(
        "curl -sS http://api.test:{port}/curl; echo; \
         wget -qO- http://api.test:{port}/wget; echo; \
         python3 -c \"import urllib.request as u; print(u.urlopen('http://api.test:{port}/py').read().decode())\"; \
         curl -sS -p http://api.test:{port}/tunnel; echo; \
         curl -sS -o /dev/null -w 'port %{{http_code}}\\n' http://api.test:{other_port}/; \
         curl -sS -o /dev/null -w 'name %{{http_code}}\\n' http://other.test:{port}/"
    );
    let m = call(&d, "sh", cmd(&command)).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    for path in ["/curl", "/wget", "/py", "/tunnel"] {
        assert!(
            m.content.contains(&format!("hello from {path}")),
            "{path}: {}",
            m.content
        );
    }
    assert!(
        m.content.contains("port 403") && m.content.contains("name 403"),
        "{}",
        m.content
    );
    let refused = denied(&m);
    assert!(
        refused.contains(&format!("http://api.test:{other_port}")),
        "{refused:?}"
    );
    assert!(
        refused.contains(&format!("http://other.test:{port}")),
        "{refused:?}"
    );
    assert_eq!(other.connections.load(Ordering::SeqCst), 0);
    let usage: &Value = &m.artifact.as_ref().unwrap()["usage"];
    assert!(usage["net_connections"].as_u64() >= Some(4), "{usage}");
    assert!(usage["net_bytes_in"].as_u64() > Some(0), "{usage}");
    assert!(usage["wall_ms"].as_f64() > Some(0.0), "{usage}");
    d.close().await;
    h.assert_clean().await;
}

/// Raw sockets to the granted server, to a host service on all addresses (through the
/// bridge's gateway), the proxy variables dropped, UDP: none get out. With
/// `network = "unrestricted"` the host service is reached, so the test can see a reach.
async fn nothing_gets_around_a_containers_gate(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let port = server.port;
    let gateway = h.bridge_gateway().await;
    let service = TcpListener::bind("0.0.0.0:0").unwrap();
    let service_port = service.local_addr().unwrap().port();
    let attack = format!(
        "curl -sS -m 3 --noproxy '*' http://127.0.0.1:{port}/ && echo NOPROXY-LOOPBACK; \
         curl -sS -m 3 --noproxy '*' http://{gateway}:{service_port}/ && echo NOPROXY-HOST; \
         python3 -c \"import socket; socket.create_connection(('{gateway}', {service_port}), timeout=3); print('RAW-HOST')\" 2>&1 | tail -n 1; \
         python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('{gateway}', 53)); print('UDP-SENT')\" 2>&1 | tail -n 1; \
         curl -sS -m 3 -o /dev/null -w 'via-gate %{{http_code}}\\n' http://{gateway}:{service_port}/; \
         true"
    );
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(port), "timeout = \"30s\""),
    );
    let m = call(&d, "sh", cmd(&attack)).await;
    for reach in ["NOPROXY-LOOPBACK", "NOPROXY-HOST", "RAW-HOST", "UDP-SENT"] {
        assert!(!m.content.contains(reach), "{reach}: {}", m.content);
    }
    assert!(m.content.contains("via-gate 403"), "{}", m.content);
    assert!(!accepted(&service), "a host service was reached");
    assert_eq!(server.connections.load(Ordering::SeqCst), 0);
    d.close().await;

    let open = h.dispatcher(
        "sh",
        &h.shell_policy("network = \"unrestricted\"", "", "timeout = \"30s\""),
    );
    let m = call(&open, "sh", cmd(&attack)).await;
    assert!(m.content.contains("RAW-HOST"), "{}", m.content);
    assert!(accepted(&service));
    open.close().await;
    h.assert_clean().await;
}

/// A session's gate opens with each command and answers for it; another session has a gate
/// (and a loopback) of its own.
async fn a_session_containers_gate_is_its_own_and_its_commands(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let port = server.port;
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("session = true", &granted(port), "timeout = \"30s\""),
    );
    let m = call(
        &d,
        "sh",
        cmd(&format!("cd /tmp && curl -sS http://api.test:{port}/one")),
    )
    .await;
    assert!(m.content.contains("hello from /one"), "{}", m.content);
    assert!(denied(&m).is_empty());
    let m = call(
        &d,
        "sh",
        cmd("pwd; curl -sS -o /dev/null -w '%{http_code}' http://other.test/"),
    )
    .await;
    assert!(
        m.content.contains("/tmp") && m.content.contains("403"),
        "{}",
        m.content
    );
    assert_eq!(denied(&m), vec!["http://other.test:80".to_owned()]);
    let m = call(
        &d,
        "sh",
        cmd(&format!("curl -sS http://api.test:{port}/three")),
    )
    .await;
    assert!(m.content.contains("hello from /three"), "{}", m.content);
    assert!(denied(&m).is_empty(), "{:?}", denied(&m));
    d.close().await;
    h.assert_clean().await;
}

/// `pip download` and `pip install` from a local package index through the gate, and, with the
/// index's host not granted, pip refused at the gate: a denial named at the end of the error,
/// and the index never reached.
async fn pip_reaches_a_granted_package_index_through_a_containers_gate(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let index = PackageIndex::start("wardenprobe");
    let port = index.port;
    // No version check (it would ask pypi.org), no cache, and the index trusted though it is
    // plain HTTP.
    let pip = "python3 -m pip --disable-pip-version-check --no-cache-dir --retries 0 \
               --timeout 10 --trusted-host api.test";
    let command = format!(
        "{pip} download --no-deps --index-url http://api.test:{port}/simple/ -d /tmp/dl wardenprobe && \
         {pip} install --no-index --no-deps --target /tmp/t /tmp/dl/wardenprobe-0.1-py3-none-any.whl && \
         PYTHONPATH=/tmp/t python3 -c 'import wardenprobe; print(wardenprobe.MARK)'"
    );
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(port), "timeout = \"60s\""),
    );
    let m = call(&d, "sh", cmd(&command)).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.contains(&index.mark), "{}", m.content);
    assert!(denied(&m).is_empty(), "{:?}", denied(&m));
    let heads = index.heads();
    for path in [
        "GET /simple/wardenprobe/ ",
        "GET /files/wardenprobe-0.1-py3-none-any.whl ",
    ] {
        assert!(
            heads.iter().any(|h| h.starts_with(path)),
            "{path}: {heads:?}"
        );
    }
    d.close().await;

    let before = index.connections.load(Ordering::SeqCst);
    let other = format!("net = [\"other.test:{port}\", \"127.0.0.1:{port}\"]");
    let refused = h.dispatcher("refused", &h.shell_policy("", &other, "timeout = \"60s\""));
    let m = call(&refused, "sh", cmd(&command)).await;
    assert_eq!(m.status, Status::Error, "{}", m.content);
    assert!(
        m.content.contains("No matching distribution"),
        "{}",
        m.content
    );
    assert!(
        denied(&m).contains(&format!("http://api.test:{port}")),
        "{:?}",
        denied(&m)
    );
    assert!(
        m.content
            .contains(&format!("[warden refused http://api.test:{port}:")),
        "warden's reason closes the message: {}",
        m.content
    );
    assert_eq!(index.connections.load(Ordering::SeqCst), before);
    refused.close().await;
    h.assert_clean().await;
}

/// HTTPS through a CONNECT tunnel to a real TLS server: the container's client checks the
/// certificate against the test CA (mounted read-only), so the gate never sees inside; without
/// the CA the handshake fails; an ungranted name's tunnel is refused before any dial.
async fn https_reaches_a_granted_tls_server_through_a_containers_tunnel(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = TlsServer::start(&["api.test"]);
    let port = server.port;
    let certs = h.folder("certs");
    std::fs::write(certs.join("ca.pem"), &server.ca_pem).unwrap();
    let grants = format!(
        "{}\nfs = [{{ host = \"{}\", guest = \"/certs\", access = \"read-only\" }}]",
        granted(port),
        certs.display()
    );
    let d = h.dispatcher("sh", &h.shell_policy("", &grants, "timeout = \"30s\""));
    let command = format!(
        "curl -sS --cacert /certs/ca.pem https://api.test:{port}/curl; echo; \
         python3 -c \"import ssl, urllib.request as u; c = ssl.create_default_context(cafile='/certs/ca.pem'); print(u.urlopen('https://api.test:{port}/py', context=c).read().decode())\"; \
         curl -sS https://api.test:{port}/untrusted >/dev/null 2>&1 || echo UNTRUSTED-REFUSED; \
         curl -sS -o /dev/null --cacert /certs/ca.pem https://other.test:{port}/ 2>&1 | tail -c 200; echo"
    );
    let m = call(&d, "sh", cmd(&command)).await;
    assert!(
        m.content.contains("hello over tls from /curl"),
        "{}",
        m.content
    );
    assert!(
        m.content.contains("hello over tls from /py"),
        "{}",
        m.content
    );
    // The client, not the gate, decides whom to trust.
    assert!(m.content.contains("UNTRUSTED-REFUSED"), "{}", m.content);
    assert!(m.content.contains("403"), "{}", m.content);
    assert_eq!(denied(&m), vec![format!("connect other.test:{port}")]);
    // curl, python and the untrusted attempt: the refused tunnel never reached the server.
    assert_eq!(server.connections.load(Ordering::SeqCst), 3);
    d.close().await;
    h.assert_clean().await;
}

/// A redirect is followed hop by hop, each hop a request of its own through the gate: the
/// granted first hop is served, the ungranted second is refused and never reached.
async fn a_redirect_to_an_ungranted_host_is_refused_at_its_hop(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let other = HttpServer::start();
    let (port, other_port) = (server.port, other.port);
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(port), "timeout = \"30s\""),
    );
    let to = format!("http://other.test:{other_port}/x");
    let command = format!(
        "curl -sS -L -o /dev/null -w 'curl %{{http_code}}\\n' 'http://api.test:{port}/redirect?to={to}'; \
         python3 -c \"import urllib.request as u, urllib.error as e\ntry: u.urlopen('http://api.test:{port}/redirect?to={to}')\nexcept e.HTTPError as x: print('python', x.code)\""
    );
    let m = call(&d, "sh", cmd(&command)).await;
    assert!(
        m.content.contains("curl 403") && m.content.contains("python 403"),
        "{}",
        m.content
    );
    let refused = denied(&m);
    assert!(
        !refused.is_empty()
            && refused
                .iter()
                .all(|r| r == &format!("http://other.test:{other_port}")),
        "{refused:?}"
    );
    let hops = server
        .heads()
        .iter()
        .filter(|h| h.starts_with("GET /redirect"))
        .count();
    assert_eq!(hops, 2, "{:?}", server.heads());
    assert_eq!(other.connections.load(Ordering::SeqCst), 0);
    d.close().await;
    h.assert_clean().await;
}

/// What is not a proxy request gets a 400 that says why, from a raw socket straight to the
/// gate.
async fn a_containers_gate_answers_malformed_requests_with_400(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(server.port), "timeout = \"30s\""),
    );
    // Python's sockets, not bash's `/dev/tcp`: under gVisor a read of bash's socket now and
    // then fails with EAGAIN, where Python's (with a timeout) waits and reads again. The first
    // line of the first two answers, all of the third.
    let garbage = "python3 -c \"\nimport socket\n\
        asks = [b'NONSENSE', b'GET / HTTP/1.1\\\\r\\\\nHost: x', b'CONNECT api.test HTTP/1.1']\n\
        for i, ask in enumerate(asks):\n\
        \x20   s = socket.create_connection(('127.0.0.1', 3128), timeout=20)\n\
        \x20   s.sendall(ask + b'\\\\r\\\\n\\\\r\\\\n')\n\
        \x20   answer = b''\n\
        \x20   while (i == 2 or b'\\\\r\\\\n' not in answer) and (chunk := s.recv(4096)):\n\
        \x20       answer += chunk\n\
        \x20   text = answer.decode(errors='replace')\n\
        \x20   print(text if i == 2 else text.splitlines()[0], flush=True)\n\"";
    let m = call(&d, "sh", cmd(garbage)).await;
    assert_eq!(
        m.content.matches("400 Bad Request").count(),
        3,
        "{}",
        m.content
    );
    assert!(m.content.contains("host:port"), "{}", m.content);
    assert!(denied(&m).is_empty(), "{:?}", denied(&m));
    assert_eq!(server.connections.load(Ordering::SeqCst), 0);
    d.close().await;
    h.assert_clean().await;
}

/// A thousand connections held open from inside the container: the gate keeps its bound (the
/// rest get a `503` at once), serves a request once they close, the call still ends at its
/// deadline, and the next call is served.
async fn a_thousand_connections_leave_a_containers_gate_serving(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let port = server.port;
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(port), "timeout = \"60s\""),
    );
    let flood = format!(
        "python3 -c \"\nimport socket, subprocess\nheld = []\nfor i in range(1000):\n    try:\n        held.append(socket.create_connection(('127.0.0.1', 3128), timeout=2))\n    except OSError:\n        pass\nprint('held', len(held), flush=True)\n\
         busy = subprocess.run(['curl', '-sS', '-m', '5', '-o', '/dev/null', '-w', '%{{http_code}}', 'http://api.test:{port}/during'], capture_output=True, text=True)\n\
         print('during', busy.stdout, flush=True)\nfor s in held:\n    s.close()\n\"; \
         curl -sS -m 5 http://api.test:{port}/after; echo; sleep 600"
    );
    let started = Instant::now();
    let m = call(&d, "sh", json!({ "command": flood, "timeout": 12 })).await;
    let took = started.elapsed();
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    assert!(took < Duration::from_secs(20), "{took:?}: {}", m.content);
    let held: usize = m
        .content
        .split("held ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(held > 64, "{}", m.content);
    assert!(m.content.contains("during 503"), "{}", m.content);
    assert!(m.content.contains("hello from /after"), "{}", m.content);
    let m = call(
        &d,
        "sh",
        cmd(&format!("curl -sS http://api.test:{port}/next")),
    )
    .await;
    assert!(m.content.contains("hello from /next"), "{}", m.content);
    d.close().await;
    h.assert_clean().await;
}

/// A tunnel whose far end never answers ends with the call's deadline, not the server's; in a
/// session, a tunnel a background job holds is closed when the command that opened it ends.
async fn a_tunnel_that_never_ends_ends_with_the_calls_deadline(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let server = HttpServer::start();
    let port = server.port;
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("", &granted(port), "timeout = \"60s\""),
    );
    let hang = format!("curl -sS -p http://api.test:{port}/hang; echo done");
    let started = Instant::now();
    let m = call(&d, "sh", json!({ "command": hang, "timeout": 3 })).await;
    let took = started.elapsed();
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    assert!(took < Duration::from_secs(10), "{took:?}: {}", m.content);
    assert!(
        server.heads().iter().any(|h| h.starts_with("GET /hang")),
        "the tunnel was open: {:?}",
        server.heads()
    );
    let m = call(
        &d,
        "sh",
        cmd(&format!("curl -sS http://api.test:{port}/after")),
    )
    .await;
    assert!(m.content.contains("hello from /after"), "{}", m.content);
    d.close().await;

    // A session's container outlives its commands, so here only the gate can end the tunnel:
    // the background curl's connection must be closed with the command, long before the
    // server's 30 s.
    let session = h.dispatcher(
        "session",
        &h.shell_policy("session = true", &granted(port), "timeout = \"30s\""),
    );
    let background = format!(
        "(curl -sS -p http://api.test:{port}/hang > /tmp/hang.out 2>&1; \
          echo \"curl exit $?\" >> /tmp/hang.out) > /dev/null 2>&1 & \
         for i in $(seq 50); do sleep 0.1; done; echo started"
    );
    let m = call(&session, "sh", cmd(&background)).await;
    assert!(m.content.contains("started"), "{}", m.content);
    let hangs = server
        .heads()
        .iter()
        .filter(|h| h.starts_with("GET /hang "))
        .count();
    assert_eq!(hangs, 2, "the tunnel was open: {:?}", server.heads());
    let m = call(
        &session,
        "sh",
        cmd("for i in $(seq 30); do grep -q 'curl exit' /tmp/hang.out && break; sleep 0.1; done; cat /tmp/hang.out"),
    )
    .await;
    assert!(m.content.contains("curl exit"), "{}", m.content);
    assert!(!m.content.contains("curl exit 0"), "{}", m.content);
    session.close().await;
    h.assert_clean().await;
}

/// Two sessions at once, each granted its own server: B listens on a port of its own loopback;
/// A's 127.0.0.1 is A's own (nothing there), A's gate refuses B's listener and B's server (not
/// granted to A, each refusal A's), and each session still reaches its own server.
async fn one_sessions_container_cannot_reach_anothers_gate_or_listener(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let (a_server, b_server) = (HttpServer::start(), HttpServer::start());
    let (a_port, b_port) = (a_server.port, b_server.port);
    let session = |port| h.shell_policy("session = true", &granted(port), "timeout = \"30s\"");
    let a = h.dispatcher("a", &session(a_port));
    let b = h.dispatcher("b", &session(b_port));
    const LISTENER: u16 = 8123;
    let listen = format!(
        "cd /tmp && echo hi > from-b && (python3 -m http.server {LISTENER} --bind 127.0.0.1 > /tmp/listener.log 2>&1 &); \
         for i in $(seq 50); do curl -s --noproxy '*' -o /dev/null http://127.0.0.1:{LISTENER}/from-b && break; sleep 0.1; done; \
         curl -sS --noproxy '*' -o /dev/null -w 'b-listener %{{http_code}}\\n' http://127.0.0.1:{LISTENER}/from-b"
    );
    let m = call(&b, "sh", cmd(&listen)).await;
    assert!(m.content.contains("b-listener 200"), "{}", m.content);

    // A probes while B's session runs a command of its own through its gate.
    let probe = format!(
        "curl -sS -m 3 --noproxy '*' -o /dev/null -w 'loopback %{{http_code}}\\n' http://127.0.0.1:{LISTENER}/from-a-loopback; \
         curl -sS -m 3 -o /dev/null -w 'gate-listener %{{http_code}}\\n' http://127.0.0.1:{LISTENER}/from-a-gate; \
         curl -sS -m 3 -o /dev/null -w 'gate-b %{{http_code}}\\n' http://api.test:{b_port}/from-a; \
         curl -sS http://api.test:{a_port}/a; echo"
    );
    let (ma, mb) = tokio::join!(
        call(&a, "sh", cmd(&probe)),
        call(
            &b,
            "sh",
            cmd(&format!("sleep 0.5; curl -sS http://api.test:{b_port}/b"))
        ),
    );
    assert!(ma.content.contains("loopback 000"), "{}", ma.content);
    assert!(ma.content.contains("gate-listener 403"), "{}", ma.content);
    assert!(ma.content.contains("gate-b 403"), "{}", ma.content);
    assert!(ma.content.contains("hello from /a"), "{}", ma.content);
    assert!(mb.content.contains("hello from /b"), "{}", mb.content);
    let mut refused = denied(&ma);
    refused.sort();
    assert_eq!(
        refused,
        vec![
            format!("http://127.0.0.1:{LISTENER}"),
            format!("http://api.test:{b_port}"),
        ]
    );
    assert!(denied(&mb).is_empty(), "{:?}", denied(&mb));

    // B's listener is still up, and only B ever reached it; A never reached B's server.
    let m = call(
        &b,
        "sh",
        cmd(&format!(
            "curl -sS --noproxy '*' -o /dev/null -w 'b-again %{{http_code}}\\n' http://127.0.0.1:{LISTENER}/from-b; cat /tmp/listener.log"
        )),
    )
    .await;
    assert!(m.content.contains("b-again 200"), "{}", m.content);
    assert!(m.content.contains("GET /from-b"), "{}", m.content);
    assert!(!m.content.contains("from-a"), "{}", m.content);
    assert!(
        b_server.heads().iter().all(|h| !h.contains("from-a")),
        "{:?}",
        b_server.heads()
    );
    a.close().await;
    b.close().await;
    h.assert_clean().await;
}
