//! The head reader and parsers under hand-written heads, whole and in pieces.

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
    let request = parse_origin_form(b"POST /v1/x?y=1 HTTP/1.0\r\nHost: a.test\r\nTE: x\r\n\r\n");
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
