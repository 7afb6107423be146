//! A tunnel to a host that carries a credential, opened by warden itself: TLS with the
//! sandbox under this sandbox's CA, TLS upstream verified against warden's roots, and one
//! request between, its credential set, whose answer comes back scrubbed.

use super::head::{HeadError, Request, parse_origin_form, read_head};
use super::{Connection, FOR_ITS_HOST, HEAD_WAIT, MISDIRECTED, Way, names_target, relay, reply};
use crate::credentials::normal;
use crate::scrub::Returning;
use rustls::pki_types::ServerName;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The sandbox's end of an intercepted tunnel: TLS under the sandbox's CA.
type Sandbox<'s> = tokio_rustls::server::TlsStream<&'s mut TcpStream>;

/// The host's end: TLS verified against warden's roots.
type Origin = tokio_rustls::client::TlsStream<TcpStream>;

/// A credentialed tunnel being opened: the connection it serves and where it goes. Each step
/// answers `None` when the tunnel ends there, the sandbox told why if it is owed an answer.
struct Tunnel<'a> {
    connection: &'a Connection,
    host: &'a str,
    port: u16,
    /// The tunnel as the command's denials name it.
    destination: String,
}

impl Connection {
    /// A tunnel to a host that carries a credential: TLS with the sandbox under this
    /// sandbox's CA, TLS upstream verified against warden's roots, and one request between,
    /// its credential set.
    pub(super) async fn intercept(
        &self,
        stream: &mut TcpStream,
        upstream: TcpStream,
        host: &str,
        port: u16,
        early: Vec<u8>,
    ) {
        let tunnel = Tunnel {
            connection: self,
            host,
            port,
            destination: format!("connect {host}:{port}"),
        };
        tunnel.open(stream, upstream, &early).await;
    }
}

impl Tunnel<'_> {
    async fn open(&self, stream: &mut TcpStream, upstream: TcpStream, early: &[u8]) {
        let Some(mut sandbox) = self.accept(stream, early).await else {
            return;
        };
        if let Err(reason) = self.names_host(&sandbox) {
            return self.deny(&mut sandbox, MISDIRECTED, reason).await;
        }
        let Some(mut origin) = self.connect(&mut sandbox, upstream).await else {
            return;
        };
        let Some((mut request, rest)) = self.read_request(&mut sandbox).await else {
            return;
        };
        let connection = self.connection;
        connection.credential(self.host, &mut request);
        let head = request.head(&format!("{}:{}", self.host, self.port));
        if origin.write_all(&head).await.is_err() || origin.write_all(&rest).await.is_err() {
            return;
        }
        connection
            .counts
            .up
            .fetch_add((head.len() + rest.len()) as u64, Ordering::Relaxed);
        let Some(back) = self.first_answer(&mut sandbox, &mut origin).await else {
            return;
        };
        let (from_sandbox, to_sandbox) = tokio::io::split(sandbox);
        let (from_origin, to_origin) = tokio::io::split(origin);
        let refused = relay(
            Way {
                from: from_sandbox,
                to: to_origin,
            },
            Way {
                from: from_origin,
                to: to_sandbox,
            },
            &connection.counts,
            Some(back),
        )
        .await;
        if let Some(reason) = refused {
            connection.record(self.destination.clone(), reason.to_string());
        }
    }

    /// Tells the sandbox the tunnel is open and takes its TLS, under its CA.
    async fn accept<'s>(&self, stream: &'s mut TcpStream, early: &[u8]) -> Option<Sandbox<'s>> {
        if !early.is_empty() {
            let why = "bytes arrived before the tunnel was open";
            reply(stream, "400 Bad Request", why).await;
            return None;
        }
        let acceptor = match self.connection.credentials.acceptor(self.host) {
            Ok(a) => a,
            Err(why) => {
                reply(stream, "500 Internal Server Error", &why.to_string()).await;
                return None;
            }
        };
        let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
        stream.write_all(ok).await.ok()?;
        // A sandbox that does not trust its CA (or speaks no TLS) ends here.
        acceptor.accept(stream).await.ok()
    }

    /// Whether the TLS server name the sandbox asked for, if it asked for one, is the
    /// tunnel's host; else why not.
    fn names_host(&self, sandbox: &Sandbox<'_>) -> Result<(), String> {
        let Some(asked) = sandbox.get_ref().1.server_name() else {
            return Ok(());
        };
        if normal(asked) == normal(self.literal()) {
            return Ok(());
        }
        Err(format!(
            "the TLS server name is {}, but the tunnel goes to {}; {FOR_ITS_HOST}",
            asked.escape_default(),
            self.host
        ))
    }

    /// TLS to the host over `upstream`, its certificate verified against warden's roots.
    async fn connect(&self, sandbox: &mut Sandbox<'_>, upstream: TcpStream) -> Option<Origin> {
        let (host, port) = (self.host, self.port);
        let name = match self.literal().parse::<std::net::IpAddr>() {
            Ok(ip) => ServerName::from(ip),
            Err(_) => match ServerName::try_from(host.to_owned()) {
                Ok(n) => n,
                Err(_) => {
                    let why = format!("{host} is not a valid TLS server name");
                    reply(sandbox, "502 Bad Gateway", &why).await;
                    return None;
                }
            },
        };
        let connector = tokio_rustls::TlsConnector::from(self.connection.gate.egress().tls());
        match connector.connect(name, upstream).await {
            Ok(origin) => Some(origin),
            Err(e) => {
                let reason = format!(
                    "the TLS connection to {host}:{port} failed ({e}): warden sends a \
                     credential only to a server whose certificate it verifies"
                );
                self.deny(sandbox, "502 Bad Gateway", reason).await;
                None
            }
        }
    }

    /// The tunnel's one request, naming a path as to a server, and the bytes after its head;
    /// refused unless its `Host` names the tunnel's host.
    async fn read_request(&self, sandbox: &mut Sandbox<'_>) -> Option<(Request, Vec<u8>)> {
        let head_by = (Instant::now() + HEAD_WAIT).min(self.connection.scope.deadline);
        let (request, rest) = match read_head(sandbox, head_by).await {
            Ok(Some((buf, len))) => match parse_origin_form(&buf[..len]) {
                Ok(r) => (r, buf[len..].to_vec()),
                Err(bad) => {
                    reply(sandbox, bad.status(), &bad.to_string()).await;
                    return None;
                }
            },
            Err(e @ HeadError::TooLarge) => {
                reply(sandbox, e.status(), &e.to_string()).await;
                return None;
            }
            // A tunnel whose request never comes just ends.
            Ok(None) | Err(HeadError::TimedOut) => return None,
        };
        if let Err(wrong) = names_target(&request.headers, self.host, self.port) {
            self.deny(sandbox, MISDIRECTED, wrong.to_string()).await;
            return None;
        }
        Some((request, rest))
    }

    /// The host's first answer, passed on to the sandbox through a scrubber of the
    /// credentials' values, which is answered to carry on with the rest.
    async fn first_answer(
        &self,
        sandbox: &mut Sandbox<'_>,
        origin: &mut Origin,
    ) -> Option<Returning> {
        let (host, port) = (self.host, self.port);
        // A server that ends the TLS session before answering (one that demands a client
        // certificate does so only now, under TLS 1.3) is told to the sandbox and the call.
        let mut first = vec![0u8; 16 << 10];
        let n = match origin.read(&mut first).await {
            Ok(n) => n,
            Err(e) => {
                let reason = format!(
                    "{host}:{port} ended the TLS session before answering ({e}); a server that \
                     demands a client certificate gets none from warden"
                );
                self.deny(sandbox, "502 Bad Gateway", reason).await;
                return None;
            }
        };
        let mut back = Returning::new(self.connection.credentials.secrets());
        let answer = match back.pass(&first[..n]) {
            Ok(answer) => answer,
            Err(refused) => {
                self.deny(sandbox, "502 Bad Gateway", refused.to_string())
                    .await;
                return None;
            }
        };
        sandbox.write_all(&answer).await.ok()?;
        self.connection
            .counts
            .down
            .fetch_add(n as u64, Ordering::Relaxed);
        Some(back)
    }

    /// The host without the brackets of an IPv6 literal.
    fn literal(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// A refusal of this tunnel: the command's denial, and an answer with `status`.
    async fn deny(&self, stream: &mut (impl AsyncWrite + Unpin), status: &str, reason: String) {
        let destination = self.destination.clone();
        self.connection
            .deny(stream, status, destination, reason)
            .await;
    }
}
