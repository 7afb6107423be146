//! The call log's file: appends records' lines (each after the policy line it needs, all in
//! one `write`), chained after the line before them (see `warden_ledger`), and rotates the
//! file by size. It is driven under the log's lock (see `appends`) and the lock every writer of
//! the file takes (`NAME.lock`: several wardens may share one log; see `hold`).

use super::Rotation;
use super::hold::{Taken, WritersLock};
use super::seals::Sealing;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use warden_ledger::{Link, chained, last_link};

/// A serialized record, newline included, and what rotation needs to know of it.
pub(super) struct Line {
    pub(super) text: String,
    pub(super) kind: Kind,
}

pub(super) enum Kind {
    /// A `policy` record, by digest.
    Policy(String),
    /// A call record, naming its policy's digest when the tool exists.
    Call(Option<String>),
    Denied,
}

/// What a line's place in the chain adds to it at most: `,"seq":N,"prev":"<64 hex>"`.
const CHAIN_BYTES: u64 = 100;

/// Room a file keeps for a seal line, which never rotates the file: a file stays within its
/// size with the seal that ends it.
const SEAL_BYTES: u64 = 400;

/// The file and what it holds.
pub(super) struct Writer {
    path: PathBuf,
    rotation: Rotation,
    file: File,
    /// Its inode: another writer's rotation shows as another file at `path`.
    ino: u64,
    /// Held around reading the chain's end and appending.
    lock: WritersLock,
    /// The lock was taken afresh by the last append (a watch for its release may be due).
    fresh_hold: bool,
    /// The file's size, queued lines included.
    bytes: u64,
    /// The last line's place in the chain as of `bytes`; `None`: to be read from the file.
    last: Option<Link>,
    /// The text of the next `write`: a record's line, after the policy line it needs.
    pending: String,
    /// The policies the current file describes.
    policies: HashSet<String>,
    /// Every policy line this log has written, by digest, to describe them again after a
    /// rotation.
    lines: HashMap<String, String>,
    /// The last write failed: the file may end in part of a line.
    torn: bool,
    /// Seals, when the log is sealed.
    pub(super) sealing: Option<Sealing>,
}

impl Writer {
    /// Opens (creating) the file at `path` for appending.
    pub(super) fn open(path: &Path, rotation: Rotation) -> std::io::Result<Writer> {
        let file = open_file(path)?;
        let meta = file.metadata()?;
        let lock = WritersLock::new(open_file(&sibling(path, ".lock"))?);
        Ok(Writer {
            path: path.to_owned(),
            rotation,
            bytes: meta.len(),
            ino: meta.ino(),
            file,
            lock,
            fresh_hold: false,
            last: None,
            pending: String::new(),
            // A file written before may describe policies, but a reader of one rotated file
            // alone must find them in it: each file describes its own.
            policies: HashSet::new(),
            lines: HashMap::new(),
            // A file another run left torn (a full disk, a crash) is ended before the first
            // record of this one.
            torn: true,
            sealing: None,
        })
    }

    /// Appends `lines` (each after the policy line it names, when this file lacks it) in one
    /// write, rotating the file first when a line would take it past its size, and sealing
    /// the chain when a seal is due.
    pub(super) fn append_lines(&mut self, lines: Vec<Line>) {
        if lines.is_empty() {
            return;
        }
        self.hold();
        for line in lines {
            self.queue(line);
            if self.sealing.as_ref().is_some_and(Sealing::due) {
                self.seal();
            }
        }
        self.write_pending();
    }

    /// Seals what this writer appended since its last seal, if anything: at the end.
    pub(super) fn seal_at_end(&mut self) {
        if !self.sealing.as_ref().is_some_and(Sealing::pending) {
            return;
        }
        self.hold();
        self.seal();
        self.write_pending();
        self.lock.release();
    }

    /// Holds the lock of every writer of the file for an append, and takes the file up where
    /// others left it when they may have touched it. Without the lock (an error, logged),
    /// records are still written, but another warden's may then interleave with a break in
    /// the chain.
    fn hold(&mut self) {
        let taken = self.lock.take(Instant::now()).unwrap_or_else(|e| {
            tracing::error!("cannot lock the call log {}: {e}", self.path.display());
            Taken::Afresh
        });
        if taken == Taken::Afresh {
            self.fresh_hold = self.lock.is_held();
            self.catch_up();
        } else if self.last.is_none() {
            self.catch_up();
        }
    }

    /// Whether the last appends took the writers' lock afresh (cleared by asking).
    pub(super) fn take_fresh_hold(&mut self) -> bool {
        std::mem::take(&mut self.fresh_hold)
    }

    /// Lets the writers' lock go.
    pub(super) fn release_lock(&mut self) {
        self.lock.release();
    }

    /// Whether this writer holds the writers' lock.
    pub(super) fn lock_held(&self) -> bool {
        self.lock.is_held()
    }

    /// Lets the writers' lock go if this writer has been idle.
    pub(super) fn release_lock_if_idle(&mut self, now: Instant) {
        self.lock.release_if_idle(now);
    }

    /// Takes the file up where another writer left it: reopened when it was rotated away,
    /// the chain's end read again when it grew.
    fn catch_up(&mut self) {
        match std::fs::metadata(&self.path) {
            Ok(m) if m.ino() == self.ino => {
                if m.len() != self.bytes {
                    self.bytes = m.len();
                    self.last = None;
                }
            }
            _ => match open_file(&self.path).and_then(|f| Ok((f.metadata()?, f))) {
                Ok((meta, file)) => {
                    (self.file, self.ino, self.bytes) = (file, meta.ino(), meta.len());
                    self.policies.clear();
                    self.last = None;
                }
                Err(e) => {
                    tracing::error!("cannot reopen the call log {}: {e}", self.path.display());
                }
            },
        }
        if self.last.is_none() {
            self.last = Some(self.read_last());
        }
    }

    /// The last line's place in the chain: in the file, else in the file rotated before it
    /// (a new file goes on from there), else the chain's start.
    fn read_last(&self) -> Link {
        let in_file = |file: &File| {
            let size = file.metadata().ok()?.len();
            last_link(file, size).ok().flatten()
        };
        in_file(&self.file)
            .or_else(|| in_file(&File::open(rotated(&self.path, 1)).ok()?))
            .unwrap_or(Link::GENESIS)
    }

    fn queue(&mut self, line: Line) {
        let len = line.text.len() as u64 + CHAIN_BYTES + SEAL_BYTES;
        if self.bytes > 0 && self.bytes + len > self.rotation.max_bytes {
            self.write_pending();
            if let Err(e) = self.rotate() {
                tracing::error!("cannot rotate the call log {}: {e}", self.path.display());
            }
        }
        match line.kind {
            Kind::Policy(digest) => {
                self.policies.insert(digest.clone());
                self.lines.insert(digest, line.text.clone());
            }
            // Each file can be read alone: a policy a call names is described in it first.
            Kind::Call(Some(digest)) if !self.policies.contains(&digest) => {
                if let Some(policy) = self.lines.get(&digest).cloned() {
                    self.policies.insert(digest);
                    self.append(policy);
                }
            }
            Kind::Call(_) | Kind::Denied => {}
        }
        self.append(line.text);
    }

    /// Queues `text`, one line, chained after the last.
    fn append(&mut self, mut text: String) {
        if text.ends_with('\n') {
            text.pop();
        }
        let last = self.last.unwrap_or(Link::GENESIS);
        self.last = Some(chained(&last, &mut text));
        self.pending.push_str(&text);
        self.bytes += text.len() as u64;
        if let Some(sealing) = &mut self.sealing {
            sealing.unsealed += 1;
        }
    }

    /// Queues a seal of the chain as it stands, and exports its head.
    fn seal(&mut self) {
        let last = self.last.unwrap_or(Link::GENESIS);
        let Some(line) = self.sealing.as_mut().and_then(|s| s.line(&last)) else {
            return;
        };
        self.append(line);
        if let (Some(sealing), Some(head)) = (&mut self.sealing, self.last) {
            sealing.sealed();
            sealing.export(&self.path, &head);
        }
    }

    fn write_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // Part of a line that a failed write left is ended first: this record starts a line
        // of its own, and the fragment is one unreadable line, which readers count.
        if self.torn && self.ends_mid_line() {
            self.pending.insert(0, '\n');
            self.bytes += 1;
        }
        match self.file.write_all(self.pending.as_bytes()) {
            Ok(()) => self.torn = false,
            Err(e) => {
                let records = self.pending.lines().filter(|l| !l.is_empty()).count();
                tracing::error!(
                    "cannot write the call log {}: {e}; {records} record(s) lost ({} bytes); \
                     the next record that can be written starts a line of its own",
                    self.path.display(),
                    self.pending.len()
                );
                self.torn = true;
                // What the file holds is unknown now; its real size is the best guess, and
                // the chain's end is read again.
                self.bytes = self.file.metadata().map_or(self.bytes, |m| m.len());
                self.last = None;
            }
        }
        self.pending.clear();
    }

    /// Whether the file ends in part of a line (unreadable: as if it did).
    fn ends_mid_line(&self) -> bool {
        use std::os::unix::fs::FileExt as _;
        let Some(last) = self
            .file
            .metadata()
            .ok()
            .and_then(|m| m.len().checked_sub(1))
        else {
            return false;
        };
        let mut byte = [0u8];
        self.file
            .read_at(&mut byte, last)
            .map_or(true, |n| n == 0 || byte[0] != b'\n')
    }

    /// Shifts `NAME.n` to `NAME.n+1` (dropping the last), the current file to `NAME.1`, and
    /// opens a fresh one; the chain goes on in it.
    fn rotate(&mut self) -> std::io::Result<()> {
        let path = &self.path;
        let keep = self.rotation.keep;
        if keep == 0 {
            std::fs::remove_file(path)?;
        } else {
            let _ = std::fs::remove_file(rotated(path, keep));
            for n in (1..keep).rev() {
                let from = rotated(path, n);
                if from.exists() {
                    std::fs::rename(&from, rotated(path, n + 1))?;
                }
            }
            std::fs::rename(path, rotated(path, 1))?;
        }
        self.file = open_file(path)?;
        self.ino = self.file.metadata()?.ino();
        self.bytes = 0;
        self.policies.clear();
        Ok(())
    }
}

/// Appending, and readable for [`Writer::ends_mid_line`].
fn open_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
}

/// `NAME.n`.
pub(super) fn rotated(path: &Path, n: u32) -> PathBuf {
    sibling(path, &format!(".{n}"))
}

/// `path` with `suffix` added to its name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
