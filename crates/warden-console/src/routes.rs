//! The console's requests: the checks every request passes, the token's exchange for the
//! cookie, the page and its data.

use crate::COOKIE;
use crate::reviews::{DecideError, Decided, Reviews};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use warden_mcp::Loopback;

/// Where the console's data comes from (the binary reads the toolbox and the call log).
pub trait Source: Send + Sync {
    /// Every tool with its grants, limits and flags: the audit's JSON.
    fn tools(&self) -> Value;
    /// The call log's records after position `after` (0: from its start; else a position this
    /// answered before), and the position after them.
    fn calls(&self, after: u64) -> (Vec<Value>, u64);
    /// Whether the call log's chain and seals verify.
    fn ledger(&self) -> Value;
}

/// Everything a request is answered from.
pub(crate) struct Site {
    pub loopback: Loopback,
    pub token: String,
    pub cookie: String,
    pub source: Arc<dyn Source>,
    /// The calls waiting for a person, when this console decides them.
    pub reviews: Option<Arc<Reviews>>,
}

/// How often a request for new calls looks at the call log, and how long it waits for one.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(25);
const HOLD_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest decision a page sends.
const MAX_DECISION: usize = 64 * 1024;

/// Every answer's headers: nothing but the console's own files, never in a frame, no
/// referrer, nothing kept.
const HEADERS: [(header::HeaderName, &str); 6] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::CACHE_CONTROL, "no-store"),
    (
        header::HeaderName::from_static("cross-origin-resource-policy"),
        "same-origin",
    ),
];

const PAGE: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");

impl Site {
    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if let Err((status, why)) = self
            .loopback
            .check_host(&request)
            .and_then(|()| self.loopback.check_origin(&request, false))
        {
            return text(status, why);
        }
        let deciding = request.uri().path() == "/api/decide";
        let method = request.method();
        if deciding != (method == Method::POST) && (deciding || method != Method::HEAD) {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "the console takes GET, and a POST of a decision to /api/decide",
            );
        }
        if let Some(token) = query(&request, "token") {
            return self.exchange(&token);
        }
        if !self.has_cookie(&request) {
            return text(
                StatusCode::UNAUTHORIZED,
                "open the URL `warden console` printed (it carries the console's token)",
            );
        }
        if deciding {
            return self.decide(request).await;
        }
        match request.uri().path() {
            "/" => file("text/html; charset=utf-8", PAGE),
            "/api/pending" => match &self.reviews {
                Some(reviews) => file("application/json", &reviews.pending().to_string()),
                None => file("application/json", "null"),
            },
            "/console.js" => file("text/javascript; charset=utf-8", SCRIPT),
            "/console.css" => file("text/css; charset=utf-8", STYLE),
            "/api/tools" => self.data(|s| s.tools()).await,
            "/api/ledger" => self.data(|s| s.ledger()).await,
            "/api/calls" => {
                let after = query(&request, "after")
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                self.calls_after(after).await
            }
            _ => text(StatusCode::NOT_FOUND, "no such page"),
        }
    }

    /// A decision on a call waiting: from the console's own page alone (its `Origin`, which a
    /// browser always sends with a `POST`), as JSON, bound to the digest the page showed.
    async fn decide(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if let Err((status, why)) = self.loopback.check_origin(&request, true) {
            return text(status, why);
        }
        let Some(reviews) = &self.reviews else {
            return text(
                StatusCode::NOT_FOUND,
                "this console decides no calls: start it with `warden serve --console`",
            );
        };
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
        if !json {
            return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "a decision is JSON");
        }
        let body = match Limited::new(request.into_body(), MAX_DECISION)
            .collect()
            .await
        {
            Ok(body) => body.to_bytes(),
            Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "a decision is small"),
        };
        let Ok(sent) = serde_json::from_slice::<Value>(&body) else {
            return text(StatusCode::BAD_REQUEST, "a decision is a JSON object");
        };
        let (Some(id), Some(digest)) = (sent["id"].as_u64(), sent["digest"].as_str()) else {
            return text(
                StatusCode::BAD_REQUEST,
                "a decision names the call's id and digest",
            );
        };
        let decided = match decided(&sent) {
            Ok(decided) => decided,
            Err(why) => return text(StatusCode::BAD_REQUEST, why),
        };
        match reviews.decide(id, digest, decided) {
            Ok(()) => file("application/json", "{\"ok\":true}"),
            Err(e @ DecideError::Gone(_)) => text(StatusCode::NOT_FOUND, &e.to_string()),
            Err(e @ DecideError::Digest { .. }) => text(StatusCode::CONFLICT, &e.to_string()),
            Err(e @ DecideError::NotACall(_)) => text(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    }

    /// The token's exchange: the cookie, and on to the page without the token in its URL.
    fn exchange(&self, token: &str) -> Response<Full<Bytes>> {
        if !bool::from(token.as_bytes().ct_eq(self.token.as_bytes())) {
            return text(
                StatusCode::UNAUTHORIZED,
                "this token is not the console's: open the URL `warden console` printed",
            );
        }
        let mut response = text(StatusCode::SEE_OTHER, "on to the console");
        let cookie = format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie
        );
        let headers = response.headers_mut();
        headers.insert(header::LOCATION, HeaderValue::from_static("/"));
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            headers.insert(header::SET_COOKIE, value);
        }
        response
    }

    fn has_cookie<B>(&self, request: &Request<B>) -> bool {
        request
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name == COOKIE && bool::from(value.as_bytes().ct_eq(self.cookie.as_bytes()))
            })
    }

    /// The call log's records after `after`, as soon as there are any: a request waits for
    /// them (looking every [`LOOK_EVERY`], at most [`HOLD_FOR`]), so a call shows up on the
    /// page moments after its record is written.
    async fn calls_after(&self, after: u64) -> Response<Full<Bytes>> {
        let until = tokio::time::Instant::now() + HOLD_FOR;
        loop {
            let source = self.source.clone();
            let read = tokio::task::spawn_blocking(move || source.calls(after)).await;
            let Ok((calls, next)) = read else {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "reading the call log failed",
                );
            };
            if !calls.is_empty() || tokio::time::Instant::now() >= until {
                let body = json!({ "calls": calls, "next": next });
                return file("application/json", &body.to_string());
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }

    /// `read` of the source, off the async threads (it reads files), as JSON.
    async fn data(
        &self,
        read: impl FnOnce(&dyn Source) -> Value + Send + 'static,
    ) -> Response<Full<Bytes>> {
        let source = self.source.clone();
        match tokio::task::spawn_blocking(move || read(&*source)).await {
            Ok(value) => file("application/json", &value.to_string()),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        }
    }
}

/// The value of `name` in the request's query, if given.
fn query<B>(request: &Request<B>, name: &str) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| value.to_owned())
    })
}

fn file(content_type: &'static str, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    with_headers(response)
}

fn text(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = file("text/plain; charset=utf-8", &format!("{message}\n"));
    *response.status_mut() = status;
    response
}

fn with_headers(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    for (name, value) in HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Serves connections on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener, site: Arc<Site>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                tracing::warn!("the console could not accept a connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let site = site.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let site = site.clone();
                async move { Ok::<_, Infallible>(site.answer(request).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The decision a page sent: `approve`; `reject` with its `reason`; `edit` with the
/// `arguments` object to run instead (checked against the tool's schema when it runs);
/// `respond` with the `content` the model gets in place of running the call.
fn decided(sent: &Value) -> Result<Decided, &'static str> {
    let text = |key: &str| sent[key].as_str().filter(|t| !t.trim().is_empty());
    Ok(match sent["decision"].as_str() {
        Some("approve") => Decided::Approve,
        Some("reject") => Decided::Reject(
            text("reason")
                .unwrap_or("rejected at the console")
                .to_owned(),
        ),
        Some("edit") => match &sent["arguments"] {
            arguments @ Value::Object(_) => Decided::Edit(arguments.clone()),
            _ => return Err("an edit sends the call's new arguments as a JSON object"),
        },
        Some("respond") => match text("content") {
            Some(content) => Decided::Respond(content.to_owned()),
            None => return Err("a response sends the text the model gets, not empty"),
        },
        _ => return Err("a decision is approve, edit, respond or reject"),
    })
}
