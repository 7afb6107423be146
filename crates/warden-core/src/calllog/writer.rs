//! The call log's file: appends each record's line (with the policy line it needs, in one
//! `write`) and rotates the file by size. It is driven on the caller's thread, under the log's
//! lock, so a record is in the file before its call's answer leaves warden.

use super::Rotation;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A serialized record, newline included, and what rotation needs to know of it.
pub(super) struct Line<'a> {
    pub(super) text: String,
    pub(super) kind: Kind<'a>,
}

pub(super) enum Kind<'a> {
    /// A `policy` record, by digest.
    Policy(&'a str),
    /// A call record, naming its policy's digest when the tool exists.
    Call(Option<&'a str>),
    Denied,
}

/// The file and what it holds.
pub(super) struct Writer {
    path: PathBuf,
    rotation: Rotation,
    file: File,
    /// The file's size, queued lines included.
    bytes: u64,
    /// The text of the next `write`: a record's line, after the policy line it needs.
    pending: String,
    /// The policies the current file describes.
    policies: HashSet<String>,
    /// Every policy line this log has written, by digest, to describe them again after a
    /// rotation.
    lines: HashMap<String, String>,
    /// The last write failed: the file may end in part of a line.
    torn: bool,
}

impl Writer {
    /// Opens (creating) the file at `path` for appending.
    pub(super) fn open(path: &Path, rotation: Rotation) -> std::io::Result<Writer> {
        let file = open_file(path)?;
        Ok(Writer {
            path: path.to_owned(),
            rotation,
            bytes: file.metadata()?.len(),
            file,
            pending: String::new(),
            // A file written before may describe policies, but a reader of one rotated file
            // alone must find them in it: each file describes its own.
            policies: HashSet::new(),
            lines: HashMap::new(),
            // A file another run left torn (a full disk, a crash) is ended before the first
            // record of this one.
            torn: true,
        })
    }

    /// Appends `line` (after the policy line it names, when this file lacks it) in one write,
    /// rotating the file first when the line would take it past its size.
    pub(super) fn append_line(&mut self, line: Line<'_>) {
        self.queue(line);
        self.write_pending();
    }

    fn queue(&mut self, line: Line<'_>) {
        if self.bytes > 0 && self.bytes + line.text.len() as u64 > self.rotation.max_bytes {
            self.write_pending();
            if let Err(e) = self.rotate() {
                tracing::error!("cannot rotate the call log {}: {e}", self.path.display());
            }
        }
        match line.kind {
            Kind::Policy(digest) => {
                self.policies.insert(digest.to_owned());
                self.lines.insert(digest.to_owned(), line.text.clone());
            }
            // Each file can be read alone: a policy a call names is described in it first.
            Kind::Call(Some(digest)) if !self.policies.contains(digest) => {
                if let Some(policy) = self.lines.get(digest).cloned() {
                    self.policies.insert(digest.to_owned());
                    self.append(&policy);
                }
            }
            Kind::Call(_) | Kind::Denied => {}
        }
        self.append(&line.text);
    }

    fn append(&mut self, text: &str) {
        self.pending.push_str(text);
        self.bytes += text.len() as u64;
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
                // What the file holds is unknown now; its real size is the best guess.
                self.bytes = self.file.metadata().map_or(self.bytes, |m| m.len());
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
    /// opens a fresh one.
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
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}
