//! A line's place in the chain: appended by a writer ([`chained`]), read back by the next
//! writer ([`last_link`]) and by [`crate::verify`].

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A line's place in the chain: its number and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// 0 for a line outside the chain (written before it began).
    pub seq: u64,
    /// The sha256 of the line's bytes, its newline left out.
    pub hash: [u8; 32],
}

impl Link {
    /// Where a log's chain starts: the first line's `prev` is all zeros, its `seq` 1.
    pub const GENESIS: Link = Link {
        seq: 0,
        hash: [0; 32],
    };

    /// The link `line` (without its newline) makes, and the `prev` it names when it is in
    /// the chain.
    pub fn of(line: &[u8]) -> (Link, Option<[u8; 32]>) {
        let hash = Sha256::digest(line).into();
        match suffix(line) {
            Some((seq, prev)) => (Link { seq, hash }, Some(prev)),
            None => (Link { seq: 0, hash }, None),
        }
    }

    /// `seq:HEX`, as a head is exported and pinned.
    pub fn to_text(&self) -> String {
        format!("{}:{}", self.seq, hex::encode(self.hash))
    }

    /// Reads [`Link::to_text`]'s form.
    pub fn parse(text: &str) -> Option<Link> {
        let (seq, hash) = text.split_once(':')?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(hash, &mut out).ok()?;
        Some(Link {
            seq: seq.parse().ok()?,
            hash: out,
        })
    }
}

/// Chains `line`, a JSON object's text without its newline, after `last`: its `seq` and
/// `prev` go in before its closing brace, a newline after it. Answers the line's link.
pub fn chained(last: &Link, line: &mut String) -> Link {
    debug_assert!(line.ends_with('}'), "a JSON object");
    line.pop();
    let seq = last.seq + 1;
    let _ = write!(line, ",\"seq\":{seq},\"prev\":\"");
    let mut hex = [0u8; 64];
    // Infallible: the buffer is exactly twice the hash's length.
    let _ = hex::encode_to_slice(last.hash, &mut hex);
    line.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    line.push_str("\"}");
    let hash = Sha256::digest(line.as_bytes()).into();
    line.push('\n');
    Link { seq, hash }
}

/// The `seq` and `prev` a chained line ends with: `,"seq":N,"prev":"<64 hex>"}`.
fn suffix(line: &[u8]) -> Option<(u64, [u8; 32])> {
    const PREV: &[u8] = b",\"prev\":\"";
    let body = line.strip_suffix(b"\"}")?;
    let (rest, hex) = body.split_at_checked(body.len().checked_sub(64)?)?;
    let rest = rest.strip_suffix(PREV)?;
    let digits = rest.len() - rest.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let (rest, seq) = rest.split_at(digits);
    rest.strip_suffix(b",\"seq\":")?;
    let mut prev = [0u8; 32];
    hex::decode_to_slice(hex, &mut prev).ok()?;
    Some((std::str::from_utf8(seq).ok()?.parse().ok()?, prev))
}

/// The link of the last line of `file` (`size` bytes), for the next line to follow; `None`
/// for an empty file. A last line outside the chain (a torn write's fragment, a line an older
/// warden wrote) is followed all the same, the next line numbered after the last chained line
/// before it.
pub fn last_link(file: &File, size: u64) -> io::Result<Option<Link>> {
    let mut lines = Backwards::new(file, size);
    let Some(last) = lines.next_line()? else {
        return Ok(None);
    };
    let (link, _) = Link::of(&last);
    if link.seq != 0 {
        return Ok(Some(link));
    }
    let mut seq = 0;
    while let Some(earlier) = lines.next_line()? {
        if let Some((n, _)) = suffix(&earlier) {
            seq = n;
            break;
        }
    }
    Ok(Some(Link {
        seq,
        hash: link.hash,
    }))
}

/// Reads a file's lines from its end.
struct Backwards<'a> {
    file: &'a File,
    /// Where the part not yet read ends.
    end: u64,
    buf: Vec<u8>,
}

impl<'a> Backwards<'a> {
    const CHUNK: u64 = 16 * 1024;

    fn new(file: &'a File, size: u64) -> Self {
        Self {
            file,
            end: size,
            buf: Vec::new(),
        }
    }

    /// The line before those read so far, without its newline.
    fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            // `buf` holds the bytes from `end` to the start of the last line returned.
            let trimmed = match self.buf.last() {
                Some(b'\n') => self.buf.len() - 1,
                _ => self.buf.len(),
            };
            if let Some(at) = self.buf[..trimmed].iter().rposition(|&b| b == b'\n') {
                let line = self.buf[at + 1..trimmed].to_vec();
                self.buf.truncate(at + 1);
                return Ok(Some(line));
            }
            if self.end == 0 {
                if trimmed == 0 {
                    return Ok(None);
                }
                let line = self.buf[..trimmed].to_vec();
                self.buf.clear();
                return Ok(Some(line));
            }
            let start = self.end.saturating_sub(Self::CHUNK);
            let mut chunk = vec![0u8; (self.end - start) as usize];
            self.file.read_exact_at(&mut chunk, start)?;
            chunk.extend_from_slice(&self.buf);
            self.buf = chunk;
            self.end = start;
        }
    }
}
