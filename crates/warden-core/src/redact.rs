//! Secrets never flow back to the model: granted secret values become `[redacted:NAME]`.

use crate::lock::lock;
use crate::output::{OutputSink, OutputStream};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// The secret values in force for one call, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// Longest values first, so a secret that contains another is replaced whole.
    pub(crate) fn new(mut pairs: Vec<(String, String)>) -> Self {
        pairs.retain(|(_, v)| !v.is_empty());
        pairs.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        Self(pairs)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every secret value replaced.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, value) in &self.0 {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[redacted:{name}]"));
            }
        }
        out
    }

    /// A redactor for a stream of bytes (a program's output as it flows), replacing each
    /// value with `[redacted:NAME]` as [`Secrets::redact`] does.
    pub(crate) fn stream(&self) -> StreamRedactor {
        StreamRedactor::new(
            self.0
                .iter()
                .map(|(name, value)| {
                    let replacement = format!("[redacted:{name}]");
                    (value.as_bytes().to_vec(), replacement.into_bytes())
                })
                .collect(),
        )
    }

    /// Redacts every string (and object key) inside `value`.
    pub(crate) fn redact_value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.redact_value(&mut v);
                    map.insert(self.redact(&k), v);
                }
            }
            _ => {}
        }
    }
}

/// An [`OutputSink`] redacted of secrets, each stream through a [`StreamRedactor`] of its own.
pub(crate) struct RedactedSink {
    inner: OutputSink,
    redactors: Option<Arc<Mutex<[StreamRedactor; 2]>>>,
}

impl RedactedSink {
    pub(crate) fn new(inner: OutputSink, secrets: &Secrets) -> Self {
        let redactors = (!secrets.is_empty())
            .then(|| Arc::new(Mutex::new([secrets.stream(), secrets.stream()])));
        Self { inner, redactors }
    }

    /// The sink to hand the executor.
    pub(crate) fn sink(&self) -> OutputSink {
        let Some(redactors) = &self.redactors else {
            return self.inner.clone();
        };
        let (inner, redactors) = (self.inner.clone(), redactors.clone());
        OutputSink::new(move |stream, bytes| {
            let out = lock(&redactors)[index(stream)].feed(bytes);
            inner.send(stream, &out);
        })
    }

    /// Sends on what the redactors still hold: the call has ended, and no value can complete
    /// a held tail now.
    pub(crate) fn finish(&self) {
        if let Some(redactors) = &self.redactors {
            for stream in [OutputStream::Stdout, OutputStream::Stderr] {
                let out = lock(redactors)[index(stream)].finish();
                self.inner.send(stream, &out);
            }
        }
    }
}

fn index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
    }
}

/// Replaces each secret value in a byte stream however the stream is cut into reads, holding
/// back at most a value's length less one byte: the tail that could be the start of a value
/// the next read completes. What is not such a tail goes on at once, so a terminal is not kept
/// waiting.
#[derive(Debug)]
pub struct StreamRedactor {
    /// Each value and what replaces it, longest value first.
    secrets: Vec<(Vec<u8>, Vec<u8>)>,
    carry: Vec<u8>,
}

impl StreamRedactor {
    /// Replaces each `(value, replacement)`; empty values are ignored.
    pub fn new(mut secrets: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        secrets.retain(|(value, _)| !value.is_empty());
        secrets.sort_by_key(|(value, _)| std::cmp::Reverse(value.len()));
        Self {
            secrets,
            carry: Vec::new(),
        }
    }

    /// Whether it replaces nothing (every byte passes as fed).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The bytes that may go on now: what was held and `chunk`, redacted, less a new tail.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        for (value, replacement) in &self.secrets {
            buf = replace(buf, value, replacement);
        }
        let hold = self.held_tail(&buf);
        self.carry = buf.split_off(buf.len() - hold);
        buf
    }

    /// What is still held, once the stream has ended: no value can complete it now.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.carry)
    }

    /// The length of the longest tail of `buf` that begins some value without ending it.
    fn held_tail(&self, buf: &[u8]) -> usize {
        let longest = self.secrets.first().map_or(0, |(v, _)| v.len() - 1);
        (1..=longest.min(buf.len()))
            .rev()
            .find(|&n| {
                let tail = &buf[buf.len() - n..];
                self.secrets
                    .iter()
                    .any(|(v, _)| v.len() > n && v.starts_with(tail))
            })
            .unwrap_or(0)
    }
}

/// `buf` with every occurrence of `value` replaced by `replacement`.
fn replace(buf: Vec<u8>, value: &[u8], replacement: &[u8]) -> Vec<u8> {
    let Some(first) = find(&buf, value, 0) else {
        return buf;
    };
    let mut out = Vec::with_capacity(buf.len());
    let (mut from, mut at) = (0, Some(first));
    while let Some(found) = at {
        out.extend_from_slice(&buf[from..found]);
        out.extend_from_slice(replacement);
        from = found + value.len();
        at = find(&buf, value, from);
    }
    out.extend_from_slice(&buf[from..]);
    out
}

fn find(buf: &[u8], value: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(value.len())
        .position(|w| w == value)
        .map(|at| from + at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stream of a sink has a redactor of its own, and what they hold goes on at the end.
    #[test]
    fn a_sink_is_redacted_per_stream_and_finished() {
        let secrets = Secrets::new(vec![("TOKEN".into(), "tok-0123456789".into())]);
        let seen = Arc::new(Mutex::new([Vec::<u8>::new(), Vec::new()]));
        let into = seen.clone();
        let sink = RedactedSink::new(
            OutputSink::new(move |stream, bytes| lock(&into)[index(stream)].extend(bytes)),
            &secrets,
        );
        let (out, err) = (OutputStream::Stdout, OutputStream::Stderr);
        sink.sink().send(out, b"a tok-0123");
        sink.sink().send(err, b"tok-0");
        sink.sink().send(out, b"456789 b tok-01");
        sink.finish();
        let seen = lock(&seen);
        assert_eq!(seen[0], b"a [redacted:TOKEN] b tok-01");
        assert_eq!(seen[1], b"tok-0");
    }

    #[test]
    fn a_stream_is_redacted_however_it_is_cut() {
        let secrets = Secrets::new(vec![("TOKEN".into(), "tok-0123456789".into())]);
        let text = b"a tok-0123456789 b tok-01 tok-0123456789tok-0123456789";
        for cut in 1..text.len() {
            let mut r = secrets.stream();
            let mut out = Vec::new();
            for piece in text.chunks(cut) {
                out.extend(r.feed(piece));
            }
            out.extend(r.finish());
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "a [redacted:TOKEN] b tok-01 [redacted:TOKEN][redacted:TOKEN]",
                "cut every {cut} bytes"
            );
        }
    }

    #[test]
    fn a_stream_holds_back_only_what_could_begin_a_secret() {
        let mut r = Secrets::new(vec![("TOKEN".into(), "secret".into())]).stream();
        assert_eq!(r.feed(b"plain text "), b"plain text ");
        assert_eq!(r.feed(b"then sec"), b"then ");
        assert_eq!(r.feed(b"ond"), b"second");
        assert_eq!(r.finish(), b"");
    }

    #[test]
    fn replaces_values_everywhere() {
        let s = Secrets::new(vec![
            ("TOKEN".into(), "abc123".into()),
            ("LONG".into(), "abc123xyz".into()),
        ]);
        assert_eq!(
            s.redact("t=abc123xyz and abc123"),
            "t=[redacted:LONG] and [redacted:TOKEN]"
        );
        let mut v = serde_json::json!({"a": ["abc123"], "abc123": 1, "n": 5});
        s.redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": ["[redacted:TOKEN]"], "[redacted:TOKEN]": 1, "n": 5})
        );
    }
}
