//! The parser under arbitrary bytes, and under heads built from valid parts.

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
        select(vec!["Host", "Connection", "TE", "Upgrade", "Keep-Alive"]).prop_map(str::to_owned),
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
