//! What comes back from a credential's host on its way into the sandbox: a host that echoes
//! what it was sent (a header, a debugging endpoint) must not hand the sandbox the value the
//! gate set. Every byte of the response, head and body, is scrubbed of the sandbox's secret
//! values, however the stream is cut into reads; the head is read first, so a body the gate
//! could not scan (compressed) is refused before anything of it reaches the sandbox.
//!
//! A replacement keeps the secret's length, so `Content-Length` and chunk sizes stay true.
//! What no scrubber can catch is a host that transforms the value before echoing it (base64,
//! hex, reversed): that host is trusted with the value, and with what it sends back.

use warden_core::StreamRedactor;

/// Stands in for a secret value, cut or padded with `*` to its length.
pub(crate) const MARKER: &[u8] = b"[warden:redacted]";

/// The largest response head the gate reads before scanning what follows.
const MAX_RESPONSE_HEAD: usize = 64 << 10;

/// Replaces each secret in a byte stream with the marker at the secret's length (warden-core's
/// [`StreamRedactor`], which holds back only a tail that could begin a secret).
#[derive(Debug)]
pub(crate) struct Scrubber(StreamRedactor);

impl Scrubber {
    pub(crate) fn new(secrets: Vec<Vec<u8>>) -> Self {
        let masked = secrets
            .into_iter()
            .map(|secret| {
                let marker = (0..secret.len())
                    .map(|i| MARKER.get(i).copied().unwrap_or(b'*'))
                    .collect();
                (secret, marker)
            })
            .collect();
        Self(StreamRedactor::new(masked))
    }

    /// The bytes that may go on now: what was held and `chunk`, scrubbed, less a new tail.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.0.feed(chunk)
    }

    /// What is still held, once the stream has ended: no secret can complete it now.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        self.0.finish()
    }
}

/// Why the gate refuses a credential host's response: the sandbox gets a 502 saying so.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unpassable {
    #[error("the response head is larger than {max} bytes", max = MAX_RESPONSE_HEAD)]
    HeadTooLarge,
    #[error("an incomplete response head")]
    Incomplete,
    #[error("a malformed response: {0}")]
    Malformed(#[source] httparse::Error),
    /// A body coding the scrubber cannot read through, so it could not hide the secret.
    #[error(
        "the response is encoded as `{0}`, which warden cannot scan for the credential's value; \
         the gate asks for `Accept-Encoding: identity`"
    )]
    Encoded(String),
}

/// The response from a credential's host, as the gate passes it back: its heads read whole
/// and checked, then every byte scrubbed.
#[derive(Debug)]
pub(crate) struct Returning {
    scrubber: Scrubber,
    /// The head read so far, until the final (not 1xx) head is complete.
    head: Option<Vec<u8>>,
}

impl Returning {
    pub(crate) fn new(secrets: Vec<Vec<u8>>) -> Self {
        Self {
            scrubber: Scrubber::new(secrets),
            head: Some(Vec::new()),
        }
    }

    /// What of `chunk` goes on to the sandbox now, or why the response is refused.
    pub(crate) fn pass(&mut self, chunk: &[u8]) -> Result<Vec<u8>, Unpassable> {
        let Some(head) = self.head.as_mut() else {
            return Ok(self.scrubber.feed(chunk));
        };
        head.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(head) = self.head.as_mut() {
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                if head.len() > MAX_RESPONSE_HEAD {
                    return Err(Unpassable::HeadTooLarge);
                }
                break;
            };
            let rest = head.split_off(end + 4);
            let interim = check(head)?;
            out.extend(self.scrubber.feed(head));
            if interim {
                *head = rest;
            } else {
                self.head = None;
                out.extend(self.scrubber.feed(&rest));
            }
        }
        Ok(out)
    }

    /// What was held back, once the response has ended (an unfinished head is dropped).
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        self.scrubber.finish()
    }
}

/// Whether `head` is an interim (1xx) response, after which another head follows; refuses a
/// final one whose body is encoded in a way the scrubber cannot read.
fn check(head: &[u8]) -> Result<bool, Unpassable> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Unpassable::Incomplete),
        Err(e) => return Err(Unpassable::Malformed(e)),
    }
    // 101 is final: the Upgrade it would answer never reaches the host.
    if matches!(response.code, Some(100..=199) if response.code != Some(101)) {
        return Ok(true);
    }
    for h in response.headers.iter() {
        let allowed: &[&str] = if h.name.eq_ignore_ascii_case("content-encoding") {
            &["identity"]
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            &["identity", "chunked"]
        } else {
            continue;
        };
        let value = String::from_utf8_lossy(h.value);
        for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !allowed.iter().any(|a| coding.eq_ignore_ascii_case(a)) {
                return Err(Unpassable::Encoded(coding.to_owned()));
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"real-token-0123456789abcdef";

    fn scrub_in_pieces(text: &[u8], cut: usize) -> Vec<u8> {
        let mut s = Scrubber::new(vec![SECRET.to_vec()]);
        let mut out = Vec::new();
        for piece in text.chunks(cut) {
            out.extend(s.feed(piece));
        }
        out.extend(s.finish());
        out
    }

    #[test]
    fn a_secret_is_masked_at_its_length_however_the_stream_is_cut() {
        let text = [
            b"a ".as_slice(),
            SECRET,
            b" b ",
            SECRET,
            SECRET,
            b" real-tok",
        ]
        .concat();
        for cut in 1..=text.len() {
            let out = scrub_in_pieces(&text, cut);
            assert_eq!(out.len(), text.len(), "cut {cut}");
            assert!(!out.windows(SECRET.len()).any(|w| w == SECRET), "cut {cut}");
            assert!(
                out.starts_with(b"a [warden:redacted]**********"),
                "cut {cut}"
            );
            assert!(
                out.ends_with(b" real-tok"),
                "an unfinished start is let go at the end"
            );
        }
    }

    #[test]
    fn only_a_possible_start_of_a_secret_is_held_back() {
        let mut s = Scrubber::new(vec![SECRET.to_vec()]);
        assert_eq!(s.feed(b"data: 1\n"), b"data: 1\n");
        assert_eq!(s.feed(b"data: real-"), b"data: ");
        assert_eq!(s.feed(b"time\n"), b"real-time\n");
    }

    #[test]
    fn a_response_is_scrubbed_head_and_body_and_encoded_bodies_refused() {
        let response = [
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX-Echo: ".as_slice(),
            SECRET,
            b"\r\nContent-Length: 27\r\n\r\n",
            SECRET,
        ]
        .concat();
        for cut in [1, 5, 30, response.len()] {
            let mut r = Returning::new(vec![SECRET.to_vec()]);
            let mut out = Vec::new();
            for piece in response.chunks(cut) {
                out.extend(r.pass(piece).unwrap_or_else(|e| panic!("{e}")));
            }
            out.extend(r.finish());
            assert_eq!(out.len(), response.len());
            assert!(!out.windows(SECRET.len()).any(|w| w == SECRET), "cut {cut}");
        }
        for encoded in [
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-encoding: br\r\n\r\n",
        ] {
            let mut r = Returning::new(vec![SECRET.to_vec()]);
            let refused = r.pass(encoded.as_bytes()).expect_err(encoded).to_string();
            assert!(refused.contains("cannot scan"), "{refused}");
        }
        let mut r = Returning::new(vec![SECRET.to_vec()]);
        let plain =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: identity\r\n\r\n";
        assert!(r.pass(plain.as_bytes()).is_ok());
    }
}
