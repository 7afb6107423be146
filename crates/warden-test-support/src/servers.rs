//! Servers on 127.0.0.1 that network tests reach, or must not: each counts what reached it.
//! Among them a package index in the form pip reads, serving a wheel built at start.

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
    let head = read_head(&stream);
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

/// Whether `listener` got a connection within half a second: a reach, for tests that must
/// see none.
pub fn accepted(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    for _ in 0..20 {
        if listener.accept().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// The request head on `stream`, up to the blank line (or what came before the peer stopped).
fn read_head(stream: impl Read) -> String {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    head
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
        let (config, ca_pem) = tls_config(names, client_certificates);
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
                    let head = read_head(&mut tls);
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
            ca_pem,
            connections,
            requests,
        }
    }
}

/// A server configuration with a certificate for `names` from a CA made for it alone, and
/// that CA's certificate (PEM); with `client_certificates`, clients must show one from it.
/// A test CA and a server certificate it issued for `names` (host names or IP addresses).
pub struct Identity {
    /// The CA's certificate: what a client must trust.
    pub ca_pem: String,
    /// The server's certificate and its private key (PKCS#8).
    pub cert_pem: String,
    pub key_pem: String,
    ca_der: rustls::pki_types::CertificateDer<'static>,
    cert_der: rustls::pki_types::CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Identity {
    pub fn new(names: &[&str]) -> Identity {
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
        Identity {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_der: ca_cert.der().clone(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
}

fn tls_config(names: &[&str], client_certificates: bool) -> (Arc<rustls::ServerConfig>, String) {
    let identity = Identity::new(names);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if client_certificates {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(identity.ca_der.clone()).unwrap();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder
        .with_single_cert(
            vec![identity.cert_der],
            rustls::pki_types::PrivateKeyDer::Pkcs8(identity.key_der.into()),
        )
        .unwrap();
    (Arc::new(config), identity.ca_pem)
}

/// A credential host at its most careless, on 127.0.0.1: it answers every request with the
/// request itself, each header back as an `X-Echo-<name>` header and the whole request (head
/// and body) as the body, written a few bytes at a time with pauses between, so whatever it
/// echoes is cut across reads. `/gzip` answers with a body it says is gzip-encoded. Over
/// TLS with a certificate for `names` when started with [`EchoServer::tls`].
pub struct EchoServer {
    pub port: u16,
    /// The CA's certificate (PEM) of a TLS echo: what a client must trust to reach it.
    pub ca_pem: Option<String>,
    /// Each request received, head and body, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl EchoServer {
    /// Over plain HTTP.
    pub fn http() -> EchoServer {
        Self::start(None)
    }

    /// Over TLS, with a certificate for `names`.
    pub fn tls(names: &[&str]) -> EchoServer {
        Self::start(Some(tls_config(names, false)))
    }

    fn start(tls: Option<(Arc<rustls::ServerConfig>, String)>) -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (config, ca_pem) = tls.unzip();
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, seen) = (config.clone(), seen.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                    let _ = stream.set_nodelay(true);
                    match config {
                        None => echo(stream, &seen),
                        Some(config) => {
                            let Ok(conn) = rustls::ServerConnection::new(config) else {
                                return;
                            };
                            let mut tls = rustls::StreamOwned::new(conn, stream);
                            echo(&mut tls, &seen);
                            tls.conn.send_close_notify();
                            let _ = tls.flush();
                        }
                    }
                });
            }
        });
        EchoServer {
            port,
            ca_pem,
            requests,
        }
    }

    /// The requests received, head and body, in order.
    pub fn received(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request from `stream` (its body by `Content-Length`) and echoes it back.
fn echo(mut stream: impl Read + Write, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(&mut stream);
    let mut head = String::new();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    drop(reader);
    let request = format!("{head}{}", String::from_utf8_lossy(&body));
    seen.lock().unwrap().push(request.clone());
    let gzip = head.starts_with("GET /gzip ");
    let mut response = String::from("HTTP/1.1 200 OK\r\nConnection: close\r\n");
    for (name, value) in &headers {
        response.push_str(&format!("X-Echo-{name}: {value}\r\n"));
    }
    if gzip {
        response.push_str("Content-Encoding: gzip\r\n");
    }
    response.push_str(&format!(
        "Content-Length: {}\r\n\r\n{request}",
        request.len()
    ));
    for piece in response.as_bytes().chunks(5) {
        if stream
            .write_all(piece)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
        std::thread::sleep(Duration::from_micros(300));
    }
}

/// A package index on 127.0.0.1 in PEP 503's "simple" form, as pip reads it: `/simple/` lists
/// one project, `/simple/<project>/` links to its one wheel (with its sha256, which pip checks)
/// and `/files/<wheel>` serves it; anything else is a 404.
pub struct PackageIndex {
    pub port: u16,
    /// The project's name, as `pip download` is asked for it.
    pub project: String,
    /// What `import <project>; print(<project>.MARK)` prints once the wheel is installed.
    pub mark: String,
    /// The request heads received, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
    /// Connections accepted: a reach, even one that sent nothing.
    pub connections: Arc<AtomicUsize>,
}

impl PackageIndex {
    /// Serves a pure-Python wheel of `project` 0.1, built now (see [`wheel`]).
    pub fn start(project: &str) -> PackageIndex {
        let (file, bytes) = wheel(project, "0.1");
        let sha256 = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(&bytes))
        };
        let listing = format!(
            "<!DOCTYPE html>\n<html><body>\n<a href=\"../../files/{file}#sha256={sha256}\">{file}</a>\n</body></html>\n"
        );
        let root = format!(
            "<!DOCTYPE html>\n<html><body><a href=\"{project}/\">{project}</a></body></html>\n"
        );
        let routes: Arc<Vec<(String, &'static str, Vec<u8>)>> = Arc::new(vec![
            ("/simple/".to_owned(), "text/html", root.into_bytes()),
            (
                format!("/simple/{project}/"),
                "text/html",
                listing.into_bytes(),
            ),
            (format!("/files/{file}"), "application/octet-stream", bytes),
        ]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (requests.clone(), connections.clone());
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let (seen, routes) = (seen.clone(), routes.clone());
                std::thread::spawn(move || {
                    let head = read_head(&stream);
                    seen.lock().unwrap().push(head.clone());
                    let path = head.split_whitespace().nth(1).unwrap_or("/");
                    let (status, kind, body) = routes
                        .iter()
                        .find(|(p, _, _)| p == path)
                        .map_or(("404 Not Found", "text/plain", &b"not here"[..]), |r| {
                            ("200 OK", r.1, &r.2[..])
                        });
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(body);
                });
            }
        });
        PackageIndex {
            port,
            project: project.to_owned(),
            mark: format!("{project} 0.1 from the test index"),
            requests,
            connections,
        }
    }

    /// The request heads received, in order.
    pub fn heads(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A pure-Python wheel of `project` (`<project>/__init__.py` setting `MARK`, and the
/// dist-info's METADATA, WHEEL and RECORD): its file name and bytes. A wheel is a zip, and
/// none of warden's crates writes zips, so this machine's python3 writes it (no binary in git).
pub fn wheel(project: &str, version: &str) -> (String, Vec<u8>) {
    const WRITE: &str = r#"
import base64, hashlib, sys, zipfile
project, version, out = sys.argv[1:4]
info = f"{project}-{version}.dist-info"
files = {
    f"{project}/__init__.py": f'MARK = "{project} {version} from the test index"\n',
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n",
    f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: warden-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, text in files.items():
    data = text.encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append(f"{info}/RECORD,,")
with zipfile.ZipFile(out, "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
    z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
"#;
    let dir = tempfile::tempdir().unwrap();
    let file = format!("{project}-{version}-py3-none-any.whl");
    let out = dir.path().join(&file);
    let status = std::process::Command::new("python3")
        .args(["-c", WRITE, project, version])
        .arg(&out)
        .status()
        .expect("python3 runs (it writes the test wheel)");
    assert!(status.success(), "python3 could not write the wheel");
    (file, std::fs::read(&out).unwrap())
}

/// The value of header `name` among a response's `headers` (its lines, the status line first),
/// as an HTTP client reads it: the name in any case, the value trimmed.
pub fn header(headers: &[String], name: &str) -> Option<String> {
    headers.iter().skip(1).find_map(|h| {
        let (k, v) = h.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}
