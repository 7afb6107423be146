//! One stream of a session shell, cut into what belongs to the current command and what
//! does not. The framing writes `\n<start>\n` before the command and `\n<end><rest>\n` after
//! it; only those exact lines count, with this command's nonce: a line that merely looks like
//! one (a guessed nonce, an earlier command's, extra text) is output like any other.
//!
//! What comes before the start line, or after the end line, was written between commands by
//! background jobs: it is counted, not shown.
//!
//! A docker tool's per-call container frames its output the same way ([`Frames::between`]).
//!
//! A session shell's stdout may carry, just before the end line, the shell's state after the
//! command (its working directory and exported variables, for a command that overlaps the
//! next one): from the exact line `<state>` up to the end line, kept apart and never shown
//! ([`Frames::with_state`]).

use warden_core::Capped;

/// How long the rest of a marker line may be before it cannot be one.
const MAX_REST: usize = 64;

/// The most of a shell's state kept: past it, the state is not known.
const MAX_STATE: usize = 256 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before this command's start line.
    Before,
    /// The command's own output.
    In,
    /// The shell's state, after the command's output.
    State,
    /// After its end line.
    Done,
}

/// One stream (stdout or stderr) during one command.
#[derive(Debug)]
pub struct Frames {
    start: Vec<u8>,
    end: Vec<u8>,
    /// Whether the end line carries more than the marker (stdout's does).
    end_rest: fn(&[u8]) -> bool,
    phase: Phase,
    /// Bytes not yet known to be output: a marker may begin in them.
    pending: Vec<u8>,
    out: Capped,
    /// Bytes written before the start line: by background jobs, between commands.
    pub before: u64,
    /// Bytes written after the end line: by background jobs, told with the next command.
    pub after: u64,
    /// The rest of the end line, once it was seen.
    rest: Option<Vec<u8>>,
    /// How much of the output [`Frames::fresh`] has handed out.
    shown: usize,
    /// The line that starts the shell's state, when the stream carries one.
    state_line: Option<Vec<u8>>,
    /// The state as read so far; `None` once it went past [`MAX_STATE`].
    state: Option<Vec<u8>>,
}

impl Frames {
    /// `start` and `end` begin with `\n`; `end_rest` says whether what follows the end marker
    /// on its line is what the framing writes there.
    pub fn new(start: &str, end: &str, end_rest: fn(&[u8]) -> bool, limit: u64) -> Self {
        Self {
            start: start.as_bytes().to_vec(),
            end: end.as_bytes().to_vec(),
            end_rest,
            phase: Phase::Before,
            pending: Vec::new(),
            out: Capped::new(limit),
            before: 0,
            after: 0,
            rest: None,
            shown: 0,
            state_line: None,
            state: Some(Vec::new()),
        }
    }

    /// The same stream, whose output may be followed by the exact line `state` (beginning
    /// with `\n`) and the shell's state, up to the end line.
    #[must_use]
    pub fn with_state(mut self, state: &str) -> Self {
        self.state_line = Some(state.as_bytes().to_vec());
        self
    }

    /// A stream whose output runs from the exact line `start` up to the exact line `end`
    /// (both beginning with `\n`), with nothing after either marker on its line.
    pub fn between(start: &str, end: &str, limit: u64) -> Self {
        Self::new(start, end, <[u8]>::is_empty, limit)
    }

    /// True once the start line has been seen.
    pub fn started(&self) -> bool {
        self.phase != Phase::Before
    }

    /// Takes more of the stream.
    pub fn push(&mut self, data: &[u8]) {
        if self.phase == Phase::Done {
            self.after += data.len() as u64;
            return;
        }
        self.pending.extend_from_slice(data);
        loop {
            let markers = self.markers();
            let found = markers
                .iter()
                .filter_map(|m| find(&self.pending, m).map(|at| (at, m)))
                .min_by_key(|(at, _)| *at);
            let Some((at, marker)) = found else {
                // A marker may have begun in the last bytes: keep the longest end of them
                // that begins one, so that output which cannot goes on at once.
                let keep = markers.iter().map(|m| self.begun(m)).max().unwrap_or(0);
                self.flush(self.pending.len() - keep);
                return;
            };
            let (len, is_end) = (marker.len(), *marker == self.end);
            self.flush(at);
            let Some(nl) = self.pending[len..].iter().position(|&b| b == b'\n') else {
                if self.pending.len() - len > MAX_REST {
                    // Too long a line to be a marker's: output, and look further.
                    self.flush(1);
                    continue;
                }
                return;
            };
            let rest = &self.pending[len..len + nl];
            let exact = if is_end {
                (self.end_rest)(rest)
            } else {
                rest.is_empty()
            };
            if !exact {
                self.flush(1);
                continue;
            }
            let rest = rest.to_vec();
            self.pending.drain(..len + nl + 1);
            self.phase = match (self.phase, is_end) {
                (Phase::Before, _) => Phase::In,
                (_, false) => Phase::State,
                (_, true) => {
                    self.phase = Phase::Done;
                    self.rest = Some(rest);
                    self.after += self.pending.len() as u64;
                    self.pending.clear();
                    return;
                }
            };
        }
    }

    /// The lines that may come next: the start line, else the end line and (in the
    /// command's output) the state's.
    fn markers(&self) -> Vec<Vec<u8>> {
        match (self.phase, &self.state_line) {
            (Phase::Before, _) => vec![self.start.clone()],
            (Phase::In, Some(state)) => vec![self.end.clone(), state.clone()],
            _ => vec![self.end.clone()],
        }
    }

    /// How many of the last bytes pending begin `marker`.
    fn begun(&self, marker: &[u8]) -> usize {
        let n = self.pending.len();
        (1..marker.len().min(n + 1))
            .rev()
            .find(|&k| marker.starts_with(&self.pending[n - k..]))
            .unwrap_or(0)
    }

    /// Moves `n` bytes of `pending` to where they belong.
    fn flush(&mut self, n: usize) {
        match self.phase {
            Phase::Before => self.before += n as u64,
            Phase::State => {
                let bytes = &self.pending[..n];
                self.state = self
                    .state
                    .take()
                    .filter(|s| s.len() + bytes.len() <= MAX_STATE)
                    .map(|mut s| {
                        s.extend_from_slice(bytes);
                        s
                    });
            }
            _ => self.out.push(&self.pending[..n]),
        }
        self.pending.drain(..n);
    }

    /// The output known to be the command's since this was last asked (within the limit):
    /// what a client watching the command may be shown now.
    pub fn fresh(&mut self) -> &[u8] {
        let kept = self.out.kept();
        let fresh = &kept[self.shown.min(kept.len())..];
        self.shown = kept.len();
        fresh
    }

    /// True once the end line has been seen.
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The rest of the end line.
    pub fn rest(&self) -> Option<&[u8]> {
        self.rest.as_deref()
    }

    /// The shell's state, when the stream carried it whole before its end line.
    pub fn state(&self) -> Option<&[u8]> {
        match (&self.state_line, self.phase) {
            (Some(_), Phase::Done) => self.state.as_deref().filter(|s| !s.is_empty()),
            _ => None,
        }
    }

    /// True once output went past the limit.
    pub fn cut(&self) -> bool {
        self.out.dropped() > 0
    }

    /// The command's output as it wrote it, within the limit (all of it so far, when the
    /// end never came).
    pub fn bytes(mut self) -> Vec<u8> {
        let n = self.pending.len();
        self.flush(n);
        self.out.into_kept()
    }

    /// The command's output (all of it so far, when the end never came).
    pub fn text(&mut self) -> String {
        let n = self.pending.len();
        self.flush(n);
        self.out.text()
    }
}

/// Where `needle` first is in `haystack`: a vectorised search, as a command's output may be
/// many megabytes (a client's transfer) looked through for the few marker lines.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    memchr::memmem::find(haystack, needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits(rest: &[u8]) -> bool {
        rest.len() > 1 && rest[0] == b':' && rest[1..].iter().all(u8::is_ascii_digit)
    }

    fn frames() -> Frames {
        Frames::new("\n__S", "\n__E", digits, 1 << 20)
    }

    #[test]
    fn markers_split_across_chunks_are_found() {
        let mut f = frames();
        for chunk in [
            &b"bg before\n"[..],
            b"\n_",
            b"_S\nline one\nline tw",
            b"o\n",
            b"\n__",
            b"E:4",
            b"2\nbg after",
        ] {
            f.push(chunk);
        }
        assert!(f.done());
        assert_eq!(f.rest(), Some(&b":42"[..]));
        assert_eq!(f.text(), "line one\nline two\n");
        assert_eq!((f.before, f.after), (10, 8));
        f.push(b"more");
        assert_eq!(f.after, 12);
    }

    /// What `fresh` hands out, piece by piece, is the output and nothing of the markers; only
    /// what may begin a marker waits for more.
    #[test]
    fn fresh_output_is_the_output_as_it_comes() {
        let mut f = frames();
        let mut shown = Vec::new();
        for (chunk, now) in [
            (&b"bg\n\n__S\n50%"[..], &b"50%"[..]),
            (b"\r100%\n", b"\r100%"),
            (b"next", b"\nnext"),
            (b"\n__", b""),
            (b"x\n_", b"\n__x"),
            (b"_E:0", b""),
            (b"\n", b""),
        ] {
            f.push(chunk);
            let fresh = f.fresh().to_vec();
            assert_eq!(fresh, now, "after {:?}", String::from_utf8_lossy(chunk));
            shown.extend(fresh);
        }
        assert!(f.done());
        assert_eq!(String::from_utf8(shown).unwrap(), f.text());
    }

    #[test]
    fn only_an_exact_line_is_a_marker() {
        let mut f = frames();
        f.push(b"\n__S\n");
        let fakes = "\n__E\n__E:1x\n__Ex:1\n__E:\n__S\n x __E:1\n__E:99";
        f.push(fakes.as_bytes());
        assert!(!f.done());
        f.push(b"9 and more\nend\n__E:0\n");
        assert!(f.done());
        assert_eq!(f.rest(), Some(&b":0"[..]));
        assert_eq!(f.text(), format!("{fakes}9 and more\nend"));
        // A start line that is not exact starts nothing.
        let mut f = frames();
        f.push(b"\n__S \n\n__S\nok\n__E:0\n");
        assert_eq!(f.text(), "ok");
        assert_eq!(f.before, 6);
    }

    #[test]
    fn a_long_line_after_a_marker_is_output() {
        let mut f = frames();
        f.push(b"\n__S\n\n__E:");
        f.push(&[b'1'; 100]);
        assert!(!f.done());
        f.push(b"\n\n__E:0\n");
        assert!(f.done());
        assert_eq!(f.text(), format!("\n__E:{}\n", "1".repeat(100)));
    }

    #[test]
    fn a_flood_is_capped_not_kept() {
        let mut f = Frames::new("\n__S", "\n__E", digits, 4);
        f.push(b"\n__S\n");
        for _ in 0..1000 {
            f.push(&[b'y'; 1000]);
        }
        assert!(f.pending.len() < 8);
        f.push(b"\n__E:0\n");
        assert!(f.done());
        assert!(
            f.text()
                .starts_with("yyyy\n[warden: output truncated, 999996")
        );
    }

    #[test]
    fn a_per_call_stream_is_output_between_its_lines_and_tells_whether_it_started() {
        let mut f = Frames::between("\n__S", "\n__E", 1 << 20);
        f.push(b"\n__S");
        assert!(!f.started(), "the start line is not whole yet");
        f.push(b"\nno newline at the end\n__E 1\n\n_");
        assert!(f.started() && !f.done());
        f.push(b"_E\nafter");
        assert!(f.done());
        assert_eq!(f.text(), "no newline at the end\n__E 1\n");
        assert_eq!((f.before, f.after), (0, 5));
    }

    #[test]
    fn without_an_end_everything_is_output() {
        let mut f = frames();
        f.push(b"\n__S\npartial\n__");
        assert_eq!(f.text(), "partial\n__");
    }
}
