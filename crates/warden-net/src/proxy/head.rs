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
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;
    use tokio::io::ReadBuf;

    fn forward(head: &str) -> (String, u16, String) {
        match parse(head.as_bytes()) {
            Ok(Ask::Forward {
                host,
                port,
                authority,
                request,
            }) => {
                let head = request.head(&authority);
                (host, port, String::from_utf8(head).unwrap_or_default())
            }
            Ok(Ask::Tunnel { .. }) => panic!("a tunnel"),
            Err(bad) => panic!("{}: {bad}", bad.status()),
        }
    }

    #[test]
    fn an_absolute_request_goes_to_its_origin_with_one_hop_headers_dropped() {
        let (host, port, head) = forward(
            "GET http://api.test:8080/a?b=1 HTTP/1.1\r\nHost: api.test:8080\r\n\
             Proxy-Authorization: x\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!((host.as_str(), port), ("api.test", 8080));
        assert_eq!(
            head,
            "GET /a?b=1 HTTP/1.1\r\nHost: api.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let (_, port, head) = forward("GET http://b.test/ HTTP/1.0\r\n\r\n");
        assert_eq!(port, 80);
        assert!(
            head.starts_with("GET / HTTP/1.0\r\nHost: b.test\r\n"),
            "{head}"
        );
    }

    #[test]
    fn a_blank_line_of_bare_lfs_before_the_end_is_refused_not_cut() {
        for head in [
            "GET http://a.test/ HTTP/1.1\n\nHost: b.test\r\n\r\n",
            "GET http://a.test/ HTTP/1.1\r\nX: y\n\r\nHost: b.test\r\n\r\n",
        ] {
            let refused = parse(head.as_bytes()).err().map(|bad| bad.to_string());
            assert!(
                refused.is_some_and(|why| why.contains("blank line")),
                "{head:?}"
            );
        }
        let inside = parse_origin_form(b"GET / HTTP/1.1\n\nHost: b.test\r\n\r\n");
        assert!(matches!(inside, Err(BadHead::EarlyEnd)));
        // A bare LF that ends a line, not the head, is taken, as httparse takes it.
        let (_, _, head) = forward("GET http://a.test/ HTTP/1.1\nAccept: */*\r\n\r\n");
        assert!(head.contains("Accept: */*\r\n"), "{head}");
    }

    #[test]
    fn a_url_with_a_query_and_no_path_goes_on_with_a_slash() {
        let (_, _, head) = forward("GET http://a.test?x=1 HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("GET /?x=1 HTTP/1.1\r\n"), "{head}");
        let (_, _, head) = forward("GET http://a.test HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("GET / HTTP/1.1\r\n"), "{head}");
    }

    #[test]
    fn an_authority_names_a_host_and_a_port_to_dial_or_is_refused() {
        for text in [
            // No host.
            "CONNECT :443 HTTP/1.1\r\n\r\n",
            "CONNECT a.test@:443 HTTP/1.1\r\n\r\n",
            "GET http://:80/ HTTP/1.1\r\n\r\n",
            // Userinfo, which the Host the gate adds would have carried on.
            "CONNECT u:p@a.test:443 HTTP/1.1\r\n\r\n",
            "GET http://u:p@a.test/ HTTP/1.1\r\n\r\n",
            // Ports out of range, zero, or not digits: the URL's went to port 80.
            "GET http://a.test:99999/ HTTP/1.1\r\n\r\n",
            "GET http://a.test:+81/ HTTP/1.1\r\n\r\n",
            "CONNECT a.test:0 HTTP/1.1\r\n\r\n",
            "CONNECT a.test:+443 HTTP/1.1\r\n\r\n",
            "CONNECT a.test: HTTP/1.1\r\n\r\n",
        ] {
            match parse(text.as_bytes()) {
                Err(bad) => assert!(bad.status().starts_with("400"), "{text:?}: {bad}"),
                Ok(_) => panic!("accepted {text:?}"),
            }
        }
        // An empty port is the scheme's; leading zeros are still the number.
        let (host, port, head) = forward("GET http://a.test:/ HTTP/1.1\r\n\r\n");
        assert_eq!((host.as_str(), port), ("a.test", 80));
        assert!(head.contains("Host: a.test:\r\n"), "{head}");
        let (_, port, _) = forward("GET http://a.test:0081/ HTTP/1.1\r\n\r\n");
        assert_eq!(port, 81);
    }

    #[test]
    fn connect_names_host_and_port() {
        for (text, want) in [
            ("CONNECT api.test:443 HTTP/1.1\r\n\r\n", ("api.test", 443)),
            ("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", ("[::1]", 8443)),
        ] {
            match parse(text.as_bytes()) {
                Ok(Ask::Tunnel { host, port }) => assert_eq!((host.as_str(), port), want),
                _ => panic!("{text}"),
            }
        }
    }

    #[test]
    fn what_is_not_a_proxy_request_is_a_400_saying_why() {
        for (text, says) in [
            ("CONNECT api.test HTTP/1.1\r\n\r\n", "host:port"),
            ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "absolute URL"),
            ("GET https://a.test/ HTTP/1.1\r\n\r\n", "CONNECT"),
            ("GET ftp://a.test/ HTTP/1.1\r\n\r\n", "CONNECT"),
            ("\x16\x03\x01\x02\x00\r\n\r\n", "malformed"),
            (
                "GET http://a.test/ HTTP/1.1\r\nBad Header\r\n\r\n",
                "malformed",
            ),
        ] {
            match parse(text.as_bytes()) {
                Err(bad) => {
                    let (status, why) = (bad.status(), bad.to_string());
                    assert!(status.starts_with("400"), "{text:?}: {status}");
                    assert!(why.contains(says), "{text:?}: {why}");
                }
                Ok(_) => panic!("accepted {text:?}"),
            }
        }
    }

    fn tunnel(head: &str) -> (String, u16) {
        match parse(head.as_bytes()) {
            Ok(Ask::Tunnel { host, port }) => (host, port),
            Ok(Ask::Forward { .. }) => panic!("{head:?}: a forward"),
            Err(bad) => panic!("{head:?}: {bad}"),
        }
    }

    /// The status and reason `head` is refused with.
    fn refused(head: &[u8]) -> (&'static str, String) {
        match parse(head) {
            Err(bad) => (bad.status(), bad.to_string()),
            Ok(_) => panic!("accepted {:?}", String::from_utf8_lossy(head)),
        }
    }

    #[test]
    fn connect_takes_an_authority_and_nothing_else() {
        for (target, want) in [
            ("1.2.3.4:22", ("1.2.3.4", 22)),
            ("[fe80::1]:443", ("[fe80::1]", 443)),
            // Case is the gate's to fold, and a port's leading zeros change nothing.
            ("API.Test:65535", ("API.Test", 65535)),
            ("a.test:0443", ("a.test", 443)),
        ] {
            let (host, port) = tunnel(&format!("CONNECT {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
            assert_eq!((host.as_str(), port), want, "{target}");
        }
        for target in [
            "a.test",
            "[::1]",
            "::1:443",
            "a.test:443:1",
            "a.test:65536",
            "http://a.test:443",
            "a.test:443/",
            "*",
            "\u{e9}.test:443",
        ] {
            let (status, why) = refused(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes());
            assert!(status.starts_with("400"), "{target}: {status}");
            assert!(why.contains("host:port"), "{target}: {why}");
        }
        // A method is case-sensitive: `connect` is some other request, not an absolute one.
        let (_, why) = refused(b"connect a.test:443 HTTP/1.1\r\n\r\n");
        assert!(why.contains("absolute URL"), "{why}");
    }

    #[test]
    fn an_absolute_url_keeps_its_method_version_host_and_path() {
        let (host, port, head) = forward("PROPFIND http://[::1]:8080/d/?q#frag HTTP/1.1\r\n\r\n");
        assert_eq!((host.as_str(), port), ("[::1]", 8080));
        // The fragment is the client's alone; a request without Host gets the URL's.
        assert_eq!(
            head,
            "PROPFIND /d/?q HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n"
        );
        let (host, _, head) = forward("GET HTTP://A.test/ HTTP/1.0\r\n\r\n");
        assert_eq!(host, "A.test");
        assert!(
            head.starts_with("GET / HTTP/1.0\r\nHost: A.test\r\n"),
            "{head}"
        );
        // An empty line before the request line is skipped, as RFC 9112 2.2 allows.
        let (host, _, _) = forward("\r\nGET http://a.test/ HTTP/1.1\r\n\r\n");
        assert_eq!(host, "a.test");
    }

    #[test]
    fn host_headers_go_on_as_sent_however_many() {
        let (_, _, head) =
            forward("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\nhost: c.test:81\r\n\r\n");
        assert_eq!(
            head,
            "GET / HTTP/1.1\r\nHost: b.test\r\nhost: c.test:81\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn header_values_are_trimmed_and_may_carry_tabs_and_bytes_past_ascii() {
        let (_, _, head) = forward("GET http://a.test/ HTTP/1.1\r\nX:  a\tb \u{e9} \r\nY:\r\n\r\n");
        assert!(head.contains("\r\nX: a\tb \u{e9}\r\nY: \r\n"), "{head:?}");
        // A path past ASCII is the origin's to judge; it goes on as it came.
        let (_, _, head) = forward("GET http://a.test/\u{e9} HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("GET /\u{e9} HTTP/1.1\r\n"), "{head:?}");
    }

    #[test]
    fn controls_folds_and_malformed_lines_are_a_400() {
        for text in [
            &b"GET http://a.test/\0 HTTP/1.1\r\n\r\n"[..],
            b"GET http://a.test/\x7f HTTP/1.1\r\n\r\n",
            b"GET http://a.test/\xff HTTP/1.1\r\n\r\n",
            b"G\xc3\xa9T http://a.test/ HTTP/1.1\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX: a\x01b\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX: a\x7f\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX\xc3\xa9: y\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX : y\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\n: y\r\n\r\n",
            // obs-fold: a line that continues the header before it.
            b"GET http://a.test/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n",
            // Spaces where one belongs, or none.
            b"GET  http://a.test/ HTTP/1.1\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1 \r\n\r\n",
            b"GET http://a.test/a b HTTP/1.1\r\n\r\n",
        ] {
            let (status, why) = refused(text);
            assert!(status.starts_with("400"), "{text:?}: {status}");
            assert!(why.contains("malformed"), "{text:?}: {why}");
        }
    }

    #[test]
    fn only_http_1_0_and_1_1_are_spoken() {
        for version in ["HTTP/2.0", "HTTP/1.2", "HTTP/0.9", "http/1.1", "HTTP/1", ""] {
            let text = format!("GET http://a.test/ {version}\r\n\r\n");
            let (status, why) = refused(text.as_bytes());
            assert!(status.starts_with("400"), "{text:?}: {status}");
            assert!(why.contains("malformed"), "{text:?}: {why}");
        }
    }

    #[test]
    fn more_than_a_hundred_headers_is_a_431_at_the_gate_and_a_400_in_a_tunnel() {
        let many = |n: usize| {
            let mut head = "GET / HTTP/1.1\r\n".to_owned();
            head.extend((0..n).map(|i| format!("X-{i}: y\r\n")));
            head + "\r\n"
        };
        assert!(parse_origin_form(many(100).as_bytes()).is_ok());
        let absolute = many(101).replacen("GET /", "GET http://a.test/", 1);
        assert!(refused(absolute.as_bytes()).0.starts_with("431"));
        let inside = parse_origin_form(many(101).as_bytes()).map(|_| ());
        assert!(inside.is_err_and(|bad| bad.status().starts_with("400")));
    }

    #[test]
    fn a_head_with_no_request_line_is_incomplete() {
        let (status, why) = refused(b"\r\n\r\n");
        assert!(
            status.starts_with("400") && why.contains("incomplete"),
            "{why}"
        );
    }

    #[test]
    fn inside_a_tunnel_a_request_names_a_path() {
        let request =
            parse_origin_form(b"POST /v1/x?y=1 HTTP/1.0\r\nHost: a.test\r\nTE: x\r\n\r\n");
        let request = request.map_err(|bad| bad.to_string()).unwrap();
        assert_eq!(
            String::from_utf8(request.head("ignored")).unwrap(),
            "POST /v1/x?y=1 HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        );
        for target in ["http://a.test/", "*", "a.test:443", "v1/x"] {
            let text = format!("OPTIONS {target} HTTP/1.1\r\n\r\n");
            let bad = parse_origin_form(text.as_bytes()).map(|_| ());
            assert!(
                bad.is_err_and(|bad| bad.to_string().contains("names a path")),
                "{target}"
            );
        }
    }

    /// A stream that hands over its pieces one read at a time, counting what it handed over.
    pub(super) struct Pieces {
        pieces: VecDeque<Vec<u8>>,
        pub(super) given: usize,
    }

    impl Pieces {
        pub(super) fn new<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Self {
            // An empty read is the stream's end, so no piece is empty.
            let pieces = pieces
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            Pieces { pieces, given: 0 }
        }
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut piece) = self.pieces.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                self.given += n;
                if n < piece.len() {
                    self.pieces.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    pub(super) fn read_pieces(pieces: &mut Pieces) -> Result<Option<(Vec<u8>, usize)>, HeadError> {
        let by = Instant::now() + Duration::from_secs(10);
        runtime().block_on(read_head(pieces, by))
    }

    #[test]
    fn a_head_split_across_reads_ends_at_its_blank_line_and_keeps_what_follows() {
        let text = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n\x16\x03\x01";
        // Every split, the blank line's own included.
        for at in 1..text.len() {
            let mut stream = Pieces::new([&text[..at], &text[at..]]);
            let (buf, len) = read_pieces(&mut stream).ok().flatten().unwrap();
            assert_eq!(len, text.len() - 3, "split at {at}");
            assert_eq!(&buf[..], &text[..buf.len()], "split at {at}");
        }
        let mut stream = Pieces::new(text.chunks(1));
        let (buf, len) = read_pieces(&mut stream).ok().flatten().unwrap();
        assert_eq!((buf.len(), len), (len, text.len() - 3), "a byte a read");
    }

    #[test]
    fn a_head_is_at_most_the_limit_and_reading_stops_there() {
        let head = |len: usize| {
            let start = b"GET http://a.test/ HTTP/1.1\r\nX: ";
            let mut head = start.to_vec();
            head.resize(len - 4, b'a');
            head.extend_from_slice(b"\r\n\r\n");
            head
        };
        let at_limit = head(MAX_HEAD);
        let read = read_pieces(&mut Pieces::new([&at_limit[..]]));
        assert!(matches!(read, Ok(Some((_, MAX_HEAD)))));
        assert!(parse(&at_limit).is_ok());
        let over = head(MAX_HEAD + 1);
        let read = read_pieces(&mut Pieces::new(over.chunks(1000)));
        assert!(matches!(read, Err(HeadError::TooLarge)));
        // A head that never ends is not read to its end.
        let endless = vec![b'a'; 1 << 20];
        let mut stream = Pieces::new(endless.chunks(1 << 10));
        assert!(matches!(read_pieces(&mut stream), Err(HeadError::TooLarge)));
        assert_eq!(stream.given, MAX_HEAD);
        assert!(HeadError::TooLarge.status().starts_with("431"));
    }

    #[test]
    fn a_connection_that_closes_first_has_no_head_and_a_silent_one_times_out() {
        let mut closed = Pieces::new([&b"GET http://a.test/ HTTP/1.1\r\n"[..]]);
        assert!(matches!(read_pieces(&mut closed), Ok(None)));
        let (_open, mut silent) = tokio::io::duplex(64);
        let by = Instant::now() + Duration::from_millis(20);
        let read = runtime().block_on(read_head(&mut silent, by));
        assert!(matches!(read, Err(HeadError::TimedOut)));
        assert!(HeadError::TimedOut.status().starts_with("408"));
    }
}

/// The parser under arbitrary bytes, and under heads built from valid parts.
#[cfg(test)]
mod fuzz {
    use super::tests::{Pieces, read_pieces};
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::{Index, select};

    /// What `read_head` must make of a stream that holds `input` and then ends.
    fn framed(input: &[u8]) -> Result<Option<usize>, ()> {
        match input.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(at) if at + 4 <= MAX_HEAD => Ok(Some(at + 4)),
            _ if input.len() >= MAX_HEAD => Err(()),
            _ => Ok(None),
        }
    }

    /// `bytes` cut where `cuts` say.
    fn cut(bytes: &[u8], cuts: &[Index]) -> Vec<Vec<u8>> {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
    }

    /// Mostly one of `good`, sometimes one of `odd`, as bytes.
    fn word(good: &[&'static str], odd: &[&'static str]) -> impl Strategy<Value = Vec<u8>> + use<> {
        let bytes = |w: &str| w.as_bytes().to_vec();
        prop_oneof![
            12 => select(good.to_vec()).prop_map(bytes),
            1 => select(odd.to_vec()).prop_map(bytes),
        ]
    }

    /// Heads put together from pieces, mostly valid ones, so that every path of the parser is
    /// taken, with a byte perhaps changed; and bytes of any kind.
    fn soup() -> impl Strategy<Value = Vec<u8>> {
        let url = (
            word(&["http://", ""], &["https://", "HTTP://", "ftp://"]),
            word(&[""], &["u@", "u:p@", "@"]),
            word(&["a.test", "[::1]", "1.2.3.4"], &["", "\u{e9}", "*", "a b"]),
            word(&["", ":443", ":8080"], &[":", ":99999", ":0", ":+1"]),
            vec(
                word(&["/", "/x", "?q"], &["#f", "%zz", "\u{e9}", "\t", "//"]),
                0..3,
            ),
        )
            .prop_map(|(scheme, user, host, port, path)| {
                [scheme, user, host, port, path.concat()].concat()
            });
        let loose = vec(
            word(
                &["http://", "a.test", "[::1]", ":", "443", "/", "?q"],
                &["u@", "99999", "+1", "#f", "\u{e9}", "*", "\t"],
            ),
            0..7,
        )
        .prop_map(|words| words.concat());
        let target = prop_oneof![3 => url, 1 => loose];
        let end = || word(&["\r\n"], &["\n"]);
        let field = (
            word(
                &["Host", "host", "Connection", "TE", "X-A"],
                &["", " X", "X\u{e9}"],
            ),
            word(&[": ", ":"], &[" : ", ""]),
            vec(
                word(
                    &["a.test", "b.test:81", " ", "\u{e9}", ""],
                    &["u@a.test", "\t", "\0", "\x7f"],
                ),
                0..3,
            ),
            end(),
        )
            .prop_map(|(name, colon, value, end)| [name, colon, value.concat(), end].concat());
        let head = (
            word(&[""], &["\r\n"]),
            word(
                &["GET", "CONNECT", "PROPFIND"],
                &["connect", "G\u{e9}T", ""],
            ),
            word(&[" "], &["  "]),
            target,
            word(
                &[" HTTP/1.1", " HTTP/1.0"],
                &[" HTTP/2.0", " http/1.1", "", " HTTP/1.1 "],
            ),
            end(),
            vec(field, 0..4),
            end(),
        )
            .prop_map(
                |(lead, method, space, target, version, end, fields, blank)| {
                    let line = [lead, method, space, target, version, end].concat();
                    [line, fields.concat(), blank].concat()
                },
            );
        let change = proptest::option::weighted(0.1, (any::<Index>(), any::<u8>()));
        let changed = (head, change).prop_map(|(mut head, change)| {
            if let (Some((at, byte)), false) = (change, head.is_empty()) {
                let at = at.index(head.len());
                head[at] = byte;
            }
            head
        });
        prop_oneof![4 => changed, 1 => vec(any::<u8>(), 0..200)]
    }

    /// `request` as the origin gets it, parsed back, is `request`, with the Host it was given.
    fn goes_on_whole(request: &Request, authority: &str) -> Result<(), TestCaseError> {
        prop_assert!(request.path.starts_with('/'), "path {:?}", request.path);
        for (name, _) in &request.headers {
            let name = name.to_ascii_lowercase();
            prop_assert!(!HOP_BY_HOP.contains(&name.as_str()), "{name} went on");
        }
        let again = parse_origin_form(&request.head(authority));
        let again = again.map_err(|bad| TestCaseError::fail(bad.to_string()))?;
        let mut headers = request.headers.clone();
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            headers.push(("Host".to_owned(), authority.as_bytes().to_vec()));
        }
        prop_assert_eq!(&again.method, &request.method);
        prop_assert_eq!(&again.path, &request.path);
        prop_assert_eq!(again.version, request.version);
        prop_assert_eq!(again.headers, headers);
        Ok(())
    }

    /// A header: a token name, a value with no whitespace at its ends.
    fn header() -> impl Strategy<Value = (String, String)> {
        let name = prop_oneof![
            "[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]{0,12}",
            select(vec!["Host", "Connection", "TE", "Upgrade", "Keep-Alive"])
                .prop_map(str::to_owned),
        ];
        (name, "([!-~\u{e9}]([ \t!-~\u{e9}]{0,20}[!-~\u{e9}])?)?")
    }

    /// A host as a URL or CONNECT names it: a name, an IPv4 address or a bracketed IPv6 one.
    fn host() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,10}){0,3}",
            any::<[u8; 4]>().prop_map(|[a, b, c, d]| format!("{a}.{b}.{c}.{d}")),
            any::<std::net::Ipv6Addr>().prop_map(|ip| format!("[{ip}]")),
        ]
    }

    /// A head of `line` and `headers`.
    fn head_of(line: &str, headers: &[(String, String)]) -> String {
        let fields: String = headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\r\n"))
            .collect();
        format!("{line}\r\n{fields}\r\n")
    }

    /// `headers` as the origin should get them.
    fn end_to_end_of(headers: &[(String, String)]) -> Vec<(String, Vec<u8>)> {
        headers
            .iter()
            .filter(|(n, _)| !HOP_BY_HOP.contains(&n.to_ascii_lowercase().as_str()))
            .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn read_head_frames_any_stream_as_the_rule_says_and_reads_no_further(
            // A pattern repeated: a byte strategy each of 16 KiB would take seconds a case.
            pattern in vec(prop_oneof![Just(b'\r'), Just(b'\n'), any::<u8>()], 1..8),
            len in prop_oneof![0..64usize, MAX_HEAD - 8..MAX_HEAD + 8],
            end in proptest::option::of(any::<Index>()),
            cuts in vec(any::<Index>(), 0..6),
        ) {
            let mut input: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
            if let Some(at) = end {
                let at = at.index(input.len() + 1);
                input.splice(at..at, *b"\r\n\r\n");
            }
            let pieces = cut(&input, &cuts);
            let mut stream = Pieces::new(pieces.iter().map(Vec::as_slice));
            let read = read_pieces(&mut stream);
            // It holds at most the limit and one read of 4 KiB, less a byte.
            prop_assert!(stream.given < MAX_HEAD + 4096, "read {}", stream.given);
            match (read, framed(&input)) {
                (Ok(Some((buf, len))), Ok(Some(want))) => {
                    prop_assert_eq!(len, want);
                    prop_assert_eq!(buf.len(), stream.given);
                    prop_assert_eq!(&buf[..], &input[..buf.len()]);
                }
                (Ok(None), Ok(None)) | (Err(HeadError::TooLarge), Err(())) => {}
                (read, want) => {
                    let read = read.map(|r| r.map(|(_, len)| len));
                    prop_assert!(false, "read {:?}, want {:?}", read, want);
                }
            }
        }

        #[test]
        fn whatever_the_parser_takes_names_a_destination_and_goes_on_whole(bytes in soup()) {
            match parse(&bytes) {
                Ok(Ask::Tunnel { host, port }) => {
                    prop_assert!(!host.is_empty() && port != 0);
                    let named = format!("CONNECT {host}:");
                    prop_assert!(bytes.windows(named.len()).any(|w| w == named.as_bytes()));
                }
                Ok(Ask::Forward { host, port, authority, request }) => {
                    prop_assert!(!host.is_empty() && port != 0);
                    prop_assert!(authority.starts_with(&host) && !authority.contains('@'));
                    goes_on_whole(&request, &authority)?;
                }
                Err(bad) => prop_assert!(bad.status().starts_with("4")),
            }
            if let Ok(request) = parse_origin_form(&bytes) {
                goes_on_whole(&request, "a.test")?;
            }
        }

        #[test]
        fn a_well_formed_request_is_taken_as_it_was_made(
            method in "[A-Z][A-Z-]{0,9}".prop_filter("a request", |m| m != "CONNECT"),
            host in host(),
            port in proptest::option::of(1..=u16::MAX),
            path in "(/[A-Za-z0-9._~%!$&'()*+,;=:@-]{0,8}){0,4}",
            query in proptest::option::of("[A-Za-z0-9=&/?%-]{0,10}"),
            minor in 0..=1u8,
            headers in vec(header(), 0..8),
        ) {
            let authority = port.map_or_else(|| host.clone(), |p| format!("{host}:{p}"));
            let target = path + &query.map(|q| format!("?{q}")).unwrap_or_default();
            let line = format!("{method} http://{authority}{target} HTTP/1.{minor}");
            let text = head_of(&line, &headers).into_bytes();
            let Ok(Ask::Forward { host: h, port: p, authority: a, request }) = parse(&text) else {
                let text = String::from_utf8_lossy(&text);
                return Err(TestCaseError::fail(format!("not forwarded: {text:?}")));
            };
            prop_assert_eq!((h, p, a), (host, port.unwrap_or(80), authority));
            let path = if target.starts_with('/') { target } else { format!("/{target}") };
            prop_assert_eq!(&request.method, &method);
            prop_assert_eq!(&request.path, &path);
            prop_assert_eq!(request.version, if minor == 0 { "1.0" } else { "1.1" });
            prop_assert_eq!(&request.headers, &end_to_end_of(&headers));

            let text = head_of(&format!("{method} {path} HTTP/1.{minor}"), &headers);
            let inside = parse_origin_form(text.as_bytes());
            let inside = inside.map_err(|bad| TestCaseError::fail(bad.to_string()))?;
            let want = (method, path, end_to_end_of(&headers));
            prop_assert_eq!((inside.method, inside.path, inside.headers), want);
        }

        #[test]
        fn a_well_formed_connect_is_taken_as_it_was_made(
            host in host(),
            port in 1..=u16::MAX,
            headers in vec(header(), 0..8),
        ) {
            let text = head_of(&format!("CONNECT {host}:{port} HTTP/1.1"), &headers);
            let Ok(Ask::Tunnel { host: h, port: p }) = parse(text.as_bytes()) else {
                return Err(TestCaseError::fail(format!("not a tunnel: {text:?}")));
            };
            prop_assert_eq!((h, p), (host, port));
        }
    }
}
