//! The call log's writer: a thread that owns the file, appends the lines calls hand it (all
//! that are queued in one `write`), and rotates the file by size.

use super::Rotation;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

/// What the writer is asked to do.
pub(super) enum Job {
    Line(Line),
    /// Answer once every line queued before is written.
    Flush(SyncSender<()>),
}

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

/// The file and what it holds.
pub(super) struct Writer {
    path: PathBuf,
    rotation: Rotation,
    file: File,
    /// The file's size, queued lines included.
    bytes: u64,
    /// Lines not yet written: what one `recv` and the jobs queued behind it brought.
    pending: String,
    /// The policies the current file describes.
    policies: HashSet<String>,
    /// Every policy line this log has written, by digest, to describe them again after a
    /// rotation.
    lines: HashMap<String, String>,
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
        })
    }

    /// Starts the thread; it ends, having written everything, when every sender is gone.
    pub(super) fn spawn(self) -> std::io::Result<(Sender<Job>, JoinHandle<()>)> {
        let (jobs, queue) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("warden-call-log".into())
            .spawn(move || self.run(queue))?;
        Ok((jobs, thread))
    }

    fn run(mut self, queue: Receiver<Job>) {
        let mut acks = Vec::new();
        while let Ok(job) = queue.recv() {
            self.take(job, &mut acks);
            while let Ok(job) = queue.try_recv() {
                self.take(job, &mut acks);
            }
            self.write_pending();
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
        }
    }

    fn take(&mut self, job: Job, acks: &mut Vec<SyncSender<()>>) {
        match job {
            Job::Line(line) => self.queue(line),
            Job::Flush(ack) => acks.push(ack),
        }
    }

    fn queue(&mut self, line: Line) {
        if self.bytes > 0 && self.bytes + line.text.len() as u64 > self.rotation.max_bytes {
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
        if let Err(e) = self.file.write_all(self.pending.as_bytes()) {
            tracing::error!(
                "cannot write the call log {}: {e}; {} bytes of records lost",
                self.path.display(),
                self.pending.len()
            );
            // What the file holds is unknown now; its real size is the best guess.
            self.bytes = self.file.metadata().map_or(self.bytes, |m| m.len());
        }
        self.pending.clear();
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

fn open_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// `NAME.n`.
pub(super) fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}
