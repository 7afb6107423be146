//! Reading a ledger back: every line's place in the chain checked, and every seal's
//! signature; the first line edited, removed, reordered or inserted is named by its file, its
//! line and the call it records.

use crate::{LedgerError, Link, PublicKey};
use std::fmt;
use std::path::{Path, PathBuf};

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct Verified {
    /// Lines in the chain.
    pub records: u64,
    /// Lines before the chain began (written by a warden that did not chain).
    pub unchained: u64,
    /// Seals whose signature holds.
    pub seals: u64,
    /// The keys that made them ([`PublicKey::id`]).
    pub keys: Vec<String>,
    /// Lines after the last seal: what no signature covers yet.
    pub unsigned: u64,
    /// The last line's link.
    pub head: Option<Link>,
    /// The first thing wrong, if any.
    pub problem: Option<Problem>,
}

/// Where the chain breaks, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// From 1.
    pub line: usize,
    /// The call the line records, when it records one.
    pub call_id: Option<String>,
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)?;
        if let Some(id) = &self.call_id {
            write!(f, " (call {id})")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// One line where it was read.
#[derive(Clone, Copy)]
struct Place<'a> {
    file: &'a Path,
    line: usize,
    text: &'a [u8],
    link: Link,
    prev: Option<[u8; 32]>,
}

impl Place<'_> {
    fn problem(&self, what: String) -> Problem {
        let call_id = serde_json::from_slice::<serde_json::Value>(self.text)
            .ok()
            .and_then(|v| v.get("call_id")?.as_str().map(str::to_owned));
        Problem {
            file: self.file.to_owned(),
            line: self.line,
            call_id,
            what,
        }
    }
}

/// Checks the log made of `files`, oldest first (a rotated log's `NAME.N` … `NAME.1`, then
/// `NAME`). Seals must be by `key` when one is pinned; `head` is a head exported earlier
/// ([`Link::to_text`]), which the log must still hold.
pub fn verify(
    files: &[PathBuf],
    key: Option<&PublicKey>,
    head: Option<&Link>,
) -> Result<Verified, LedgerError> {
    let texts: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(f).map_err(|e| LedgerError::io("reading", f, e)))
        .collect::<Result<_, _>>()?;
    let mut check = Check {
        key,
        out: Verified::default(),
        last: None,
        first_seq: 0,
        last_seal: None,
        head,
    };
    let lines = files.iter().zip(&texts).flat_map(|(file, text)| {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let lines = (!text.is_empty()).then(|| text.split(|&b| b == b'\n'));
        lines.into_iter().flatten().enumerate().map(|(i, line)| {
            let (link, prev) = Link::of(line);
            Place {
                file,
                line: i + 1,
                text: line,
                link,
                prev,
            }
        })
    });
    let mut lines = lines.peekable();
    while let Some(place) = lines.next() {
        let next = lines.peek().copied();
        let later = || lines.clone().map(|p| p.link.seq);
        if let Err(problem) = check.line(&place, next.as_ref(), later) {
            check.out.problem = Some(problem);
            return Ok(check.out);
        }
    }
    check.finish();
    Ok(check.out)
}

/// The walk along the chain.
struct Check<'k, 'a> {
    key: Option<&'k PublicKey>,
    out: Verified,
    last: Option<Place<'a>>,
    /// The first chained line's `seq`.
    first_seq: u64,
    last_seal: Option<u64>,
    /// A head exported earlier, which the log must hold.
    head: Option<&'k Link>,
}

impl<'a> Check<'_, 'a> {
    /// Checks `place` against the line before it; `next` is the line after it, and `later`
    /// lists the `seq` of the lines after it, to tell a reordering from a removal.
    fn line<I: Iterator<Item = u64>>(
        &mut self,
        place: &Place<'a>,
        next: Option<&Place<'a>>,
        later: impl FnOnce() -> I,
    ) -> Result<(), Problem> {
        let Some(prev) = place.prev else {
            if self.out.records > 0 {
                return Err(place.problem(
                    "inserted: a line outside the chain (it has no `seq` and `prev`)".into(),
                ));
            }
            self.out.unchained += 1;
            self.last = Some(*place);
            return Ok(());
        };
        match self.last.filter(|_| self.out.records > 0) {
            None => {
                self.first_seq = place.link.seq;
                // The line before the chain began is the first one's `prev`.
                if let Some(before) = self.last
                    && before.link.hash != prev
                {
                    return Err(
                        before.problem("edited: the chain's first line does not name it".into())
                    );
                }
            }
            Some(before) => self.follows(place, &before, next, later)?,
        }
        if let Some(head) = self.head
            && head.seq == place.link.seq
            && head.hash != place.link.hash
        {
            return Err(place.problem("edited: it is not the head exported earlier".into()));
        }
        if place.text.starts_with(b"{\"event\":\"seal\"") {
            self.seal(place, prev)?;
        }
        self.out.records += 1;
        self.last = Some(*place);
        Ok(())
    }

    /// Checks that `place` follows `before`.
    fn follows<I: Iterator<Item = u64>>(
        &self,
        place: &Place<'a>,
        before: &Place<'a>,
        next: Option<&Place<'a>>,
        later: impl FnOnce() -> I,
    ) -> Result<(), Problem> {
        let (seq, expected) = (place.link.seq, before.link.seq + 1);
        if seq == expected {
            if place.prev == Some(before.link.hash) {
                return Ok(());
            }
            return Err(
                before.problem("edited: its hash is not the `prev` of the line after it".into())
            );
        }
        if seq > expected {
            let missing = expected..seq;
            let mut found = later().filter(|s| missing.contains(s));
            return Err(match found.next() {
                Some(_) => place.problem(format!(
                    "reordered: records {expected}–{} come after it",
                    seq - 1
                )),
                None => place.problem(format!(
                    "{} record(s) removed before it (seq {expected}–{})",
                    seq - expected,
                    seq - 1
                )),
            });
        }
        if seq >= self.first_seq {
            // Two lines claim one place: the one no later line follows was inserted.
            let inserted = match next {
                Some(next) if next.prev == Some(place.link.hash) => before,
                _ => place,
            };
            return Err(inserted.problem(format!("inserted: a second line numbered {seq}")));
        }
        Err(place.problem(format!(
            "reordered: numbered {seq}, after {}",
            before.link.seq
        )))
    }

    fn seal(&mut self, place: &Place<'a>, prev: [u8; 32]) -> Result<(), Problem> {
        let value: serde_json::Value = serde_json::from_slice(place.text)
            .map_err(|_| place.problem("edited: a seal that is not JSON".into()))?;
        let field = |k: &str| {
            value
                .get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        };
        let Some(public) = PublicKey::parse(field("public_key")) else {
            return Err(place.problem("edited: a seal without a public key".into()));
        };
        if let Some(pinned) = self.key
            && *pinned != public
        {
            return Err(place.problem(format!(
                "sealed by the key {}, not the pinned {}",
                public.id(),
                pinned.id()
            )));
        }
        if !public.signed(place.link.seq, &prev, field("signature")) {
            return Err(place.problem(
                "a seal whose signature does not hold: the chain before it was rewritten".into(),
            ));
        }
        self.out.seals += 1;
        self.last_seal = Some(place.link.seq);
        if !self.out.keys.contains(&public.id()) {
            self.out.keys.push(public.id());
        }
        Ok(())
    }

    /// What is left once every line checked: the unsigned tail, and the exported head.
    fn finish(&mut self) {
        let Some(last) = self.last else {
            return;
        };
        self.out.head = Some(last.link);
        self.out.unsigned = match self.last_seal {
            Some(seal) => last.link.seq - seal,
            None => self.out.records,
        };
        if let Some(head) = self.head
            && head.seq > last.link.seq
        {
            self.out.problem = Some(last.problem(format!(
                "cut short: the log ends at record {}, but a head exported earlier is record {}",
                last.link.seq, head.seq
            )));
        }
    }
}
