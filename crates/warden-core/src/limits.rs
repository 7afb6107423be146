//! Limits: what a policy writes, and the safe defaults for what it does not.

use crate::located::Mistake;
use crate::units::{ByteSize, HumanDuration};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use toml::Spanned;

/// Wall-clock time of one call when the policy writes none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Memory of one call's sandbox when the policy writes none.
pub(crate) const DEFAULT_MEMORY: u64 = 256 << 20;
/// Bytes of content and of each captured stream when the policy writes none.
pub(crate) const DEFAULT_OUTPUT: u64 = 1 << 20;
/// Bytes of one HTTP response body when the policy writes none.
pub(crate) const DEFAULT_RESPONSE: u64 = 16 << 20;
/// Calls of one tool in flight at once when the policy writes none.
pub(crate) const DEFAULT_CONCURRENCY: u32 = 16;
/// Bytes one call's changes to its read-write roots and what they replace may hold together
/// when the policy writes none (see `warden_tx`).
pub(crate) const DEFAULT_CHANGES: u64 = 1 << 30;

/// Limits as a policy writes them: every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsSpec {
    pub timeout: Option<HumanDuration>,
    pub memory: Option<ByteSize>,
    /// WebAssembly instructions (roughly); deterministic CPU bound. Off unless written.
    pub fuel: Option<u64>,
    pub output: Option<ByteSize>,
    /// Bytes of each HTTP response body a tool may read.
    pub response: Option<ByteSize>,
    pub concurrency: Option<u32>,
    /// Bytes a call's changes to its read-write roots and what they replace may hold.
    pub changes: Option<ByteSize>,
}

impl LimitsSpec {
    /// `self` with every field that `over` writes replaced by `over`'s.
    pub fn overlay(&self, over: &LimitsSpec) -> LimitsSpec {
        LimitsSpec {
            timeout: over.timeout.or(self.timeout),
            memory: over.memory.or(self.memory),
            fuel: over.fuel.or(self.fuel),
            output: over.output.or(self.output),
            response: over.response.or(self.response),
            concurrency: over.concurrency.or(self.concurrency),
            changes: over.changes.or(self.changes),
        }
    }

    /// The limits in force: what is written, and the defaults for the rest.
    pub fn resolve(&self) -> Limits {
        Limits {
            timeout: self.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
            memory: self.memory.map_or(DEFAULT_MEMORY, |b| b.0),
            fuel: self.fuel,
            output: self.output.map_or(DEFAULT_OUTPUT, |b| b.0),
            response: self.response.map_or(DEFAULT_RESPONSE, |b| b.0),
            concurrency: self.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
            changes: self.changes.map_or(DEFAULT_CHANGES, |b| b.0),
        }
    }
}

/// Limits as written in a policy file, with where each was written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsFile {
    pub timeout: Option<Spanned<HumanDuration>>,
    pub memory: Option<Spanned<ByteSize>>,
    pub fuel: Option<Spanned<u64>>,
    pub output: Option<Spanned<ByteSize>>,
    pub response: Option<Spanned<ByteSize>>,
    pub concurrency: Option<Spanned<u32>>,
    pub changes: Option<Spanned<ByteSize>>,
}

impl LimitsFile {
    /// Rejects limits no executor can honour; the error carries the offending span.
    pub(crate) fn check(self) -> Result<LimitsSpec, Mistake> {
        let bad = |span: std::ops::Range<usize>, m: &str| Err(Mistake::at(span, m));
        if let Some(t) = &self.timeout
            && t.get_ref().0.is_zero()
        {
            return bad(t.span(), "timeout must be more than zero");
        }
        if let Some(m) = &self.memory
            && m.get_ref().0 < (1 << 20)
        {
            return bad(m.span(), "memory must be at least 1MiB");
        }
        if let Some(c) = &self.concurrency
            && *c.get_ref() == 0
        {
            return bad(c.span(), "concurrency must be at least 1");
        }
        if let Some(f) = &self.fuel
            && *f.get_ref() == 0
        {
            return bad(
                f.span(),
                "fuel must be more than zero (leave it out for no fuel limit)",
            );
        }
        if let Some(c) = &self.changes
            && c.get_ref().0 == 0
        {
            return bad(
                c.span(),
                "changes must be more than zero (a tool that must not change a root grants it \
                 read-only)",
            );
        }
        Ok(LimitsSpec {
            timeout: self.timeout.map(Spanned::into_inner),
            memory: self.memory.map(Spanned::into_inner),
            fuel: self.fuel.map(Spanned::into_inner),
            output: self.output.map(Spanned::into_inner),
            response: self.response.map(Spanned::into_inner),
            concurrency: self.concurrency.map(Spanned::into_inner),
            changes: self.changes.map(Spanned::into_inner),
        })
    }
}

/// The limits in force for one tool: never absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
    /// Bytes of linear memory (wasm) or address space (processes).
    pub memory: u64,
    pub fuel: Option<u64>,
    /// Bytes of content, and of each captured stream.
    pub output: u64,
    /// Bytes of each HTTP response body.
    pub response: u64,
    pub concurrency: u32,
    /// Bytes a call's changes to its read-write roots and what they replace may hold; past
    /// them it is answered `limit_exceeded`, none applied.
    pub changes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        LimitsSpec::default().resolve()
    }
}

impl Limits {
    /// The limits as JSON, for the audit and call details.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "timeout": HumanDuration(self.timeout).to_string(),
            "memory": ByteSize(self.memory).to_string(),
            "fuel": self.fuel,
            "output": ByteSize(self.output).to_string(),
            "response": ByteSize(self.response).to_string(),
            "concurrency": self.concurrency,
            "changes": ByteSize(self.changes).to_string(),
        })
    }
}

/// Keeps at most `limit` bytes of `text` (on a character boundary) and says how much was cut.
pub(crate) fn cap_text(text: &str, limit: u64) -> String {
    shorten(text, usize::try_from(limit).unwrap_or(usize::MAX))
}

/// The longest the truncation marker gets (a count of 20 digits).
pub const MARKER_MAX: usize = TRUNCATED.len() + 20 + NOT_SHOWN.len();

const TRUNCATED: &str = "\n[warden: output truncated, ";
const NOT_SHOWN: &str = " more bytes not shown]";

/// The visible marker that ends truncated output.
fn truncation_marker(dropped: u64) -> String {
    format!("{TRUNCATED}{dropped}{NOT_SHOWN}")
}

/// `text` cut to `keep` bytes (on a character boundary) and its marker, when longer. A text
/// already ending in warden's marker (a stream capped before) keeps one marker, counting both
/// cuts, so output cut twice still says how much the model did not see.
pub fn shorten(text: &str, keep: usize) -> String {
    let (body, dropped) = split_marker(text);
    if body.len() <= keep {
        return text.to_owned();
    }
    let mut end = keep;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    let cut = dropped + (body.len() - end) as u64;
    format!("{}{}", &body[..end], truncation_marker(cut))
}

/// A text's body and the count of its trailing truncation marker (0 without one).
pub fn split_marker(text: &str) -> (&str, u64) {
    let Some(head) = text.strip_suffix(NOT_SHOWN) else {
        return (text, 0);
    };
    let Some(at) = head.rfind(TRUNCATED) else {
        return (text, 0);
    };
    match head[at + TRUNCATED.len()..].parse::<u64>() {
        Ok(n) => (&text[..at], n),
        Err(_) => (text, 0),
    }
}

/// The first `limit` bytes of a stream, and how many more there were.
#[derive(Debug, Clone)]
pub struct Capped {
    kept: Vec<u8>,
    dropped: u64,
    limit: usize,
}

impl Capped {
    pub fn new(limit: u64) -> Self {
        Self {
            kept: Vec::new(),
            dropped: 0,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        let room = self.limit.saturating_sub(self.kept.len());
        let take = room.min(data.len());
        self.kept.extend_from_slice(&data[..take]);
        self.dropped += (data.len() - take) as u64;
    }

    /// The bytes kept so far.
    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// How many bytes past the limit were dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The bytes kept.
    pub fn into_kept(self) -> Vec<u8> {
        self.kept
    }

    /// The text kept, ending with warden's visible marker when something was cut.
    pub fn text(&self) -> String {
        let mut kept = self.kept.as_slice();
        if self.dropped > 0 {
            // A cut through a multi-byte character would end in a replacement character.
            let valid = match std::str::from_utf8(kept) {
                Ok(_) => kept.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => kept.len(),
            };
            kept = &kept[..valid];
        }
        let mut text = String::from_utf8_lossy(kept).into_owned();
        let cut = self.dropped + (self.kept.len() - kept.len()) as u64;
        if cut > 0 {
            text.push_str(&truncation_marker(cut));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_always_apply() {
        let l = LimitsSpec::default().resolve();
        assert_eq!(l.timeout, DEFAULT_TIMEOUT);
        assert_eq!(l.memory, DEFAULT_MEMORY);
        assert_eq!(l.output, DEFAULT_OUTPUT);
        assert_eq!(l.fuel, None);
    }

    #[test]
    fn overlay_replaces_only_written_fields() {
        let base: LimitsSpec = toml::from_str("timeout = \"5s\"\nmemory = \"32MiB\"").unwrap();
        let over: LimitsSpec = toml::from_str("timeout = \"1s\"").unwrap();
        let l = base.overlay(&over).resolve();
        assert_eq!(l.timeout, Duration::from_secs(1));
        assert_eq!(l.memory, 32 << 20);
    }

    #[test]
    fn capping_keeps_a_marker_and_char_boundaries() {
        assert_eq!(cap_text("short", 10), "short");
        let capped = cap_text("ééééé", 3);
        assert!(capped.starts_with('é'));
        assert!(capped.contains("output truncated, 8 more bytes"));
    }

    #[test]
    fn caps_with_a_marker_and_whole_characters() {
        let mut c = Capped::new(5);
        c.push(b"hello world");
        assert_eq!(
            c.text(),
            format!("hello{}", truncation_marker(6)),
            "the cut is counted"
        );
        let mut c = Capped::new(3);
        c.push("aé€".as_bytes());
        assert!(c.text().starts_with("aé\n"), "{}", c.text());
        let mut c = Capped::new(10);
        c.push(b"short");
        assert_eq!(c.text(), "short");
    }

    #[test]
    fn a_text_cut_twice_counts_both_cuts() {
        let mut c = Capped::new(10);
        c.push(&[b'x'; 100]);
        let once = c.text();
        assert_eq!(shorten(&once, 4), format!("xxxx{}", truncation_marker(96)));
        assert_eq!(shorten(&once, 10), once, "within the cap it stays");
        assert_eq!(shorten("ab", 1), format!("a{}", truncation_marker(1)));
        assert!(truncation_marker(u64::MAX).len() <= MARKER_MAX);
    }
}
