//! Appends in groups: a record is queued with a number, and whichever thread holds the file
//! writes every queued line in one go (one lock of the file, one look at it, one `write`). A
//! thread that finds the file busy does not queue up behind it to write its own line: the
//! holder writes it. Calls that end together on several threads then share one append instead
//! of sleeping on the log's lock in turn, which cost more than the append (the lock is held
//! through the lock of every writer of the file and a look at it, see [`Writer`]).
//!
//! A record is still in the file before its call's answer leaves warden: [`Logged::wait`] and
//! [`Logged::settled`] return once the line is written, whoever wrote it; `settled` waits
//! without holding up the runtime's thread, which meanwhile runs other calls.

use super::hold::Releaser;
use super::writer::{Line, Writer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;
use tokio::sync::Notify;

/// The log's file with its queue of lines to append.
pub(super) struct Appends {
    queue: Mutex<Queue>,
    file: Mutex<Writer>,
    /// The number of the last line written (or given up on: a failed write is logged).
    written: AtomicU64,
    /// Told each time the file is let go, so a waiter looks again.
    released: Notify,
    /// Lets the writers' lock go once this process stops appending.
    releaser: Releaser,
    /// The log is being closed: the releaser goes.
    closing: AtomicBool,
}

/// Lines waiting for the file, in the order they were numbered.
#[derive(Default)]
struct Queue {
    lines: Vec<Line>,
    /// The number of the last line queued.
    last: u64,
}

/// A queued line: [`Logged::wait`] or [`Logged::settled`] until it is in the file.
#[must_use = "a record is in the file only once it is waited for"]
pub(crate) struct Logged<'a> {
    /// The log and the line's number there; `None` when nothing was queued.
    line: Option<(&'a Arc<Appends>, u64)>,
}

impl Appends {
    pub(super) fn new(writer: Writer) -> Self {
        Self {
            queue: Mutex::default(),
            file: Mutex::new(writer),
            written: AtomicU64::new(0),
            released: Notify::new(),
            releaser: Releaser::default(),
            closing: AtomicBool::new(false),
        }
    }

    /// Queues `line` and writes the queue if the file is free.
    pub(super) fn push(self: &Arc<Self>, line: Line) -> Logged<'_> {
        let number = {
            let mut queue = lock(&self.queue);
            queue.last += 1;
            queue.lines.push(line);
            queue.last
        };
        if let Some(file) = self.try_file() {
            self.write_queued(file);
        }
        Logged {
            line: Some((self, number)),
        }
    }

    /// Writes everything queued, waiting for the file.
    pub(super) fn flush(self: &Arc<Self>) {
        self.write_queued(lock(&self.file));
    }

    /// The writer, for what is not a queued line (sealing); the queue is written first.
    pub(super) fn with_writer<T>(self: &Arc<Self>, f: impl FnOnce(&mut Writer) -> T) -> T {
        let mut file = lock(&self.file);
        self.drain(&mut file);
        let out = f(&mut file);
        self.watch_lock(&mut file);
        drop(file);
        self.released.notify_waiters();
        out
    }

    /// Writes what is queued, seals, lets the writers' lock go and stops the releaser: the
    /// log is closing.
    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let mut file = lock(&self.file);
        self.drain(&mut file);
        file.seal_at_end();
        file.release_lock();
        drop(file);
        self.releaser.stop();
    }

    fn try_file(&self) -> Option<MutexGuard<'_, Writer>> {
        match self.file.try_lock() {
            Ok(file) => Some(file),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Writes the queue until it is empty, lets the file go, and tells the waiters, who look
    /// again: a line queued after the last look here is written by its own thread then.
    fn write_queued(self: &Arc<Self>, mut file: MutexGuard<'_, Writer>) {
        self.drain(&mut file);
        self.watch_lock(&mut file);
        drop(file);
        self.released.notify_waiters();
    }

    /// Has the releaser watch the writers' lock the writer just took, or lets it go now when
    /// there is no releaser.
    fn watch_lock(self: &Arc<Self>, file: &mut Writer) {
        if file.take_fresh_hold()
            && !self
                .releaser
                .watch(Arc::downgrade(self), Appends::release_if_idle)
        {
            file.release_lock();
        }
    }

    /// For the releaser: lets the writers' lock go if the writer is idle; whether it is still
    /// held, `None` once the log closes. Like every holder of the file, it writes what was
    /// queued meanwhile (a writer that found the file busy left its line to the holder).
    fn release_if_idle(self: &Arc<Self>) -> Option<bool> {
        if self.closing.load(Ordering::SeqCst) {
            return None;
        }
        // Being written: busy, not idle.
        let Some(mut file) = self.try_file() else {
            return Some(true);
        };
        file.release_lock_if_idle(Instant::now());
        self.drain(&mut file);
        self.watch_lock(&mut file);
        let held = file.lock_held();
        drop(file);
        self.released.notify_waiters();
        Some(held)
    }

    fn drain(&self, file: &mut Writer) {
        loop {
            let (lines, last) = {
                let mut queue = lock(&self.queue);
                (std::mem::take(&mut queue.lines), queue.last)
            };
            if lines.is_empty() {
                return;
            }
            file.append_lines(lines);
            self.written.store(last, Ordering::Release);
        }
    }

    fn is_written(&self, number: u64) -> bool {
        self.written.load(Ordering::Acquire) >= number
    }
}

impl Logged<'_> {
    /// Nothing to wait for: no log, or a record that could not be serialized.
    pub(crate) const NOTHING: Logged<'static> = Logged { line: None };

    /// Returns once the line is in the file, writing it on this thread when no other is.
    pub(crate) fn wait(self) {
        if let Some((appends, number)) = self.line
            && !appends.is_written(number)
        {
            appends.flush();
        }
    }

    /// Returns once the line is in the file; while another thread writes, this task yields
    /// its thread to others.
    pub(crate) async fn settled(self) {
        let Some((appends, number)) = self.line else {
            return;
        };
        // Most lines are written by their own thread, in `push`: then nothing is waited on.
        if appends.is_written(number) {
            return;
        }
        loop {
            let released = appends.released.notified();
            tokio::pin!(released);
            // Registered before looking, so a release after the look wakes this task.
            released.as_mut().enable();
            if appends.is_written(number) {
                return;
            }
            // The file's guard must not live across the wait: it is let go in this block.
            let wrote = match appends.try_file() {
                Some(file) => {
                    appends.write_queued(file);
                    true
                }
                None => false,
            };
            if !wrote {
                released.await;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use crate::calllog::{CallLog, Record, test_denial};
    use crate::redact::Secrets;
    use std::path::Path;

    fn holds(path: &Path, n: usize) -> bool {
        let text = std::fs::read_to_string(path).unwrap();
        text.contains(&format!("\"call_id\":\"c-{n}-\""))
    }

    /// Tasks on two threads and a plain thread write at once, so lines are handed to whoever
    /// holds the file: each record is in the file when its writer's wait returns, once, and
    /// the chain holds every line in one piece.
    #[test]
    fn a_record_is_in_the_file_when_its_wait_returns_whoever_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        let log = std::sync::Arc::new(CallLog::open(&path).unwrap());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        std::thread::scope(|s| {
            let (plain, path) = (log.clone(), &path);
            s.spawn(move || {
                for n in 0..150 {
                    plain
                        .write(Record::Denied(&test_denial(n)), &Secrets::default())
                        .wait();
                    assert!(holds(path, n), "record {n} after its wait");
                }
            });
            runtime.block_on(async {
                let tasks: Vec<_> = (1..=4)
                    .map(|t| {
                        let (log, path) = (log.clone(), path.to_owned());
                        tokio::spawn(async move {
                            for n in t * 1000..t * 1000 + 150 {
                                let denial = test_denial(n);
                                let logged =
                                    log.write(Record::Denied(&denial), &Secrets::default());
                                logged.settled().await;
                                assert!(holds(&path, n), "record {n} after it settled");
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
            });
        });
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 5 * 150);
        let v = warden_ledger::verify(&[path], None, None).unwrap();
        assert_eq!((v.problem, v.records), (None, 750));
    }
}
