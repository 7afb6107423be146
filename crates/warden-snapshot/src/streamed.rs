//! A kept archive sent on as its check comes past it: for a restore into a sandbox that holds
//! nothing yet (a fork's), which unpacks the archive while warden still checks its end.
//!
//! The check is [`crate::archive::checked`]'s: the archive written again as warden writes
//! one, compared with the kept bytes. Here the kept bytes are held only from where they are
//! read ([`Tee`]) until the rewrite has come past them ([`Confirm`]), then handed on a
//! [`PIECE`] at a time: what goes out is always bytes that warden would have written itself.
//! An archive that is not its own rewrite (refused, edited, or kept by another warden) stops
//! the stream; [`crate::archive::checked`] then says which, and makes what a restore unpacks.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::rc::Rc;

use crate::archive::ArchiveError;

/// The bytes handed on at a time (a FIFO holds 64 KiB).
pub const PIECE: usize = 256 << 10;

/// Checks `archive` as [`crate::archive::checked`] does, handing each checked piece to
/// `send` (false when no one takes it any more). True when the whole archive went out;
/// false when it stopped, after `send` was handed an error (the archive is not its own
/// rewrite) or refused a piece.
pub fn streamed(
    archive: impl Read,
    skip: &[&str],
    mut send: impl FnMut(io::Result<Vec<u8>>) -> bool,
) -> bool {
    let unsent = Rc::new(RefCell::new(Unsent::default()));
    let mut tee = Tee {
        inner: archive,
        unsent: unsent.clone(),
    };
    let confirm = Confirm {
        unsent: unsent.clone(),
        send: &mut send,
    };
    let checked = crate::archive::whole(&mut tee, skip, true, confirm);
    if unsent.borrow().gone {
        return false;
    }
    // Past the end blocks the kept file must hold nothing more.
    let rest = checked.and_then(|_| {
        io::copy(&mut tee, &mut io::sink()).map_err(|e| ArchiveError::Unreadable(e.to_string()))
    });
    let last = rest.map(|_| std::mem::take(&mut *unsent.borrow_mut()));
    match last {
        Ok(last)
            if !last.differs && last.ahead.is_empty() && last.bytes.len() == last.confirmed =>
        {
            send(Ok(last.bytes))
        }
        _ => {
            send(Err(io::Error::other(DIFFERS)));
            false
        }
    }
}

/// Why a stream stopped (the transfer's error says so).
const DIFFERS: &str = "the kept archive is not warden's own rewrite";

/// Bytes read from the kept archive and not yet handed on, and the rewrite's bytes not yet
/// compared with them: the rewrite runs ahead of the reading by a file's padding and the end
/// blocks, which it writes before the reader has come to them.
#[derive(Default)]
struct Unsent {
    bytes: Vec<u8>,
    /// How many of `bytes` the rewrite matched.
    confirmed: usize,
    /// What the rewrite wrote past `bytes`.
    ahead: Vec<u8>,
    /// The rewrite wrote something else.
    differs: bool,
    /// A piece was refused: no one takes the archive any more.
    gone: bool,
}

impl Unsent {
    /// Compares what the rewrite wrote ahead with the bytes read since.
    fn settle(&mut self) {
        let n = self.ahead.len().min(self.bytes.len() - self.confirmed);
        let end = self.confirmed + n;
        if self.bytes[self.confirmed..end] != self.ahead[..n] {
            self.differs = true;
        }
        self.confirmed = end;
        self.ahead.drain(..n);
    }

    /// The matched bytes, once a [`PIECE`] of them is there.
    fn piece(&mut self) -> Option<Vec<u8>> {
        if self.confirmed < PIECE {
            return None;
        }
        // The piece keeps the buffer; the few bytes read past it move to a new one.
        let rest = self.bytes.split_off(self.confirmed);
        self.confirmed = 0;
        Some(std::mem::replace(&mut self.bytes, rest))
    }
}

/// The kept archive, each byte read also kept in [`Unsent`].
struct Tee<R> {
    inner: R,
    unsent: Rc<RefCell<Unsent>>,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut unsent = self.unsent.borrow_mut();
        unsent.bytes.extend_from_slice(&buf[..n]);
        unsent.settle();
        Ok(n)
    }
}

/// Where the rewrite goes: compared with the bytes read, which are handed on once it has come
/// past them.
struct Confirm<'s, F> {
    unsent: Rc<RefCell<Unsent>>,
    send: &'s mut F,
}

impl<F: FnMut(io::Result<Vec<u8>>) -> bool> Write for Confirm<'_, F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut unsent = self.unsent.borrow_mut();
        unsent.ahead.extend_from_slice(buf);
        unsent.settle();
        if unsent.differs {
            return Err(io::Error::other(DIFFERS));
        }
        if let Some(piece) = unsent.piece() {
            drop(unsent);
            if !(self.send)(Ok(piece)) {
                self.unsent.borrow_mut().gone = true;
                return Err(io::Error::other("no one takes the archive any more"));
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive;

    /// A tar of `files` (name, bytes) as `tar` in a sandbox writes one.
    fn tar_of(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, bytes) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // Written raw: the builder refuses the names a hostile archive holds.
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, bytes.as_slice()).expect("appended");
        }
        b.into_inner().expect("finished")
    }

    /// What `streamed` hands on, and whether it went whole.
    fn sent(kept: &[u8]) -> (Vec<u8>, bool, usize) {
        let (mut out, mut errors) = (Vec::new(), 0);
        let whole = streamed(kept, &[], |piece| {
            match piece {
                Ok(bytes) => out.extend_from_slice(&bytes),
                Err(_) => errors += 1,
            }
            true
        });
        (out, whole, errors)
    }

    #[test]
    fn an_archive_warden_wrote_goes_out_whole_and_unchanged_in_pieces() {
        let big: Vec<u8> = (0..PIECE * 3 + 77).map(|i| (i % 251) as u8).collect();
        let raw = tar_of(&[("./a", big), ("./b", b"bee".to_vec())]);
        let kept = archive::rewrite_into(&raw, &[], Vec::new()).expect("kept");
        let (out, whole, errors) = sent(&kept);
        assert!(whole);
        assert_eq!(errors, 0);
        assert_eq!(out, kept);
    }

    #[test]
    fn an_edited_or_refused_archive_stops_with_an_error_and_checked_says_why() {
        let raw = tar_of(&[("./a", vec![7; PIECE * 2])]);
        let kept = archive::rewrite_into(&raw, &[], Vec::new()).expect("kept");
        // Bytes after its end: not what warden wrote, though its entries pass.
        let mut longer = kept;
        longer.extend_from_slice(&[1; 512]);
        let (_, whole, errors) = sent(&longer);
        assert!(!whole);
        assert_eq!(errors, 1);
        // An entry that climbs out of its root: refused before a byte of it goes out.
        let out_of_root = tar_of(&[("../x", b"x".to_vec())]);
        let (out, whole, errors) = sent(&out_of_root);
        assert!(!whole && out.is_empty(), "{} bytes went", out.len());
        assert_eq!(errors, 1);
        assert!(matches!(
            archive::checked(out_of_root.as_slice(), out_of_root.len(), &[]),
            Err(archive::ArchiveError::OutOfRoot(_))
        ));
    }

    #[test]
    fn a_stream_no_one_takes_stops() {
        let raw = tar_of(&[("./a", vec![7; PIECE * 3])]);
        let kept = archive::rewrite_into(&raw, &[], Vec::new()).expect("kept");
        let mut offered = 0;
        let whole = streamed(kept.as_slice(), &[], |_| {
            offered += 1;
            false
        });
        assert!(!whole);
        assert_eq!(offered, 1);
    }
}
