//! The request heads a sandbox sends its gate, read ([`read_head`]) and parsed ([`parse`],
//! [`parse_origin_form`]). Every byte here comes from the sandbox, so it is hostile input:
//! nothing is dialled and nothing forwarded until a head has passed, and a head that does not
//! pass is refused with an HTTP answer saying why ([`BadHead`], [`HeadError`]).
//!
//! - Framing: a head ends at its first CRLF CRLF and is at most [`MAX_HEAD`] bytes with it
//!   (431 otherwise); reading stops once that many have come without an end, so a connection
//!   holds at most one read more. Bytes after the head (a body's start, a tunnel's first
//!   bytes) are handed back as they came.
//! - Syntax, by `httparse`: `METHOD SP target SP HTTP/1.x`, single spaces, the version 1.0 or
//!   1.1; the method and header names tokens; a target of visible ASCII or bytes from 0x80,
//!   no controls; header values of visible ASCII, space, tab and bytes from 0x80, trimmed of
//!   the whitespace around them, no other controls. A line folded onto the one before it
//!   (obs-fold) is refused, and so are more than 100 headers (431 at the gate, 400 inside a
//!   tunnel). `httparse` also ends a line at a bare LF, but a blank line of them before the
//!   CRLF CRLF is refused: the headers after it would go unread.
//! - Forms: `CONNECT host:port` (a tunnel), or an absolute `http://` URL (a request
//!   forwarded in origin-form, its fragment dropped, an empty path sent as `/`); an
//!   `https://` or other URL is told to use CONNECT, and a bare path that this is a proxy.
//!   Either authority names a host, no userinfo, and a port of digits from 1 to 65535 (a
//!   URL's is 80 if it names none). Inside an intercepted tunnel a request names a path,
//!   origin-form, as to a server.
//! - Headers: the one-hop ones ([`HOP_BY_HOP`]) are dropped, the rest go on as sent. `Host`
//!   is not judged here: any number of them, any value (the proxy checks them where a
//!   credential is at stake); a request without one gets the URL's `host[:port]`.

use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest request head the gate takes, its blank line included.
const MAX_HEAD: usize = 16 << 10;

/// A request head, parsed: what the sandbox asked for.
pub(super) enum Ask {
    /// `CONNECT host:port`.
    Tunnel { host: String, port: u16 },
    /// An absolute-form HTTP request, to go to the origin as `request`.
    Forward {
        host: String,
        port: u16,
        /// The URL's `host[:port]`, for a request without a Host header.
        authority: String,
        request: Request,
    },
}

/// An HTTP request head as it goes to the origin: origin-form, one-hop headers gone.
pub(super) struct Request {
    method: String,
    path: String,
    /// `1.0` or `1.1`.
    version: &'static str,
    pub(super) headers: Vec<(String, Vec<u8>)>,
}

impl Request {
    /// The head to send, with `Connection: close`: one request per connection, since a second
    /// one on it could name another host.
    pub(super) fn head(&self, authority: &str) -> Vec<u8> {
        let mut out =
            format!("{} {} HTTP/{}\r\n", self.method, self.path, self.version).into_bytes();
        let mut has_host = false;
        for (name, value) in &self.headers {
            has_host |= name.eq_ignore_ascii_case("host");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        if !has_host {
            out.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        out
    }
}

/// Why no request head was taken from a connection that is still open.
#[derive(Debug, thiserror::Error)]
pub(super) enum HeadError {
    #[error("the request head is larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("no request head arrived")]
    TimedOut,
}

impl HeadError {
    /// The HTTP status the gate answers with.
    pub(super) fn status(&self) -> &'static str {
        match self {
            Self::TooLarge => "431 Request Header Fields Too Large",
            Self::TimedOut => "408 Request Timeout",
        }
    }
}

/// Reads until the end of the request head; returns the bytes read and the head's length, or
/// nothing if the connection closed (or failed) first: then there is no one to answer.
pub(super) async fn read_head(
    stream: &mut (impl AsyncRead + Unpin),
    by: Instant,
) -> Result<Option<(Vec<u8>, usize)>, HeadError> {
    let by = tokio::time::Instant::from_std(by);
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match tokio::time::timeout_at(by, stream.read(&mut chunk)).await {
            Err(_) => return Err(HeadError::TimedOut),
            Ok(Err(_) | Ok(0)) => return Ok(None),
            Ok(Ok(n)) => n,
        };
        // Only the new bytes (and three before them) can complete the blank line.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let len = from + at + 4;
            return if len > MAX_HEAD {
                Err(HeadError::TooLarge)
            } else {
                Ok(Some((buf, len)))
            };
        }
        // A head that has not ended within the limit is longer than it.
        if buf.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Headers that belong to one hop: the gate's, not the origin's.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Why a request head is refused before anything is dialled: the sandbox gets an HTTP answer
/// of its [status](BadHead::status) saying so.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadHead {
    #[error("the request head is incomplete")]
    Incomplete,
    /// `httparse` ends a line at a bare LF, so it can see the head end before its CRLF CRLF;
    /// what lies between would be dropped unseen.
    #[error("the request head has a blank line before its end: lines end in CRLF")]
    EarlyEnd,
    #[error("the request has more than 100 headers")]
    TooManyHeaders,
    #[error("a malformed request: {0}")]
    Malformed(#[source] httparse::Error),
    #[error("a malformed request line")]
    MalformedLine,
    #[error("CONNECT needs host:port, not `{0}`")]
    ConnectTarget(String),
    #[error("`{0}` is not a URL")]
    NotUrl(String),
    #[error("the URL's `{0}` is not host[:port] with a port from 1 to 65535")]
    NotHostPort(String),
    /// An origin-form request sent to the gate as if it were the server.
    #[error(
        "this is warden's egress gate, a proxy: ask for an absolute URL \
         (`{method} http://host/path`) or `CONNECT host:port`, not `{target}`"
    )]
    NotAbsolute { method: String, target: String },
    #[error("the gate forwards http:// URLs; for {0}:// open a tunnel with CONNECT")]
    NotHttp(String),
    /// Inside an intercepted tunnel, a request that names more than a path.
    #[error("inside a tunnel a request names a path, not `{0}`")]
    NotAPath(String),
}

impl BadHead {
    /// The HTTP status the gate answers with.
    pub(super) fn status(&self) -> &'static str {
        match self {
            Self::TooManyHeaders => "431 Request Header Fields Too Large",
            _ => "400 Bad Request",
        }
    }
}

/// What the head asks for, or why it is refused.
pub(super) fn parse(head: &[u8]) -> Result<Ask, BadHead> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut headers);
    syntax(&mut request, head)?;
    let (Some(method), Some(target)) = (request.method, request.path) else {
        return Err(BadHead::MalformedLine);
    };
    if method == "CONNECT" {
        let (host, port) = target
            .parse()
            .ok()
            .and_then(|authority| host_port(&authority, None))
            .ok_or_else(|| BadHead::ConnectTarget(target.to_owned()))?;
        return Ok(Ask::Tunnel { host, port });
    }
    let uri: http::Uri = target
        .parse()
        .map_err(|_| BadHead::NotUrl(target.to_owned()))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(BadHead::NotAbsolute {
            method: method.to_owned(),
            target: target.to_owned(),
        });
    };
    if scheme != "http" {
        return Err(BadHead::NotHttp(scheme.to_owned()));
    }
    let (host, port) = host_port(authority, Some(80))
        .ok_or_else(|| BadHead::NotHostPort(authority.as_str().to_owned()))?;
    // Origin-form begins with a slash even where the URL's path is empty.
    let path = match uri.path_and_query().map_or("", |p| p.as_str()) {
        p if p.starts_with('/') => p.to_owned(),
        p => format!("/{p}"),
    };
    Ok(Ask::Forward {
        host,
        port,
        authority: authority.as_str().to_owned(),
        request: Request {
            method: method.to_owned(),
            path,
            version: version_of(&request),
            headers: end_to_end(request.headers),
        },
    })
}

/// The host and port `authority` names, `default` where it names no port; nothing if it names
/// no host, a port that is not a number from 1 to 65535, or userinfo, which only dresses an
/// authority up as another (RFC 9110, 4.2.4).
fn host_port(authority: &http::uri::Authority, default: Option<u16>) -> Option<(String, u16)> {
    let host = authority.host();
    if host.is_empty() || authority.as_str().contains('@') {
        return None;
    }
    // Read here, not by `port_u16`, which takes `+80` and names no port for `99999`.
    let port = match authority.as_str().strip_prefix(host)? {
        "" | ":" => default?,
        colon_port => {
            let digits = colon_port.strip_prefix(':')?;
            if !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok().filter(|&port| port != 0)?
        }
    };
    Some((host.to_owned(), port))
}

/// A request inside an intercepted tunnel: origin-form, as to a server.
pub(super) fn parse_origin_form(head: &[u8]) -> Result<Request, BadHead> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut headers);
    syntax(&mut request, head).map_err(|bad| match bad {
        // Inside a tunnel too many headers is a 400 like any malformed head.
        BadHead::TooManyHeaders => BadHead::Malformed(httparse::Error::TooManyHeaders),
        bad => bad,
    })?;
    let (Some(method), Some(path)) = (request.method, request.path) else {
        return Err(BadHead::MalformedLine);
    };
    if !path.starts_with('/') {
        return Err(BadHead::NotAPath(path.to_owned()));
    }
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        version: version_of(&request),
        headers: end_to_end(request.headers),
    })
}

/// Parses `head`, all of it, into `request`.
fn syntax<'b>(request: &mut httparse::Request<'_, 'b>, head: &'b [u8]) -> Result<(), BadHead> {
    match request.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => Ok(()),
        Ok(httparse::Status::Complete(_)) => Err(BadHead::EarlyEnd),
        Ok(httparse::Status::Partial) => Err(BadHead::Incomplete),
        Err(httparse::Error::TooManyHeaders) => Err(BadHead::TooManyHeaders),
        Err(e) => Err(BadHead::Malformed(e)),
    }
}

fn version_of(request: &httparse::Request<'_, '_>) -> &'static str {
    if request.version == Some(0) {
        "1.0"
    } else {
        "1.1"
    }
}

/// The headers that go on to the origin: all but the one-hop ones.
fn end_to_end(headers: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .filter(|h| !HOP_BY_HOP.contains(&h.name.to_ascii_lowercase().as_str()))
        .map(|h| (h.name.to_owned(), h.value.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
