//! MCP over streamable HTTP, behind a bearer token and an `Origin` allowlist.
//!
//! Each request is checked in this order: a present `Origin` must be allowed (else 403, so a
//! web page cannot drive the server), then `Authorization: Bearer <token>` must match (else
//! 401, compared in constant time), then the path must be `/mcp` (else 404). rmcp's
//! transport then checks `Host` against loopback names (DNS rebinding) unless remote clients
//! are allowed.
//!
//! A session lives in the server that initialized it. A request naming a session this server
//! does not hold (it ended, or a load balancer sent it to another replica) is answered 404,
//! which tells the client to start a new session. A `DELETE` ends the session it names: its
//! sandboxes are gone when the answer, 200, is sent.

use crate::handler::Handler;
use crate::state::Server;
use crate::{Error, watch};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

/// The shortest token accepted.
pub(crate) const MIN_TOKEN_LEN: usize = 16;
/// Where the MCP endpoint lives.
const PATH: &str = "/mcp";
/// The header naming a client's session.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";

/// How to listen.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Every request must carry `Authorization: Bearer <token>`.
    pub token: String,
    /// Origins allowed besides the server's own loopback ones (`http://host:port`).
    pub allow_origins: Vec<String>,
    /// Listen on an address that is not loopback.
    pub allow_remote: bool,
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

    /// Serves until the process ends.
    pub async fn run(self, server: Server) -> Result<(), Error> {
        let _watcher = watch::spawn(server.shared.clone()).map(AbortOnDrop);
        let mut config = StreamableHttpServerConfig::default();
        if self.options.allow_remote {
            config = config.disable_allowed_hosts();
        }
        let shared = server.shared.clone();
        let sessions = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(
            move || Ok(Handler::new(shared.clone())),
            sessions.clone(),
            config,
        );
        let guard = Arc::new(Guard::new(&self.options, self.local));
        let ending = Arc::new(Ending {
            sessions,
            shared: server.shared.clone(),
        });
        loop {
            let (stream, _) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (service, guard, ending) = (service.clone(), guard.clone(), ending.clone());
            tokio::spawn(async move {
                let handle = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let (service, guard, ending) = (service.clone(), guard.clone(), ending.clone());
                    async move {
                        let response = match guard.check(&request) {
                            Err(refusal) => refusal.response(),
                            Ok(()) => match session_to_end(&request) {
                                Some(id) => ending.end(&id).await,
                                None => service.handle(request).await,
                            },
                        };
                        Ok::<_, Infallible>(response)
                    }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handle);
                if let Err(e) = connection.await {
                    tracing::debug!("an HTTP connection ended with an error: {e}");
                }
            });
        }
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
    let id = request.headers().get(SESSION_ID_HEADER)?.to_str().ok()?;
    Some(id.to_owned())
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
        let key = id.to_owned().into();
        if !self.sessions.has_session(&key).await.unwrap_or(false) {
            return text(StatusCode::NOT_FOUND, UNKNOWN_SESSION);
        }
        if let Err(e) = self.sessions.close_session(&key).await {
            tracing::warn!("ending MCP session {id}: {e}");
        }
        if let Some(session) = self.shared.take_session(id) {
            session.close().await;
        }
        text(StatusCode::OK, "the session has ended")
    }
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

/// The checks in front of the MCP endpoint.
struct Guard {
    token: String,
    origins: Vec<String>,
}

impl Guard {
    fn new(options: &HttpOptions, local: SocketAddr) -> Self {
        let port = local.port();
        let mut origins = vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ];
        origins.extend(options.allow_origins.iter().map(|o| normalise_origin(o)));
        Self {
            token: options.token.clone(),
            origins,
        }
    }

    fn check<B>(&self, request: &Request<B>) -> Result<(), Refusal> {
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let allowed = origin
                .to_str()
                .is_ok_and(|o| self.origins.contains(&normalise_origin(o)));
            if !allowed {
                return Err(Refusal(
                    StatusCode::FORBIDDEN,
                    "this Origin may not use the server; start it with --allow-origin to allow it",
                ));
            }
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        let authorized =
            presented.is_some_and(|t| bool::from(t.as_bytes().ct_eq(self.token.as_bytes())));
        if !authorized {
            return Err(Refusal(
                StatusCode::UNAUTHORIZED,
                "send Authorization: Bearer <token>, with the token warden printed or was given",
            ));
        }
        if request.uri().path() != PATH {
            return Err(Refusal(StatusCode::NOT_FOUND, "the MCP endpoint is /mcp"));
        }
        Ok(())
    }
}

/// A request the guard turns away, and why.
struct Refusal(StatusCode, &'static str);

impl Refusal {
    fn response(self) -> Response<Body> {
        let Refusal(status, message) = self;
        let mut response = text(status, message);
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The token of a `Bearer` credential (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn normalise_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        let options = HttpOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            token: "t".repeat(32),
            allow_origins: vec!["https://App.example.com/".into()],
            allow_remote: false,
        };
        Guard::new(&options, "127.0.0.1:8123".parse().unwrap())
    }

    fn request(headers: &[(&str, &str)], path: &str) -> Request<()> {
        let mut r = Request::builder().uri(path);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).unwrap()
    }

    fn status(r: Result<(), Refusal>) -> u16 {
        r.map_or_else(|e| e.response().status().as_u16(), |()| 200)
    }

    #[test]
    fn token_origin_and_path() {
        let g = guard();
        let token = format!("Bearer {}", "t".repeat(32));
        assert_eq!(status(g.check(&request(&[], "/mcp"))), 401);
        let wrong = format!("Bearer {}", "u".repeat(32));
        assert_eq!(
            status(g.check(&request(&[("authorization", &wrong)], "/mcp"))),
            401
        );
        let ok = [("authorization", token.as_str())];
        assert_eq!(status(g.check(&request(&ok, "/mcp"))), 200);
        assert_eq!(status(g.check(&request(&ok, "/other"))), 404);
        let lower = format!("bearer {}", "t".repeat(32));
        assert_eq!(
            status(g.check(&request(&[("authorization", &lower)], "/mcp"))),
            200
        );
        for (origin, want) in [
            ("http://localhost:8123", 200),
            ("http://127.0.0.1:8123", 200),
            ("https://app.example.com", 200),
            ("http://localhost:9999", 403),
            ("https://evil.example", 403),
            ("null", 403),
        ] {
            let headers = [("authorization", token.as_str()), ("origin", origin)];
            assert_eq!(
                status(g.check(&request(&headers, "/mcp"))),
                want,
                "{origin}"
            );
        }
    }

    #[tokio::test]
    async fn refuses_remote_addresses_and_short_tokens() {
        let remote = HttpOptions {
            addr: "0.0.0.0:0".parse().unwrap(),
            token: "t".repeat(32),
            allow_origins: vec![],
            allow_remote: false,
        };
        assert!(matches!(
            HttpServer::bind(remote).await,
            Err(Error::NotLoopback(_))
        ));
        let short = HttpOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            token: "abc".into(),
            allow_origins: vec![],
            allow_remote: false,
        };
        assert!(matches!(
            HttpServer::bind(short).await,
            Err(Error::WeakToken)
        ));
    }
}
