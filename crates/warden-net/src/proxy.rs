//! The gate as an HTTP proxy, for sandboxes that run programs rather than wasm: the sandbox
//! has a network namespace of its own with nothing in it but a listener on
//! `127.0.0.1:GATE_PORT`, handed to warden, and every connection to it is served here, in
//! warden's own namespace. Two request forms are taken: an absolute-form HTTP request
//! (`GET http://host/path`), forwarded with `Connection: close`, and `CONNECT host:port`, a
//! tunnel for HTTPS or any TCP protocol. Either way the destination is vetted by [`Gate`]
//! before anything is dialled, and a refusal is a `403` and a denial of the running command.
//!
//! A tunnel to a host that carries a credential is opened by warden itself: the gate shows
//! the sandbox a certificate from the sandbox's own CA, verifies the upstream server against
//! [`crate::Egress`]'s roots, and sets the credential in each request (see
//! [`Credentials`]). Tunnels elsewhere stay end to end. A request that carries a credential
//! must be meant for its host (its `Host`, and the TLS server name the sandbox asked for,
//! name the host it goes to), goes over TLS unless the credential allows plain HTTP, asks
//! for a body the gate can read, and its answer comes back scrubbed of the credentials'
//! values (see `scrub`).
//!
//! A gate serves one sandbox. Connections belong to the command running when they were
//! accepted: they end at its deadline or when it ends ([`Proxy::end`]), and between commands
//! (a session's background jobs) nothing gets through. At most [`MAX_CONNECTIONS`] are open at
//! once, and a request head must arrive within [`HEAD_WAIT`], so a sandbox cannot pin warden.

mod head;
mod intercept;

use crate::credentials::{Credentials, normal};
use crate::gate::{DialError, Gate, Vetting, connect};
use crate::scrub::{Returning, Unpassable};
use head::{Ask, Request, parse, read_head};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use warden_core::{Denial, Denials, Meter, Reached, Sample};

/// The port the gate listens on, on the loopback of the sandbox's own network namespace.
pub const GATE_PORT: u16 = 3128;

/// Connections one sandbox may have open through its gate at once.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send its request head.
pub const HEAD_WAIT: Duration = Duration::from_secs(10);

/// The variables that point programs inside the sandbox at the gate: curl, wget, pip, git,
/// Python's urllib and requests read them. `no_proxy` is empty, so nothing goes around it.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{GATE_PORT}");
    let mut env: Vec<(String, String)> = [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ]
    .into_iter()
    .map(|name| (name.to_owned(), url.clone()))
    .collect();
    env.extend(["no_proxy", "NO_PROXY"].map(|n| (n.to_owned(), String::new())));
    env
}

/// The command a gate's connections are attributed to.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Where refusals go: the call's (or the session command's) denials.
    pub denials: Denials,
    /// When the command ends; no connection outlives it.
    pub deadline: Instant,
}

/// What went through a gate for one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Connections accepted while the command ran.
    pub connections: u64,
    /// Bytes from the sandbox to its destinations (request heads as forwarded).
    pub bytes_up: u64,
    /// Bytes from the destinations to the sandbox.
    pub bytes_down: u64,
    /// The destinations let through, each once (the first [`Denials::KEPT`]), and every
    /// connection let through to its destination, counted.
    pub reached: Sample<Reached>,
    /// The hosts the gate set a credential for, each once, and every request it set one in.
    pub credentials: Sample<String>,
}

impl Traffic {
    /// Counts this traffic as the call's (or the session command's) usage.
    pub fn count_in(&self, meter: &Meter) {
        meter.record(|u| {
            u.net_bytes_out = Some(u.net_bytes_out.unwrap_or(0) + self.bytes_up);
            u.net_bytes_in = Some(u.net_bytes_in.unwrap_or(0) + self.bytes_down);
            u.net_connections = Some(u.net_connections.unwrap_or(0) + self.connections);
        });
        meter.reach_all(&self.reached);
        meter.use_credentials(&self.credentials);
    }
}

/// One sandbox's gate, serving until dropped; dropping it closes every connection.
pub struct Proxy {
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

struct Shared {
    gate: Gate,
    credentials: Credentials,
    slots: Arc<Semaphore>,
    active: Mutex<Option<Active>>,
}

/// The running command: its scope, its connections and their counts.
struct Active {
    scope: Scope,
    connections: JoinSet<()>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    connections: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    /// The destinations let through and the credentials set, kept as a call's are.
    reached: Meter,
}

impl Proxy {
    /// Serves `listener` (a socket bound in the sandbox's namespace) on the current tokio
    /// runtime, adding `credentials` at their hosts. Nothing is let through until
    /// [`Proxy::begin`].
    pub fn start(
        listener: std::net::TcpListener,
        gate: Gate,
        credentials: Credentials,
    ) -> io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let shared = Arc::new(Shared {
            gate,
            credentials,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            active: Mutex::new(None),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Proxy { shared, accept })
    }

    /// A command starts: connections from now on are its own, until [`Proxy::end`].
    pub fn begin(&self, scope: Scope) {
        let mut active = self.shared.lock();
        *active = Some(Active {
            scope,
            connections: JoinSet::new(),
            counts: Arc::default(),
        });
    }

    /// The command ended: its connections are closed, and what went through is returned.
    pub fn end(&self) -> Traffic {
        let ended = self.shared.lock().take();
        // Dropping the set aborts every connection still open.
        ended.map_or_else(Traffic::default, |a| a.counts.traffic())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        drop(self.shared.lock().take());
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Active>> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Counts {
    fn traffic(&self) -> Traffic {
        Traffic {
            connections: self.connections.load(Ordering::Relaxed),
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            reached: self.reached.reached(),
            credentials: self.reached.credentials_used(),
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: let connections close before the next.
                tracing::warn!("the gate could not accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Ok(permit) = shared.slots.clone().try_acquire_owned() else {
            refuse_now(
                &stream,
                "503 Service Unavailable",
                &format!("warden's gate allows {MAX_CONNECTIONS} connections at once"),
            );
            continue;
        };
        let mut active = shared.lock();
        let Some(active) = active.as_mut() else {
            refuse_now(
                &stream,
                "503 Service Unavailable",
                "no command is running in this sandbox: connections between commands are refused",
            );
            continue;
        };
        // Finished connections leave their results in the set until collected.
        while active.connections.try_join_next().is_some() {}
        active.counts.connections.fetch_add(1, Ordering::Relaxed);
        let connection = Connection {
            gate: shared.gate.clone(),
            credentials: shared.credentials.clone(),
            scope: active.scope.clone(),
            counts: active.counts.clone(),
            _permit: permit,
        };
        active.connections.spawn(connection.serve(stream));
    }
}

/// Answers without waiting: a sandbox that does not read cannot hold the accept loop.
fn refuse_now(stream: &TcpStream, status: &str, why: &str) {
    let _ = stream.try_write(response(status, why).as_bytes());
}

fn response(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}\n",
        body.len() + 1
    )
}

/// One accepted connection and what it is accounted to.
struct Connection {
    gate: Gate,
    credentials: Credentials,
    scope: Scope,
    counts: Arc<Counts>,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn serve(self, mut stream: TcpStream) {
        let deadline = tokio::time::Instant::from_std(self.scope.deadline);
        let _ = tokio::time::timeout_at(deadline, self.serve_until_deadline(&mut stream)).await;
    }

    async fn serve_until_deadline(&self, stream: &mut TcpStream) {
        // Small writes (a head, a TLS record) go out at once rather than wait for an ACK.
        let _ = stream.set_nodelay(true);
        let Some((mut ask, rest)) = self.read_ask(stream).await else {
            return;
        };
        let (host, port, destination) = match &ask {
            Ask::Tunnel { host, port } => (host, *port, format!("connect {host}:{port}")),
            Ask::Forward { host, port, .. } => (host, *port, format!("http://{host}:{port}")),
        };
        let credentialed = self.credentials.covers(host);
        if let (Ask::Forward { request, .. }, true) = (&ask, credentialed) {
            if let Some(reason) = self.credentials.plain_http_refusal(host) {
                return self
                    .deny(stream, "403 Forbidden", destination, reason)
                    .await;
            }
            if let Err(wrong) = names_target(&request.headers, host, port) {
                return self
                    .deny(stream, MISDIRECTED, destination, wrong.to_string())
                    .await;
            }
        }
        let Some(mut upstream) = self.dial(stream, host, port, &destination).await else {
            return;
        };
        let opened = match ask {
            Ask::Tunnel { ref host, port } if credentialed => {
                let host = host.clone();
                return self.intercept(stream, upstream, &host, port, rest).await;
            }
            Ask::Tunnel { .. } => {
                let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
                stream.write_all(ok).await
            }
            Ask::Forward {
                ref host,
                ref authority,
                ref mut request,
                ..
            } => {
                if credentialed {
                    self.credential(host, request);
                }
                let head = request.head(authority);
                self.counts
                    .up
                    .fetch_add(head.len() as u64, Ordering::Relaxed);
                upstream.write_all(&head).await
            }
        };
        // Bytes the sandbox sent after its head: a body's start, or a tunnel's first bytes.
        if opened.is_err() || upstream.write_all(&rest).await.is_err() {
            return;
        }
        self.counts
            .up
            .fetch_add(rest.len() as u64, Ordering::Relaxed);
        let (from_sandbox, to_sandbox) = stream.split();
        let (from_upstream, to_upstream) = upstream.split();
        let back = credentialed.then(|| Returning::new(self.credentials.secrets()));
        let refused = relay(
            Way {
                from: from_sandbox,
                to: to_upstream,
            },
            Way {
                from: from_upstream,
                to: to_sandbox,
            },
            &self.counts,
            back,
        )
        .await;
        if let Some(reason) = refused {
            self.record(destination, reason.to_string());
        }
    }

    /// The connection's request head, parsed, and the bytes the sandbox sent after it. `None`:
    /// the sandbox sent none, or was told why its head does not pass.
    async fn read_ask(&self, stream: &mut TcpStream) -> Option<(Ask, Vec<u8>)> {
        let head_by = (Instant::now() + HEAD_WAIT).min(self.scope.deadline);
        match read_head(stream, head_by).await {
            Ok(Some((buf, len))) => match parse(&buf[..len]) {
                Ok(ask) => Some((ask, buf[len..].to_vec())),
                Err(bad) => {
                    reply(stream, bad.status(), &bad.to_string()).await;
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                reply(stream, e.status(), &e.to_string()).await;
                None
            }
        }
    }

    /// A connection to `host:port`, once the gate lets `destination` through, counted as
    /// reached. `None`: the sandbox was told why not (a refusal is also the command's denial).
    async fn dial(
        &self,
        stream: &mut TcpStream,
        host: &str,
        port: u16,
        destination: &str,
    ) -> Option<TcpStream> {
        let addrs = match self.gate.vet(host, port, self.scope.deadline).await {
            Ok(addrs) => addrs,
            Err(Vetting::Denied(reason)) => {
                self.deny(stream, "403 Forbidden", destination.to_owned(), reason)
                    .await;
                return None;
            }
            Err(Vetting::Unresolved(why)) => {
                reply(stream, "502 Bad Gateway", &why).await;
                return None;
            }
        };
        let wait = self
            .scope
            .deadline
            .saturating_duration_since(Instant::now());
        match connect(&addrs, port, wait).await {
            Ok(upstream) => {
                let _ = upstream.set_nodelay(true);
                self.counts.reached.reach(Reached {
                    destination: destination.to_owned(),
                    address: upstream.peer_addr().ok(),
                });
                Some(upstream)
            }
            Err(DialError::TimedOut) => {
                let why = format!("connecting to {host}:{port} timed out");
                reply(stream, "504 Gateway Timeout", &why).await;
                None
            }
            Err(DialError::Io(e)) => {
                let why = format!("connecting to {host}:{port}: {e}");
                reply(stream, "502 Bad Gateway", &why).await;
                None
            }
        }
    }

    /// Sets `host`'s credentials in `request`, and asks for a body the gate can scan.
    fn credential(&self, host: &str, request: &mut Request) {
        self.credentials.apply(host, &mut request.headers);
        self.counts.reached.use_credential(host);
        request
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("accept-encoding"));
        request
            .headers
            .push(("Accept-Encoding".to_owned(), b"identity".to_vec()));
    }
}

impl Connection {
    /// A refusal: the command's denial, and an answer with `status` and warden's reason.
    async fn deny(
        &self,
        stream: &mut (impl AsyncWrite + Unpin),
        status: &str,
        destination: String,
        reason: String,
    ) {
        let why = format!("warden denied {destination}: {reason}");
        self.record(destination, reason);
        reply(stream, status, &why).await;
    }

    /// A refusal the sandbox was already told of: the command's denial alone.
    fn record(&self, destination: String, reason: String) {
        self.scope.denials.push(Denial {
            destination,
            reason,
        });
    }
}

/// The status of a credentialed request that names a host other than its own.
const MISDIRECTED: &str = "421 Misdirected Request";

const FOR_ITS_HOST: &str = "a credential goes only to a request meant for its host";

/// A credentialed request whose `Host` header names another server than the one it goes to.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request's Host header is {named}, but it goes to {host}:{port}; {for_its_host}",
    for_its_host = FOR_ITS_HOST
)]
struct Misdirected {
    /// The header's value, escaped for printing.
    named: String,
    host: String,
    port: u16,
}

/// Whether every `Host` header of a credentialed request names `host` (and `port`, if it
/// names a port), so the credential goes to no server the request is meant for but its own.
fn names_target(headers: &[(String, Vec<u8>)], host: &str, port: u16) -> Result<(), Misdirected> {
    for (_, value) in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
    {
        let text = String::from_utf8_lossy(value);
        let named = text
            .trim()
            .parse::<http::uri::Authority>()
            .ok()
            .filter(|a| !a.as_str().contains('@'));
        let same = named.is_some_and(|a| {
            normal(a.host()) == normal(host) && a.port_u16().is_none_or(|p| p == port)
        });
        if !same {
            return Err(Misdirected {
                named: text.escape_default().to_string(),
                host: host.to_owned(),
                port,
            });
        }
    }
    Ok(())
}

async fn reply(stream: &mut (impl AsyncWrite + Unpin), status: &str, why: &str) {
    let _ = stream.write_all(response(status, why).as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// One direction of a relayed connection: what is read from `from` is written to `to`.
pub(crate) struct Way<R, W> {
    pub(crate) from: R,
    pub(crate) to: W,
}

/// Copies both ways until both directions have ended, or either fails: then both end (the
/// caller drops the streams), so a reset on one side never leaves the other waiting. With
/// `back`, what comes down is a credential host's answer, passed through it; the reason it
/// was refused, if it was, is returned.
async fn relay(
    up: Way<impl AsyncRead + Unpin, impl AsyncWrite + Unpin>,
    down: Way<impl AsyncRead + Unpin, impl AsyncWrite + Unpin>,
    counts: &Counts,
    back: Option<Returning>,
) -> Option<Unpassable> {
    let up = pump(up.from, up.to, &counts.up, None);
    let down = pump(down.from, down.to, &counts.down, back);
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            r = &mut up, if !up_done => match r {
                Ok(()) => up_done = true,
                Err(_) => return None,
            },
            r = &mut down, if !down_done => match r {
                Ok(()) => down_done = true,
                Err(Ended::Refused(why)) => return Some(why),
                Err(Ended::Io) => return None,
            },
        }
    }
    None
}

/// Why a pump stopped before its reader ended.
enum Ended {
    /// Either side failed: the connection ends, as any network failure ends it.
    Io,
    /// A credential host's answer the gate would not pass on; the sandbox got a 502 instead.
    Refused(Unpassable),
}

impl From<io::Error> for Ended {
    fn from(_: io::Error) -> Self {
        Ended::Io
    }
}

/// Copies until the reader ends, then ends the writer's direction too; through `back`, if
/// given, which may refuse what it reads.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    count: &AtomicU64,
    mut back: Option<Returning>,
) -> Result<(), Ended> {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let read = from.read(&mut buf).await;
        let n = match (&read, back.as_mut()) {
            (Ok(n), _) if *n > 0 => *n,
            // The stream ended, cleanly or not: what was held back cannot become a secret now.
            (_, Some(back)) => {
                to.write_all(&back.finish()).await?;
                read?;
                return Ok(to.shutdown().await?);
            }
            (_, None) => {
                read?;
                return Ok(to.shutdown().await?);
            }
        };
        match back.as_mut().map(|b| b.pass(&buf[..n])) {
            None => to.write_all(&buf[..n]).await?,
            Some(Ok(answer)) => to.write_all(&answer).await?,
            Some(Err(why)) => {
                let text = format!("warden refused what the credential's host answered: {why}");
                let _ = to
                    .write_all(response("502 Bad Gateway", &text).as_bytes())
                    .await;
                let _ = to.shutdown().await;
                return Err(Ended::Refused(why));
            }
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_points_every_client_at_the_gate() {
        let env = proxy_env();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("https_proxy"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("HTTP_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("no_proxy"), Some(""));
    }
}
