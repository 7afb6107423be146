//! Outgoing HTTP for tools, over `wasi:http`, without the plumbing.
//!
//! ```ignore
//! let page = warden_guest::http::get("https://api.example.org/items")?;
//! println!("{} {}", page.status, page.text());
//! ```
//!
//! warden checks every request against the tool's `net` grants before it connects; a refused
//! request comes back as [`HttpError::Denied`], which a tool should report as it is. Headers
//! the policy injects (credentials) are added by the host and never visible here.

use std::fmt;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use wasip2::io::streams::StreamError;

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL is not `http://` or `https://` with a host.
    BadUrl(String),
    /// warden's policy for this tool does not grant the destination.
    Denied,
    /// The response body passed the limit warden sets for this tool.
    TooLarge(Option<u64>),
    /// Any other failure, as wasi:http names it.
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadUrl(why) => write!(f, "bad URL: {why}"),
            // What was refused and why, warden adds to the tool's answer: the guest only
            // learns that it was.
            Self::Denied => f.write_str("the request was denied"),
            Self::TooLarge(Some(n)) => write!(f, "the response body is larger than {n} bytes"),
            Self::TooLarge(None) => f.write_str("the response body is too large"),
            Self::Failed(why) => write!(f, "the request failed: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<ErrorCode> for HttpError {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => Self::Denied,
            ErrorCode::HttpResponseBodySize(n) => Self::TooLarge(n),
            other => Self::Failed(format!("{other:?}")),
        }
    }
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    request("GET", url, &[], None)
}

/// Sends one request and reads the whole response.
pub fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Response, HttpError> {
    let (scheme, authority, path) = split_url(url)?;
    let entries: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
    let fields =
        Fields::from_list(&entries).map_err(|e| HttpError::Failed(format!("bad header: {e:?}")))?;
    let req = OutgoingRequest::new(fields);
    let method = match method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_owned()),
    };
    let invalid = |what: &str| HttpError::BadUrl(format!("invalid {what}"));
    req.set_method(&method).map_err(|()| invalid("method"))?;
    req.set_scheme(Some(&scheme))
        .map_err(|()| invalid("scheme"))?;
    req.set_authority(Some(authority))
        .map_err(|()| invalid("host"))?;
    req.set_path_with_query(Some(&path))
        .map_err(|()| invalid("path"))?;
    let out = req.body().map_err(|()| invalid("body"))?;
    if let Some(bytes) = body {
        let stream = out.write().map_err(|()| invalid("body"))?;
        for chunk in bytes.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| HttpError::Failed(format!("sending the body: {e:?}")))?;
        }
    }
    let pending = outgoing_handler::handle(req, None)?;
    OutgoingBody::finish(out, None)?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(result)) => result?,
        _ => return Err(HttpError::Failed("no response".into())),
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let incoming = response
        .consume()
        .map_err(|()| HttpError::Failed("the body was already taken".into()))?;
    let body = read_all(&incoming)?;
    drop(incoming);
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn read_all(incoming: &IncomingBody) -> Result<Vec<u8>, HttpError> {
    let stream = incoming
        .stream()
        .map_err(|()| HttpError::Failed("the body stream was already taken".into()))?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(body),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(match wasip2::http::types::http_error_code(&e) {
                    Some(code) => code.into(),
                    // Errors of the body stream reach a guest as text; a host may append a
                    // backtrace, which no one reading a tool's answer needs.
                    None => {
                        let text = e.to_debug_string();
                        HttpError::Failed(text.lines().next().unwrap_or("").to_owned())
                    }
                });
            }
        }
    }
}

/// `scheme://authority/path?query` → its parts; the path defaults to `/`.
fn split_url(url: &str) -> Result<(Scheme, &str, String), HttpError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| HttpError::BadUrl(format!("`{url}` has no scheme")))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(HttpError::BadUrl(format!("`{other}` is not http or https"))),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() || authority.contains('@') {
        return Err(HttpError::BadUrl(format!("`{url}` has no plain host")));
    }
    let path = rest[end..].split('#').next().unwrap_or("");
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    Ok((scheme, authority, path))
}
