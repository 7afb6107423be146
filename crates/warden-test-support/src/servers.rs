//! Servers on 127.0.0.1 that network tests reach, or must not: each counts what reached it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An HTTP/1.1 server on 127.0.0.1 that records each request's head.
pub struct HttpServer {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<String>>>,
    /// Connections accepted: a reach, even one that sent nothing.
    pub connections: Arc<AtomicUsize>,
}

impl HttpServer {
    pub fn start() -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (requests.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let seen = seen.clone();
                std::thread::spawn(move || serve(stream, &seen));
            }
        });
        HttpServer {
            port,
            requests,
            connections,
        }
    }

    /// The request heads received, in order.
    pub fn heads(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Answers `/big` (1 MiB), `/hang` (30 s), `/echo-auth` (the Authorization header),
/// `/redirect?to=URL` (a 302 to URL) and any other path with `hello from PATH`.
fn serve(stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    seen.lock().unwrap().push(head.clone());
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let body = match path.as_str() {
        "/big" => "x".repeat(1 << 20),
        "/hang" => {
            std::thread::sleep(Duration::from_secs(30));
            String::new()
        }
        "/echo-auth" => head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .unwrap_or("none")
            .to_owned(),
        p if p.starts_with("/redirect?to=") => {
            let to = &p["/redirect?to=".len()..];
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            return;
        }
        p => format!("hello from {p}"),
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A TCP server that answers `echo:` and what it read; the count is of connections.
pub fn tcp_echo() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            let mut got = String::new();
            let _ = s.read_to_string(&mut got);
            let _ = write!(s, "echo:{got}");
        }
    });
    (port, count)
}

/// An HTTPS server on 127.0.0.1 with a certificate for `names` from a CA made for it alone,
/// answering `/echo-auth` with the request's Authorization header and every other request
/// with `hello over tls from PATH`.
pub struct TlsServer {
    pub port: u16,
    /// The CA's certificate, PEM: what a client must trust to reach the server.
    pub ca_pem: String,
    /// Connections accepted: a reach, even one whose handshake failed.
    pub connections: Arc<AtomicUsize>,
    /// The request heads received over TLS, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl TlsServer {
    pub fn start(names: &[&str]) -> TlsServer {
        Self::start_with(names, false)
    }

    /// The same, refusing every client that shows no certificate from its CA.
    pub fn requiring_client_certificates(names: &[&str]) -> TlsServer {
        Self::start_with(names, true)
    }

    fn start_with(names: &[&str], client_certificates: bool) -> TlsServer {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "warden test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if client_certificates {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca_cert.der().clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let config = config.clone();
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    let mut reader = BufReader::new(&mut tls);
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    if head.is_empty() {
                        return;
                    }
                    seen.lock().unwrap().push(head.clone());
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let body = match path.as_str() {
                        "/echo-auth" => head
                            .lines()
                            .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
                            .unwrap_or("none")
                            .to_owned(),
                        p => format!("hello over tls from {p}"),
                    };
                    let _ = write!(
                        tls,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        TlsServer {
            port,
            ca_pem: ca_cert.pem(),
            connections,
            requests,
        }
    }
}
