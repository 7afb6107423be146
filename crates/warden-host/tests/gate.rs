//! Net grants for host tools: the sandbox's only way out is warden's gate, which lets the
//! granted hosts through and refuses the rest, each refusal a denial of the call. Real
//! confined processes (curl, wget, python, pip, bash), servers on the test's 127.0.0.1.

use crate::common::*;
use serde_json::json;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use warden_core::SessionId;
use warden_host::{Helper, HostBackend};
use warden_net::{Egress, Resolver};
use warden_test_support::servers::{HttpServer, PackageIndex, TlsServer, accepted};

/// A host backend that resolves the test names to 127.0.0.1.
fn resolving() -> HostBackend {
    let names = ["api.test", "other.test", "a.apps.test", "apps.test"];
    HostBackend::new(Helper {
        program: env!("CARGO_BIN_EXE_warden-host-helper").into(),
        args: Vec::new(),
    })
    .egress(Egress::new(
        Resolver::with_overrides(names.iter().map(|n| format!("{n}:127.0.0.1"))).unwrap(),
    ))
}

/// A bash tool granted `net`, with python's and curl's folders on PATH.
fn bash(net: &str, extra: &str) -> String {
    format!(
        "[executor]\nkind = \"host\"\nname = \"bash\"\nargv = [\"/bin/bash\", \"-c\", \"{{command}}\"]\n{extra}\n\
         [grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\nnet = {net}\n[limits]\ntimeout = \"20s\"\n\
         memory = \"1GiB\"\n"
    )
}

#[tokio::test]
async fn granted_hosts_are_reached_through_the_gate_by_curl_wget_and_python() {
    let server = HttpServer::start();
    let port = server.port;
    let place = Place::new();
    let net = format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]");
    let (tool, limits) = place.tool_on(&bash(&net, ""), resolving());
    let command = format!(
        "curl -sS http://api.test:{port}/curl; echo; \
         wget -qO- http://api.test:{port}/wget; echo; \
         python3 -c \"import urllib.request as u; print(u.urlopen('http://api.test:{port}/py').read().decode())\"; \
         curl -sS --proxytunnel http://api.test:{port}/tunnel; echo; \
         echo \"proxy=$https_proxy\""
    );
    let (r, denied, usage) = call_metered(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    let t = text(&r);
    for path in ["/curl", "/wget", "/py", "/tunnel"] {
        assert!(t.contains(&format!("hello from {path}")), "{path}: {t}");
    }
    assert!(t.contains("proxy=http://127.0.0.1:3128"), "{t}");
    assert!(denied.is_empty(), "{denied:?}");
    let heads = server.heads();
    // The forwarded request is origin-form, with the proxy's one-hop headers gone.
    let curl = heads.iter().find(|h| h.starts_with("GET /curl ")).unwrap();
    assert!(curl.contains("Connection: close"), "{curl}");
    assert!(
        !curl.to_ascii_lowercase().contains("proxy-connection"),
        "{curl}"
    );
    let details = &r.as_ref().unwrap().details;
    assert_eq!(details["isolation"]["gate"], true, "{details:?}");
    assert!(usage.net_connections >= Some(4), "{usage:?}");
}

/// What went through the gate is the call's usage: a 1 MiB body shows as at least 1 MiB in,
/// and the requests as bytes out.
#[tokio::test]
async fn bytes_through_the_gate_are_the_calls_usage() {
    let server = HttpServer::start();
    let port = server.port;
    let place = Place::new();
    let net = format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]");
    let (tool, limits) = place.tool_on(&bash(&net, ""), resolving());
    let command =
        format!("curl -sS -o /dev/null -w '%{{size_download}}' http://api.test:{port}/big");
    let (r, _, usage) = call_metered(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    assert!(text(&r).contains("1048576"), "{}", text(&r));
    let inbound = usage.net_bytes_in.unwrap();
    assert!((1 << 20..(1 << 20) + 4096).contains(&inbound), "{usage:?}");
    assert!(usage.net_bytes_out.unwrap() > 50, "{usage:?}");
    assert_eq!(usage.net_connections, Some(1));
}

#[tokio::test]
async fn what_is_not_granted_is_refused_at_the_gate_and_each_refusal_is_a_denial() {
    let granted = HttpServer::start();
    let other = HttpServer::start();
    let (port, other_port) = (granted.port, other.port);
    let place = Place::new();
    let net = format!("[\"api.test:{port}\", \"127.0.0.1:{port}\", \"*.apps.test:{port}\"]");
    let (tool, limits) = place.tool_on(&bash(&net, ""), resolving());
    let command = format!(
        "curl -sS -o /dev/null -w 'port %{{http_code}}\\n' http://api.test:{other_port}/; \
         curl -sS -o /dev/null -w 'name %{{http_code}}\\n' http://other.test:{port}/; \
         curl -sS -o /dev/null -w 'addr %{{http_code}}\\n' http://10.1.2.3/; \
         curl -sS -o /dev/null -w 'apex %{{http_code}}\\n' http://apps.test:{port}/; \
         curl -sS http://a.apps.test:{port}/sub; echo; \
         curl -sS -L -o /dev/null -w 'redirect %{{http_code}}\\n' \
           'http://api.test:{port}/redirect?to=http://other.test:{other_port}/x'; \
         curl -sS -p -o /dev/null https://api.test:{other_port}/ 2>&1 | tail -c 300; echo"
    );
    let (r, denied) = call_denied(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    let t = text(&r);
    for line in [
        "port 403",
        "name 403",
        "addr 403",
        "apex 403",
        "redirect 403",
    ] {
        assert!(t.contains(line), "{line}: {t}");
    }
    // A wildcard covers names below it, not the name itself.
    assert!(t.contains("hello from /sub"), "{t}");
    // CONNECT to an ungranted port is refused before anything is dialled.
    assert!(t.contains("403"), "{t}");
    for destination in [
        format!("http://api.test:{other_port}"),
        format!("http://other.test:{port}"),
        "http://10.1.2.3:80".to_owned(),
        format!("http://apps.test:{port}"),
        format!("http://other.test:{other_port}"),
        format!("connect api.test:{other_port}"),
    ] {
        assert!(denied.contains(&destination), "{destination}: {denied:?}");
    }
    assert_eq!(
        other.connections.load(Ordering::SeqCst),
        0,
        "the ungranted server was reached"
    );
    // The redirect's first hop was granted and served.
    assert!(
        granted
            .heads()
            .iter()
            .any(|h| h.starts_with("GET /redirect"))
    );
}

#[tokio::test]
async fn a_name_pinned_to_loopback_needs_an_address_grant() {
    let server = HttpServer::start();
    let port = server.port;
    let place = Place::new();
    let (tool, limits) = place.tool_on(&bash(&format!("[\"api.test:{port}\"]"), ""), resolving());
    let command = format!("curl -sS -o /dev/null -w '%{{http_code}}' http://api.test:{port}/");
    let (r, denied) = call_denied(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    assert!(text(&r).contains("403"), "{}", text(&r));
    assert_eq!(denied, vec![format!("http://api.test:{port}")]);
    assert_eq!(server.connections.load(Ordering::SeqCst), 0);
}

/// Every way around the gate: raw sockets to the granted server and to host services (on
/// 0.0.0.0 and 127.0.0.1), the proxy variables unset, UDP, a DNS lookup. The same attacks
/// reach under `network = "unrestricted"`, so the test can see a reach.
#[tokio::test]
async fn nothing_gets_around_the_gate() {
    let granted = HttpServer::start();
    let port = granted.port;
    let any = TcpListener::bind("0.0.0.0:0").unwrap();
    let any_port = any.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let attack = format!(
        "echo hi > /dev/tcp/127.0.0.1/{port} && echo RAW-GRANTED; \
         echo hi > /dev/tcp/127.0.0.1/{any_port} && echo RAW-ANY; \
         env -u http_proxy -u HTTP_PROXY -u all_proxy -u ALL_PROXY curl -sS -m 3 http://127.0.0.1:{port}/ && echo NOPROXY; \
         curl -sS -m 3 --noproxy '*' http://127.0.0.1:{port}/ && echo NOPROXY; \
         python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', {udp_port})); print('UDP-SENT')\"; \
         python3 -c \"import socket; print('DNS', socket.getaddrinfo('example.org', 80)[0][4])\"; \
         true"
    );
    let place = Place::new();
    let (gated, limits) = place.tool_on(
        &bash(&format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]"), ""),
        resolving(),
    );
    let before = granted.connections.load(Ordering::SeqCst);
    let r = call(&gated, &limits, json!({ "command": attack })).await;
    let t = text(&r);
    for reach in ["RAW-GRANTED", "RAW-ANY", "NOPROXY", "DNS ("] {
        assert!(!t.contains(reach), "{reach}: {t}");
    }
    assert!(!accepted(&any), "a host service on 0.0.0.0 was reached");
    assert_eq!(
        granted.connections.load(Ordering::SeqCst),
        before,
        "reached around the gate"
    );
    assert!(udp.recv_from(&mut [0u8; 16]).is_err(), "a datagram got out");

    // The opt-in to every host opens all of it: what the gate holds back is real.
    let open = bash("[]", "network = \"unrestricted\"");
    let (open, limits) = place.tool_on(&open, resolving());
    let r = call(&open, &limits, json!({ "command": attack })).await;
    let t = text(&r);
    for reach in ["RAW-GRANTED", "RAW-ANY", "NOPROXY", "UDP-SENT"] {
        assert!(t.contains(reach), "{reach}: {t}");
    }
    assert!(accepted(&any));
    assert!(udp.recv_from(&mut [0u8; 16]).is_ok());
}

/// Bad proxy requests get a 4xx; a flood of connections cannot pin the gate or warden; the
/// call still ends at its deadline, and the next call is served.
#[tokio::test]
async fn the_gate_answers_garbage_with_400_and_survives_a_flood() {
    let server = HttpServer::start();
    let port = server.port;
    let place = Place::new();
    let net = format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]");
    let text_of = |limits: &str| bash(&net, "").replace("timeout = \"20s\"", limits);
    let (tool, limits) = place.tool_on(&text_of("timeout = \"20s\""), resolving());
    let garbage = "exec 3<>/dev/tcp/127.0.0.1/3128; printf 'NONSENSE\\r\\n\\r\\n' >&3; head -1 <&3; \
                   exec 4<>/dev/tcp/127.0.0.1/3128; printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&4; head -1 <&4";
    let r = call(&tool, &limits, json!({ "command": garbage })).await;
    let t = text(&r);
    assert_eq!(t.matches("400 Bad Request").count(), 2, "{t}");

    // A thousand connections held open, then one more request through the gate.
    let flood = format!(
        "python3 -c \"\nimport socket\nheld = []\nfor i in range(1000):\n    try:\n        s = socket.create_connection(('127.0.0.1', 3128), timeout=2)\n        held.append(s)\n    except OSError as e:\n        pass\nprint('held', len(held))\n\"; \
         curl -sS -m 5 http://api.test:{port}/after; echo"
    );
    let started = Instant::now();
    let r = call(&tool, &limits, json!({ "command": flood })).await;
    let t = text(&r);
    assert!(t.contains("held"), "{t}");
    assert!(t.contains("hello from /after"), "{t}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // A tunnel that never ends ends with the call.
    let (short, limits) = place.tool_on(&text_of("timeout = \"3s\""), resolving());
    let hang = format!("curl -sS -p http://api.test:{port}/hang; echo done");
    let started = Instant::now();
    let r = call(&short, &limits, json!({ "command": hang })).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}: {}",
        started.elapsed(),
        text(&r)
    );
    let r = call(
        &tool,
        &limits,
        json!({ "command": format!("curl -sS http://api.test:{port}/again") }),
    )
    .await;
    assert!(text(&r).contains("hello from /again"), "{}", text(&r));
}

/// In a session the gate belongs to the command running: each command's refusals are its own.
#[tokio::test]
async fn a_sessions_gate_attributes_refusals_to_their_command() {
    let server = HttpServer::start();
    let port = server.port;
    let place = Place::new();
    let net = format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]");
    let (tool, limits) = place.tool_on(&bash(&net, "session = true"), resolving());
    let session = SessionId::fresh();
    let (r, denied) = call_denied(
        &tool,
        &limits,
        session,
        json!({ "command": format!("cd /tmp && curl -sS http://api.test:{port}/one") }),
    )
    .await;
    assert!(text(&r).contains("hello from /one"), "{}", text(&r));
    assert!(denied.is_empty(), "{denied:?}");
    let (r, denied) = call_denied(
        &tool,
        &limits,
        session,
        json!({ "command": "pwd; curl -sS -o /dev/null -w '%{http_code}' http://other.test/" }),
    )
    .await;
    let t = text(&r);
    assert!(t.contains("/tmp") && t.contains("403"), "{t}");
    assert_eq!(denied, vec!["http://other.test:80".to_owned()]);
    let (r, denied) = call_denied(
        &tool,
        &limits,
        session,
        json!({ "command": format!("curl -sS http://api.test:{port}/three") }),
    )
    .await;
    assert!(text(&r).contains("hello from /three"), "{}", text(&r));
    assert!(denied.is_empty(), "{denied:?}");
}

/// HTTPS goes through a CONNECT tunnel, end to end: the sandbox's client verifies the server's
/// certificate itself (the gate never sees inside), and only a granted host:port is tunnelled.
#[tokio::test]
async fn https_reaches_a_granted_tls_server_through_a_tunnel() {
    let server = TlsServer::start(&["api.test"]);
    let port = server.port;
    let place = Place::new();
    let certs = place.folder("certs", 0o755, None);
    std::fs::write(certs.join("ca.pem"), &server.ca_pem).unwrap();
    chmod(&certs.join("ca.pem"), 0o644);
    let ca = certs.join("ca.pem").display().to_string();
    let policy = bash(&format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]"), "").replace(
        "[grants]\n",
        &format!(
            "[grants]\nfs = [{{ host = \"{}\", access = \"read-only\" }}]\n",
            certs.display()
        ),
    );
    let (tool, limits) = place.tool_on(&policy, resolving());
    let command = format!(
        "curl -sS --cacert {ca} https://api.test:{port}/curl; echo; \
         python3 -c \"import ssl, urllib.request as u; c = ssl.create_default_context(cafile='{ca}'); print(u.urlopen('https://api.test:{port}/py', context=c).read().decode())\"; \
         curl -sS -o /dev/null -w 'other %{{http_code}}\\n' --cacert {ca} https://other.test:{port}/"
    );
    let (r, denied) = call_denied(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    let t = text(&r);
    assert!(t.contains("hello over tls from /curl"), "{t}");
    assert!(t.contains("hello over tls from /py"), "{t}");
    assert_eq!(denied, vec![format!("connect other.test:{port}")], "{t}");
}

/// Whether this machine's python3 has pip (Debian's python3-pip): what a host tool runs.
fn pip_here() -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `pip download` and `pip install` from a local package index through the gate (the proxy
/// variables are all pip needs), and a refusal when the index's host is not granted: pip
/// fails, the refusal is the call's denial, and the index is never reached.
#[tokio::test]
async fn pip_reaches_a_granted_package_index_through_the_gate() {
    if !pip_here() {
        let why = "this machine's python3 has no pip (apt-get install python3-pip)";
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true and {why}"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    let index = PackageIndex::start("wardenprobe");
    let port = index.port;
    // No version check (it would ask pypi.org), no cache (the sandbox has no home), and the
    // index trusted though it is plain HTTP.
    let pip = "python3 -m pip --disable-pip-version-check --no-cache-dir --retries 0 \
               --timeout 10 --trusted-host api.test";
    let command = format!(
        "{pip} download --no-deps --index-url http://api.test:{port}/simple/ -d /tmp/dl wardenprobe && \
         {pip} install --no-index --no-deps --target /tmp/t /tmp/dl/wardenprobe-0.1-py3-none-any.whl && \
         PYTHONPATH=/tmp/t python3 -c 'import wardenprobe; print(wardenprobe.MARK)'"
    );
    let place = Place::new();
    // No grant beyond the net: Debian's pip reads /etc/debian_version (its vendored `distro`
    // fails on EACCES), which the sandbox's system files include.
    let with_net = |net: &str| bash(net, "");
    let net = format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]");
    let (tool, limits) = place.tool_on(&with_net(&net), resolving());
    let (r, denied) = call_denied(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    let t = text(&r);
    assert!(r.is_ok(), "{t}");
    assert!(t.contains(&index.mark), "{t}");
    assert!(denied.is_empty(), "{denied:?}");
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

    // The same command with the index's host not granted: pip is refused at the gate.
    let before = index.connections.load(Ordering::SeqCst);
    let net = format!("[\"other.test:{port}\", \"127.0.0.1:{port}\"]");
    let (tool, limits) = place.tool_on(&with_net(&net), resolving());
    let (r, denied) = call_denied(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": command }),
    )
    .await;
    let t = text(&r);
    assert!(r.is_err(), "{t}");
    assert!(t.contains("No matching distribution"), "{t}");
    assert!(
        denied.contains(&format!("http://api.test:{port}")),
        "{denied:?}: {t}"
    );
    assert_eq!(
        index.connections.load(Ordering::SeqCst),
        before,
        "the index was reached"
    );
}

/// B's listener, started in the background of its session: a UDP socket on a port of B's
/// loopback and, where the sandbox lets it listen, TCP on the same port; it prints the port
/// and logs what reaches it to /tmp/got.
const LISTENER: &str = r#"cat > /tmp/listen.py <<'EOF'
import socket, threading
def log(what):
    with open('/tmp/got', 'a') as f:
        f.write(what + '\n')
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(('127.0.0.1', 0))
port = udp.getsockname()[1]
try:
    tcp = socket.socket()
    tcp.bind(('127.0.0.1', port))
    tcp.listen()
    def accept():
        while True:
            conn, _ = tcp.accept()
            log('tcp ' + conn.recv(100).decode())
    threading.Thread(target=accept, daemon=True).start()
    print('listening', port, 'tcp', flush=True)
except OSError as e:
    print('listening', port, 'udp-only', e.strerror, flush=True)
while True:
    log('udp ' + udp.recvfrom(100)[0].decode())
EOF
touch /tmp/got; (python3 /tmp/listen.py > /tmp/listen.out 2>&1 &)
for i in $(seq 50); do grep -q listening /tmp/listen.out && break; sleep 0.1; done; cat /tmp/listen.out"#;

/// What session A sends to port `port` of its own loopback, by UDP and by TCP.
fn knock(port: u16) -> String {
    format!(
        "python3 -c \"\nimport socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'from-a', ('127.0.0.1', {port}))\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'from-a')\n    print('tcp-connected')\nexcept OSError as e:\n    print('tcp-refused', e)\n\""
    )
}

/// The port B's listener printed.
fn listening_port(out: &str) -> u16 {
    out.split("listening ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port: {out}"))
}

/// Two sessions at once, each granted its own server: B listens on its own loopback (UDP; a
/// gated sandbox may not listen on TCP at all); A's 127.0.0.1 is A's own, so nothing A sends
/// there reaches B, and A's gate refuses B's server (not granted to A, the refusal A's), while
/// each session reaches its own server. With `network = "unrestricted"` both share the host's
/// loopback and A's datagram does reach B: what the namespaces hold apart is real.
#[tokio::test]
async fn one_host_session_cannot_reach_anothers_gate_or_listener() {
    let (a_server, b_server) = (HttpServer::start(), HttpServer::start());
    let (a_port, b_port) = (a_server.port, b_server.port);
    let (a_place, b_place) = (Place::new(), Place::new());
    let net = |port: u16| format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]");
    let (a, limits) = a_place.tool_on(&bash(&net(a_port), "session = true"), resolving());
    let (b, _) = b_place.tool_on(&bash(&net(b_port), "session = true"), resolving());
    let (sa, sb) = (SessionId::fresh(), SessionId::fresh());
    let r = call_in(&b, &limits, sb, json!({ "command": LISTENER })).await;
    let port = listening_port(&text(&r));

    let probe = format!(
        "{}; curl -sS -o /dev/null -w 'gate-b %{{http_code}}\\n' http://api.test:{b_port}/from-a; \
         curl -sS http://api.test:{a_port}/a; echo",
        knock(port)
    );
    let b_own = format!(
        "sleep 0.5; python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'from-b', ('127.0.0.1', {port}))\"; \
         curl -sS http://api.test:{b_port}/b"
    );
    let ((ra, denied_a), (rb, denied_b)) = tokio::join!(
        call_denied(&a, &limits, sa, json!({ "command": probe })),
        call_denied(&b, &limits, sb, json!({ "command": b_own })),
    );
    let (ta, tb) = (text(&ra), text(&rb));
    assert!(ta.contains("tcp-refused"), "{ta}");
    assert!(ta.contains("gate-b 403"), "{ta}");
    assert!(ta.contains("hello from /a"), "{ta}");
    assert!(tb.contains("hello from /b"), "{tb}");
    assert_eq!(denied_a, vec![format!("http://api.test:{b_port}")]);
    assert!(denied_b.is_empty(), "{denied_b:?}");
    let got = text(
        &call_in(
            &b,
            &limits,
            sb,
            json!({ "command": "sleep 0.3; cat /tmp/got" }),
        )
        .await,
    );
    assert!(got.contains("udp from-b"), "B's listener is up: {got}");
    assert!(!got.contains("from-a"), "A reached B: {got}");
    assert!(
        b_server.heads().iter().all(|h| !h.contains("from-a")),
        "{:?}",
        b_server.heads()
    );
    a.end_session(sa).await;
    b.end_session(sb).await;

    // The same with both on the host's network: A's datagram and connection reach B.
    let open = bash("[]", "session = true\nnetwork = \"unrestricted\"");
    let (a, limits) = a_place.tool_on(&open, resolving());
    let (b, _) = b_place.tool_on(&open, resolving());
    let (sa, sb) = (SessionId::fresh(), SessionId::fresh());
    let r = call_in(&b, &limits, sb, json!({ "command": LISTENER })).await;
    let port = listening_port(&text(&r));
    let r = call_in(&a, &limits, sa, json!({ "command": knock(port) })).await;
    assert!(text(&r).contains("tcp-connected"), "{}", text(&r));
    let got = text(
        &call_in(
            &b,
            &limits,
            sb,
            json!({ "command": "sleep 0.3; cat /tmp/got" }),
        )
        .await,
    );
    assert!(
        got.contains("udp from-a") && got.contains("tcp from-a"),
        "{got}"
    );
    a.end_session(sa).await;
    b.end_session(sb).await;
}
