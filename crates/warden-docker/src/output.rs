//! The end-of-command marker of a session shell, found in its captured output.

use warden_core::Capped;

/// A stream of a session shell, read until the line that ends one command:
/// `\n<marker><tail>\n`. Bytes before the marker go to a [`Capped`]; the search keeps only
/// as many bytes as the marker is long.
#[derive(Debug)]
pub(crate) struct UntilMarker {
    marker: Vec<u8>,
    pending: Vec<u8>,
    pub out: Capped,
    /// What followed the marker on its line, once it was seen whole.
    tail: Option<String>,
}

impl UntilMarker {
    /// `marker` must start with `\n`, so that it is only found at the start of a line.
    pub(crate) fn new(marker: &str, limit: u64) -> Self {
        Self {
            marker: marker.as_bytes().to_vec(),
            pending: Vec::new(),
            out: Capped::new(limit),
            tail: None,
        }
    }

    /// Takes more of the stream; true once the marker line has been seen.
    pub(crate) fn push(&mut self, data: &[u8]) -> bool {
        if self.tail.is_some() {
            // Output of a background job after the marker: it belongs to no command.
            return true;
        }
        self.pending.extend_from_slice(data);
        match find(&self.pending, &self.marker) {
            Some(at) => {
                let after = at + self.marker.len();
                if let Some(nl) = self.pending[after..].iter().position(|&b| b == b'\n') {
                    self.out.push(&self.pending[..at]);
                    let tail = &self.pending[after..after + nl];
                    self.tail = Some(String::from_utf8_lossy(tail).into_owned());
                    self.pending.clear();
                    return true;
                }
                // The marker is here, its line not yet whole: keep it pending.
                self.out.push(&self.pending[..at]);
                self.pending.drain(..at);
                false
            }
            None => {
                let keep = (self.marker.len() - 1).min(self.pending.len());
                let flush = self.pending.len() - keep;
                self.out.push(&self.pending[..flush]);
                self.pending.drain(..flush);
                false
            }
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.tail.is_some()
    }

    pub(crate) fn tail(&self) -> Option<&str> {
        self.tail.as_deref()
    }

    /// What came before the marker (or everything, when it never came).
    pub(crate) fn text(&mut self) -> String {
        if self.tail.is_none() && !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.out.push(&rest);
        }
        self.out.text()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_marker_split_across_chunks() {
        let mut u = UntilMarker::new("\n__M:", 1 << 20);
        for chunk in [
            &b"line one\nline tw"[..],
            b"o\n",
            b"\n__",
            b"M:4",
            b"2\nrest",
        ] {
            u.push(chunk);
        }
        assert!(u.done());
        assert_eq!(u.tail(), Some("42"));
        assert_eq!(u.text(), "line one\nline two\n");
    }

    #[test]
    fn a_flood_before_the_marker_is_capped_not_kept() {
        let mut u = UntilMarker::new("\n__M:", 4);
        for _ in 0..1000 {
            u.push(&[b'y'; 1000]);
        }
        assert!(u.pending.len() < 8);
        assert!(u.push(b"\n__M:0\n"));
        assert!(
            u.text()
                .starts_with("yyyy\n[warden: output truncated, 999996")
        );
    }
}
