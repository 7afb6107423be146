//! The gate as a hostile sandbox meets it, against real servers on 127.0.0.1: a credential
//! host that echoes everything it is sent (over HTTP and TLS, a few bytes at a time), a body
//! the gate cannot scan, requests whose `Host` or TLS server name says another host, plain
//! HTTP without the credential's leave, and a request head one byte over the limit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_core::{Credential, Denials, HostGrant, NetGrants};
use warden_net::{Credentials, Egress, Gate, Proxy, Resolver, Scope};
use warden_test_support::servers::{EchoServer, HttpServer};

const TOKEN: &str = "real-token-5d0c9e31b7a2";

/// A gate on 127.0.0.1 granted api.test and 127.0.0.1 on `ports` (test names resolve to
/// 127.0.0.1), trusting `roots` upstream, with `credentials`; serving one command until
/// dropped.
struct Bench {
    _proxy: Proxy,
    port: u16,
    denials: Denials,
    credentials: Credentials,
}

fn bench(ports: &[u16], credentials: Vec<(Credential, String)>, roots: Option<&str>) -> Bench {
    let names = ["api.test", "b.test"].map(|n| format!("{n}:127.0.0.1"));
    let mut egress = Egress::new(Resolver::with_overrides(names).unwrap());
    if let Some(pem) = roots {
        egress = egress.with_roots_pem(pem.as_bytes()).unwrap();
    }
    let grants = NetGrants {
        hosts: ports
            .iter()
            .flat_map(|p| [format!("api.test:{p}"), format!("127.0.0.1:{p}")])
            .map(|h| HostGrant::parse(&h).unwrap())
            .collect(),
        credentials: credentials.iter().map(|(c, _)| c.clone()).collect(),
        ..NetGrants::default()
    };
    let credentials = Credentials::new(credentials);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let gate = Gate::new(Arc::new(grants), egress);
    let proxy = Proxy::start(listener, gate, credentials.clone()).unwrap();
    let denials = Denials::default();
    proxy.begin(Scope {
        denials: denials.clone(),
        deadline: Instant::now() + Duration::from_secs(20),
    });
    Bench {
        _proxy: proxy,
        port,
        denials,
        credentials,
    }
}

/// A credential for api.test in `Authorization`, with a placeholder in `API_TOKEN`.
fn credential(allow_plain_http: bool) -> (Credential, String) {
    let c = Credential {
        host: "api.test".into(),
        header: "Authorization".into(),
        from_host: "TOKEN".into(),
        prefix: "Bearer ".into(),
        env: Some("API_TOKEN".into()),
        allow_plain_http,
    };
    (c, format!("Bearer {TOKEN}"))
}

impl Bench {
    fn placeholder(&self) -> String {
        self.credentials.sandbox_env()[0].1.clone()
    }

    fn denied(&self) -> String {
        format!("{:?}", self.denials.snapshot().kept)
    }

    /// Sends `request` to the gate as it is and reads the answer to its end.
    async fn send(&self, request: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        read_all(&mut s).await
    }

    /// Opens a tunnel to `target` and, inside TLS asking for `server_name` (verified against
    /// the sandbox's CA when it is the target's host), sends `request`.
    async fn send_tls(&self, target: &str, server_name: &str, request: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        let connect = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        s.write_all(connect.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(s.read(&mut byte).await.unwrap(), 1, "{answer:?}");
            answer.push(byte[0]);
        }
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        let config = if target.starts_with(&format!("{server_name}:")) {
            let pem = self.credentials.ca_pem().unwrap();
            let trusting = Egress::new(Resolver::default()).with_roots_pem(pem.as_bytes());
            trusting.unwrap().tls()
        } else {
            any_certificate()
        };
        let name = ServerName::try_from(server_name.to_owned()).unwrap();
        let connector = tokio_rustls::TlsConnector::from(config);
        let mut tls = connector.connect(name, s).await.unwrap();
        tls.write_all(request.as_bytes()).await.unwrap();
        read_all(&mut tls).await
    }
}

/// What arrives until the peer ends (a TLS peer may end without a close_notify).
async fn read_all(s: &mut (impl AsyncRead + Unpin)) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request a sandbox might send to an echoing host to get the secret back: the placeholder
/// in the credential's own header, in another header and in the body.
fn echo_request(path: &str, host: &str, placeholder: &str) -> String {
    let body = format!("token={placeholder}");
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {placeholder}\r\n\
         X-Echo: {placeholder}\r\nAccept-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn an_echoing_host_over_tls_hands_back_no_secret() {
    let echo = EchoServer::tls(&["api.test"]);
    let p = echo.port;
    let b = bench(&[p], vec![credential(false)], echo.ca_pem.as_deref());
    let placeholder = b.placeholder();
    let target = format!("api.test:{p}");
    let answer = b
        .send_tls(
            &target,
            "api.test",
            &echo_request("/", &target, &placeholder),
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(!answer.contains(TOKEN), "the secret came back: {answer}");
    // The host echoed the value, in a header and in the body, and both were masked.
    assert_eq!(answer.matches("[warden:redacted]").count(), 2, "{answer}");
    let received = echo.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let got = received[0].to_ascii_lowercase();
    assert!(
        got.contains(&format!("authorization: bearer {TOKEN}")),
        "{got}"
    );
    // The placeholder anywhere but in the credential's own header stays a placeholder.
    assert!(got.contains(&format!("x-echo: {placeholder}")), "{got}");
    assert!(got.contains(&format!("token={placeholder}")), "{got}");
    assert!(got.contains("accept-encoding: identity"), "{got}");
    assert!(!got.contains("gzip"), "{got}");
}

#[tokio::test]
async fn plain_http_carries_a_credential_only_where_it_says_so_and_is_scrubbed_too() {
    let echo = EchoServer::http();
    let p = echo.port;
    let target = format!("api.test:{p}");
    let refused = bench(&[p], vec![credential(false)], None);
    let request = echo_request(
        &format!("http://{target}/"),
        &target,
        &refused.placeholder(),
    );
    let answer = refused.send(&request).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("allow_plain_http"), "{answer}");
    assert!(
        refused.denied().contains("TLS only"),
        "{}",
        refused.denied()
    );
    assert!(echo.received().is_empty(), "{:?}", echo.received());

    let allowed = bench(&[p], vec![credential(true)], None);
    let request = echo_request(
        &format!("http://{target}/"),
        &target,
        &allowed.placeholder(),
    );
    let answer = allowed.send(&request).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(!answer.contains(TOKEN), "the secret came back: {answer}");
    assert_eq!(answer.matches("[warden:redacted]").count(), 2, "{answer}");
    let received = echo.received();
    assert!(
        received[0].contains(&format!("Bearer {TOKEN}")),
        "{received:?}"
    );
}

#[tokio::test]
async fn a_body_the_gate_cannot_scan_is_refused() {
    let echo = EchoServer::tls(&["api.test"]);
    let p = echo.port;
    let b = bench(&[p], vec![credential(false)], echo.ca_pem.as_deref());
    let target = format!("api.test:{p}");
    let request = format!("GET /gzip HTTP/1.1\r\nHost: {target}\r\n\r\n");
    let answer = b.send_tls(&target, "api.test", &request).await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("cannot scan"), "{answer}");
    assert!(!answer.contains(TOKEN), "{answer}");
    assert!(b.denied().contains("`gzip`"), "{}", b.denied());
}

#[tokio::test]
async fn a_credential_goes_to_no_request_that_names_another_host() {
    let web = EchoServer::http();
    let tls = EchoServer::tls(&["api.test"]);
    let (w, t) = (web.port, tls.port);
    let b = bench(&[w, t], vec![credential(true)], tls.ca_pem.as_deref());

    for host in [
        "b.test",
        "b.test:80",
        "api.test.b.test",
        "x@api.test",
        "api.test:1",
    ] {
        let request = format!("GET http://api.test:{w}/ HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let answer = b.send(&request).await;
        assert!(answer.starts_with("HTTP/1.1 421"), "{host}: {answer}");
        assert!(answer.contains("Host header"), "{host}: {answer}");
    }
    let twice =
        format!("GET http://api.test:{w}/ HTTP/1.1\r\nHost: api.test\r\nHost: b.test\r\n\r\n");
    assert!(b.send(&twice).await.starts_with("HTTP/1.1 421"));
    assert!(web.received().is_empty(), "{:?}", web.received());

    let target = format!("api.test:{t}");
    let inside = "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n";
    let answer = b.send_tls(&target, "api.test", inside).await;
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    let answer = b
        .send_tls(
            &target,
            "b.test",
            &format!("GET / HTTP/1.1\r\nHost: {target}\r\n\r\n"),
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    assert!(answer.contains("TLS server name is b.test"), "{answer}");
    assert!(tls.received().is_empty(), "{:?}", tls.received());
    let denied = b.denied();
    assert!(
        denied.contains(&format!("connect api.test:{t}")),
        "{denied}"
    );
    assert!(denied.contains(&format!("http://api.test:{w}")), "{denied}");

    // The host it goes to, with its port or without, in any case: let through.
    for host in [format!("API.test:{t}"), "api.test.".to_owned()] {
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let answer = b.send_tls(&target, "api.test", &request).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
}

#[tokio::test]
async fn a_request_head_one_byte_over_the_limit_is_refused() {
    let web = HttpServer::start();
    let w = web.port;
    let b = bench(&[w], Vec::new(), None);
    let head = |len: usize| {
        let start = format!("GET http://127.0.0.1:{w}/ HTTP/1.1\r\nX-Pad: ");
        let pad = len - start.len() - 4;
        format!("{start}{}\r\n\r\n", "a".repeat(pad))
    };
    let at_limit = b.send(&head(16 << 10)).await;
    assert!(at_limit.starts_with("HTTP/1.1 200"), "{at_limit}");
    let over = b.send(&head((16 << 10) + 1)).await;
    assert!(over.starts_with("HTTP/1.1 431"), "{over}");
    assert_eq!(web.heads().len(), 1);
}

/// A client that takes any certificate: a sandbox that asks for one name and means another.
fn any_certificate() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
