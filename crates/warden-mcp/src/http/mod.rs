//! MCP over streamable HTTP, behind a bearer token, a `Host` check and an `Origin` allowlist.
//!
//! Every request, whatever its method, is checked in this order: unless remote clients are
//! allowed, `Host` must name loopback (else 403: a page on a rebound DNS name cannot reach
//! the server), then a present `Origin` must be allowed (else 403, so a web page cannot drive
//! the server), then `Authorization: Bearer <token>` must match (else 401, compared in
//! constant time), then the path must be `/mcp` (else 404). A refused request's connection
//! is closed after its answer.
//!
//! Connections are bounded by [`ConnectionLimits`]: one that does not send a request's head in
//! time is closed, and connections that have not yet made an authenticated request are
//! capped, one that has sent nothing for a while closed to make room (see
//! [`crate::connections`]), so idle or slow connections cannot use up the server's file
//! descriptors and keep clients that hold the token out.
//!
//! A session lives in the server that initialized it. A request naming a session this server
//! does not hold (it ended, or a load balancer sent it to another replica) is answered 404,
//! which tells the client to start a new session. A `DELETE` ends the session it names: its
//! sandboxes are gone when the answer, 200, is sent. A `HEAD` naming a session asks whether
//! the server holds it (200, else 404), without counting as its use. A session none of whose requests has
//! been answered for longer than its idle limit ([`HttpOptions::session_idle`], or its own
//! `_meta["warden/idle"]` at `initialize`) is ended as a `DELETE` ends it; a request still
//! being answered keeps it.

mod guard;
mod idle;
pub(crate) mod loopback;

use crate::calls::Calls;
use crate::connections::{ConnectionLimits, Ticket, Unauthenticated};
use crate::handler::Handler;
use crate::inflight::{Claim, InFlight};
use crate::jsonrpc::{self, error_reply};
use crate::session::{Busy, SESSION_ID_HEADER};
use crate::state::Server;
use crate::{Error, watch};
use bytes::Bytes;
use futures::FutureExt as _;
use guard::Guard;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// The shortest token accepted.
pub(crate) const MIN_TOKEN_LEN: usize = 16;
/// Where the MCP endpoint lives.
const PATH: &str = "/mcp";

/// How to listen.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Every request must carry `Authorization: Bearer <token>`.
    pub token: String,
    /// Origins allowed besides the server's own loopback ones (`http://host:port`).
    pub allow_origins: Vec<String>,
    /// Listen on an address that is not loopback; `Host` is then not checked.
    pub allow_remote: bool,
    pub limits: ConnectionLimits,
    /// How long a session may sit idle (no request being answered) before it ends with its
    /// sandboxes, unless its client set its own limit; `None`: until its client ends it.
    pub session_idle: Option<Duration>,
    /// Stop the server once it has held no session and answered no request for this long;
    /// `None`: until it is told to stop.
    pub stop_idle: Option<Duration>,
}

/// A bound listener, ready to serve.
pub struct HttpServer {
    listener: TcpListener,
    options: HttpOptions,
    local: SocketAddr,
}

/// 32 random bytes, hex-encoded.
pub fn generate_token() -> Result<String, Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

impl HttpServer {
    /// Binds the address (port 0 picks a free one); refuses a non-loopback address unless
    /// remote clients are allowed, and a token that is too short.
    pub async fn bind(options: HttpOptions) -> Result<HttpServer, Error> {
        if !options.addr.ip().is_loopback() && !options.allow_remote {
            return Err(Error::NotLoopback(options.addr));
        }
        if options.token.chars().count() < MIN_TOKEN_LEN {
            return Err(Error::WeakToken);
        }
        let listener = TcpListener::bind(options.addr)
            .await
            .map_err(|e| Error::Bind(options.addr, e))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Bind(options.addr, e))?;
        Ok(HttpServer {
            listener,
            options,
            local,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The endpoint's URL.
    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.local)
    }

    /// Serves until the server is told to stop ([`Server::stop`]); then takes no more
    /// connections, drains the calls in flight, lets their answers go out (for up to a
    /// second) and closes every connection and session before it returns.
    pub async fn run(self, server: Server) -> Result<(), Error> {
        server.shared.warm();
        // Replicas share the token, so a retry's requestState opens on whichever answers it.
        server.shared.stateless.use_token(&self.options.token);
        let _watcher = watch::spawn(server.shared.clone()).map(AbortOnDrop);
        let (endpoint, open) = Endpoint::new(&server, &self.options, self.local);
        let endpoint = Arc::new(endpoint);
        let _sweeper = AbortOnDrop(tokio::spawn(idle::end_idle_sessions(
            endpoint.clone(),
            self.options.session_idle,
            self.options.stop_idle,
        )));
        let waiting = Arc::new(Unauthenticated::new(&self.options.limits));
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(self.options.limits.header_timeout);
        let calls = &server.shared.calls;
        while let Some((stream, peer)) = self.accept(calls, &waiting).await {
            let ticket = tokio::select! {
                // Room first: a stopping server still takes a connection there is room for.
                biased;
                ticket = waiting.admit(peer) => Arc::new(ticket),
                () = calls.stopping() => break,
            };
            let connection = serve_connection(&http1, stream, ticket, &endpoint, &open.closing);
            open.connections.spawn(connection);
        }
        drop(self.listener);
        waiting.report_closed();
        calls.drain().await;
        open.close().await;
        server.shared.close_sessions().await;
        Ok(())
    }

    /// The next connection, `None` once the server stops. Once stopping, the connections the
    /// kernel already holds are still taken, and their requests answered (a call refused):
    /// closing the listener on them would reset them unanswered. Then no more.
    async fn accept(
        &self,
        calls: &Calls,
        waiting: &Unauthenticated,
    ) -> Option<(TcpStream, SocketAddr)> {
        loop {
            let accepted = if calls.is_stopping() {
                self.listener.accept().now_or_never()?
            } else {
                tokio::select! {
                    accepted = self.listener.accept() => accepted,
                    () = calls.stopping() => continue,
                }
            };
            match accepted {
                Ok((stream, peer)) => {
                    // An answer leaves in several writes (its head, then its events): with
                    // Nagle's algorithm, a kept-alive connection's later writes wait for the
                    // client's delayed ACK of the first, ~40 ms a call.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
                    }
                    return Some((stream, peer));
                }
                Err(e) => {
                    // Out of file descriptors and the like: free one if a connection without
                    // the token has sat silent on it, and wait, do not spin.
                    tracing::debug!("cannot accept a connection: {e}");
                    waiting.make_room().await;
                }
            }
        }
    }
}

/// What every request shares: rmcp's service behind the guard, the sessions a `DELETE` ends,
/// and the answers being sent.
struct Endpoint {
    service: StreamableHttpService<Handler, LocalSessionManager>,
    guard: Guard,
    ending: Ending,
    in_flight: InFlight,
    /// The longest body read: rmcp's own limit.
    max_body: usize,
    /// The answers to POSTs being sent.
    answers: TaskTracker,
    /// When the last request with the token came (`HEAD` included: a client about to open a
    /// session asks first); kept only by a server that stops once idle.
    last_request: Option<std::sync::Mutex<std::time::Instant>>,
}

/// What a stop waits for and then closes.
struct Open {
    /// The answers to POSTs being sent (the endpoint's).
    answers: TaskTracker,
    connections: TaskTracker,
    /// Cancelled once the calls are drained: each connection closes after its answer.
    closing: CancellationToken,
    /// Cancelling it ends rmcp's event streams and sessions.
    streams: CancellationToken,
}

impl Endpoint {
    /// The endpoint of `server`, and what a stop of it closes.
    fn new(server: &Server, options: &HttpOptions, local: SocketAddr) -> (Self, Open) {
        // The guard checks `Host` for every method (rmcp's own check would miss the
        // `DELETE`s answered here), so there is one rule, the guard's.
        let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
        let max_body = config.max_request_body_bytes;
        let streams = config.cancellation_token.clone();
        let shared = server.shared.clone();
        let mut sessions = LocalSessionManager::default();
        // Idle sessions are ended here (`end_idle_sessions`), as a DELETE ends them, after
        // each one's own limit: rmcp's one limit for all would end them behind warden's back.
        sessions.session_config.keep_alive = None;
        let sessions = Arc::new(sessions);
        let service = StreamableHttpService::new(
            move || Ok(Handler::new(shared.clone())),
            sessions.clone(),
            config,
        );
        let answers = TaskTracker::new();
        let endpoint = Endpoint {
            service,
            guard: Guard::new(options, local),
            ending: Ending {
                sessions,
                shared: server.shared.clone(),
            },
            in_flight: InFlight::default(),
            max_body,
            answers: answers.clone(),
            last_request: options
                .stop_idle
                .map(|_| std::sync::Mutex::new(std::time::Instant::now())),
        };
        let open = Open {
            answers,
            connections: TaskTracker::new(),
            closing: CancellationToken::new(),
            streams,
        };
        (endpoint, open)
    }

    /// The answer to one request: the guard's refusal, the end of the session a `DELETE`
    /// names, the JSON-RPC error for a body that is no message, or rmcp's. A POST's answer
    /// holds its token of the answers being sent, and its request's id in its session, until
    /// it has been sent.
    async fn answer(&self, request: Request<Incoming>, ticket: &Ticket) -> Response<Body> {
        let sending = (request.method() == Method::POST).then(|| self.answers.token());
        let mut claim = None;
        let mut busy = None;
        let allowed = self.guard.check(&request);
        if let (Ok(()), Some(last)) = (&allowed, &self.last_request) {
            *last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = std::time::Instant::now();
        }
        let response = match allowed {
            Err(refusal) => refusal.response(),
            Ok(()) if request.method() == Method::HEAD => {
                ticket.authenticated();
                self.ending.held(named_session(&request)).await
            }
            Ok(()) => {
                ticket.authenticated();
                busy = named_session(&request)
                    .and_then(|id| self.ending.shared.session(id))
                    .map(|session| session.busy());
                match session_to_end(&request) {
                    Some(id) => self.ending.end(&id).await,
                    None if is_json_post(&request) => {
                        match checked(request, self.max_body, &self.in_flight).await {
                            Ok((request, claimed)) => {
                                claim = claimed;
                                self.service.handle(request).await
                            }
                            Err(answer) => answer,
                        }
                    }
                    None => self.service.handle(request).await,
                }
            }
        };
        match sending {
            Some(token) => response.map(|body| {
                Sending {
                    body,
                    _token: token,
                    _claim: claim,
                    _busy: busy,
                }
                .boxed()
            }),
            None => response,
        }
    }
}

/// Serves one connection until it ends, is closed to make room for another (it had not
/// authenticated), or `closing` asks it to close after its answer.
fn serve_connection(
    http1: &http1::Builder,
    stream: TcpStream,
    ticket: Arc<Ticket>,
    endpoint: &Arc<Endpoint>,
    closing: &CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let (closed, closing) = (ticket.closed.clone(), closing.clone());
    let stream = ticket.watched(stream);
    let endpoint = endpoint.clone();
    let handle = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (endpoint, ticket) = (endpoint.clone(), ticket.clone());
        async move { Ok::<_, Infallible>(endpoint.answer(request, &ticket).await) }
    });
    let connection = http1.serve_connection(TokioIo::new(stream), handle);
    async move {
        tokio::pin!(connection);
        let ended = tokio::select! {
            ended = connection.as_mut() => ended,
            () = closed.cancelled() => {
                tracing::debug!(
                    "closed a connection that had not authenticated, to make room for another"
                );
                return;
            }
            () = closing.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(e) = ended {
            tracing::debug!("an HTTP connection ended with an error: {e}");
        }
    }
}

impl Open {
    /// Once every call has answered (each answer on its way to its client): lets the answers
    /// go out, then closes the connections and rmcp's streams, waiting up to [`LINGER`] for
    /// each.
    async fn close(self) {
        self.answers.close();
        if tokio::time::timeout(LINGER, self.answers.wait())
            .await
            .is_err()
        {
            tracing::warn!("answers still unsent {LINGER:?} after the calls drained: closing");
        }
        self.closing.cancel();
        self.streams.cancel();
        self.connections.close();
        if tokio::time::timeout(LINGER, self.connections.wait())
            .await
            .is_err()
        {
            tracing::debug!("connections still open {LINGER:?} after the stop: closing");
        }
    }
}

/// How long, once a stopping server's calls have drained, their answers may take to be sent
/// and the connections to close.
const LINGER: Duration = Duration::from_secs(1);

/// A POST's answer, holding its token of the answers being sent, its request's id in its
/// session, and its session busy, until hyper has sent it whole (or dropped it, its
/// connection gone).
struct Sending {
    body: Body,
    _token: TaskTrackerToken,
    _claim: Option<Claim>,
    _busy: Option<Busy>,
}

impl hyper::body::Body for Sending {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// The session a `DELETE` names, if the request is one. rmcp would answer 202 and leave the
/// session's sandboxes to end in their own time; a client expects 200 once it is over.
fn session_to_end<B>(request: &Request<B>) -> Option<String> {
    if request.method() != Method::DELETE {
        return None;
    }
    named_session(request).map(str::to_owned)
}

/// The session a request names in its `Mcp-Session-Id`.
fn named_session<B>(request: &Request<B>) -> Option<&str> {
    request.headers().get(SESSION_ID_HEADER)?.to_str().ok()
}

/// Ends sessions on a client's `DELETE`.
struct Ending {
    sessions: Arc<LocalSessionManager>,
    shared: Arc<crate::state::Shared>,
}

impl Ending {
    /// Ends session `id`: rmcp's side first (no request reaches it any more), then its
    /// sandboxes, awaited. 404 when this server holds no such session.
    async fn end(&self, id: &str) -> Response<Body> {
        if self.close(id).await {
            text(StatusCode::OK, "the session has ended")
        } else {
            text(StatusCode::NOT_FOUND, UNKNOWN_SESSION)
        }
    }

    /// Whether this server holds session `id`: 200, else 404 (400 when none is named).
    async fn held(&self, id: Option<&str>) -> Response<Body> {
        let Some(id) = id else {
            return text(
                StatusCode::BAD_REQUEST,
                "name the session in Mcp-Session-Id",
            );
        };
        let key = id.to_owned().into();
        if self.sessions.has_session(&key).await.unwrap_or(false) {
            text(StatusCode::OK, "the session is open")
        } else {
            text(StatusCode::NOT_FOUND, UNKNOWN_SESSION)
        }
    }

    /// Ends session `id` as [`Ending::end`] does; false when this server holds no such
    /// session.
    async fn close(&self, id: &str) -> bool {
        let key = id.to_owned().into();
        if !self.sessions.has_session(&key).await.unwrap_or(false) {
            return false;
        }
        if let Err(e) = self.sessions.close_session(&key).await {
            tracing::warn!("ending MCP session {id}: {e}");
        }
        if let Some(session) = self.shared.take_session(id) {
            session.close().await;
        }
        true
    }
}

/// Whether a request is a POST of JSON, whose body is a message. rmcp answers any other
/// POST itself (415 for another media type).
fn is_json_post<B>(request: &Request<B>) -> bool {
    request.method() == Method::POST
        && request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// A POST's body, read whole (up to `limit`, rmcp's own) and checked as a stdio line is
/// ([`crate::jsonrpc`]): the request again, for rmcp, with its id claimed in its session
/// ([`InFlight`]), or the JSON-RPC error to answer instead: with HTTP 200 when it answers a
/// request by its id, else 400 (413 when too long).
async fn checked(
    request: Request<Incoming>,
    limit: usize,
    in_flight: &InFlight,
) -> Result<(Request<Full<Bytes>>, Option<Claim>), Response<Body>> {
    let (parts, body) = request.into_parts();
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let (status, message) = if e.is::<LengthLimitError>() {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("Invalid Request: a message is longer than {limit} bytes"),
                )
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    format!("Invalid Request: the body could not be read: {e}"),
                )
            };
            let reply = error_reply(ErrorCode::INVALID_REQUEST, &message, Value::Null);
            return Err(json_response(status, &reply));
        }
    };
    match jsonrpc::read(&bytes) {
        Ok(ClientJsonRpcMessage::Request(request)) => {
            let session = parts
                .headers
                .get(SESSION_ID_HEADER)
                .and_then(|v| v.to_str().ok());
            let claim = match session {
                Some(session) => match in_flight.claim(session, &request.id) {
                    Some(claim) => Some(claim),
                    None => {
                        let message = format!(
                            "Invalid Request: a request with id {} is still waiting for its \
                             answer in this session; give each request of a session its own id",
                            serde_json::to_string(&request.id).unwrap_or_default()
                        );
                        let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
                        let reply = error_reply(ErrorCode::INVALID_REQUEST, &message, id);
                        return Err(json_response(StatusCode::OK, &reply));
                    }
                },
                // `initialize`, which opens the session.
                None => None,
            };
            Ok((Request::from_parts(parts, Full::new(bytes)), claim))
        }
        Ok(_) => Ok((Request::from_parts(parts, Full::new(bytes)), None)),
        Err(Some(reply)) => {
            let status = if reply["id"].is_null() {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            Err(json_response(status, &reply))
        }
        Err(None) => {
            let message = "Invalid Request: a malformed notification or response";
            let reply = error_reply(ErrorCode::INVALID_REQUEST, message, Value::Null);
            Err(json_response(StatusCode::BAD_REQUEST, &reply))
        }
    }
}

/// A JSON response.
fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let body = Full::new(Bytes::from(value.to_string())).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Why a request naming an unknown session gets 404.
const UNKNOWN_SESSION: &str = "this server holds no such session (it ended, or another server \
    holds it): initialize a new session";

/// A plain-text response.
fn text(status: StatusCode, message: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(message.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options for a loopback server, or one that allows remote clients.
    pub(super) fn options(allow_remote: bool) -> HttpOptions {
        HttpOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            token: "t".repeat(32),
            allow_origins: vec!["https://App.example.com/".into()],
            allow_remote,
            limits: ConnectionLimits::default(),
            session_idle: None,
            stop_idle: None,
        }
    }

    #[tokio::test]
    async fn refuses_remote_addresses_and_short_tokens() {
        let remote = HttpOptions {
            addr: "0.0.0.0:0".parse().unwrap(),
            ..options(false)
        };
        assert!(matches!(
            HttpServer::bind(remote).await,
            Err(Error::NotLoopback(_))
        ));
        let short = HttpOptions {
            token: "abc".into(),
            ..options(false)
        };
        assert!(matches!(
            HttpServer::bind(short).await,
            Err(Error::WeakToken)
        ));
    }
}
