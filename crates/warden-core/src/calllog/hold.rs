//! The lock every writer of a log takes (`NAME.lock`), held across appends while this process
//! is busy writing: taking it, and looking at the file again after taking it (another warden
//! may have appended or rotated meanwhile), are three system calls a record otherwise. It is
//! let go once this process has appended nothing for [`HOLD_IDLE`] (a thread of its own,
//! [`Releaser`], watches), and at least every [`HOLD_MAX`] while it stays busy, so that other
//! wardens sharing the log wait that long at most.

use std::fs::File;
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The writers' lock is let go once this process has appended nothing for this long.
pub(super) const HOLD_IDLE: Duration = Duration::from_millis(1);

/// The writers' lock is let go and taken again at least this often while this process appends
/// without pause.
pub(super) const HOLD_MAX: Duration = Duration::from_millis(10);

/// The writers' lock of one log, as this writer holds it.
pub(super) struct WritersLock {
    file: File,
    held: Option<Held>,
}

/// Since when the lock is held, and when it was last used.
struct Held {
    since: Instant,
    used: Instant,
}

/// What taking the lock for an append found.
#[derive(PartialEq, Eq)]
pub(super) enum Taken {
    /// Held since the last append: no other writer can have touched the file.
    Still,
    /// Taken now (or it cannot be taken): the file may have changed since the last append.
    Afresh,
}

impl WritersLock {
    pub(super) fn new(file: File) -> Self {
        Self { file, held: None }
    }

    /// Holds the lock for an append at `now`, taking it again when it was held [`HOLD_MAX`].
    /// `Err` when it cannot be taken: the append goes on without it.
    pub(super) fn take(&mut self, now: Instant) -> std::io::Result<Taken> {
        match &mut self.held {
            Some(held) if now.duration_since(held.since) < HOLD_MAX => {
                held.used = now;
                return Ok(Taken::Still);
            }
            Some(_) => self.release(),
            None => {}
        }
        self.file.lock()?;
        self.held = Some(Held {
            since: now,
            used: now,
        });
        Ok(Taken::Afresh)
    }

    /// Lets the lock go, if held.
    pub(super) fn release(&mut self) {
        if self.held.take().is_some() {
            let _ = self.file.unlock();
        }
    }

    /// Lets the lock go if it was last used [`HOLD_IDLE`] before `now`.
    pub(super) fn release_if_idle(&mut self, now: Instant) {
        if self
            .held
            .as_ref()
            .is_some_and(|h| now.duration_since(h.used) >= HOLD_IDLE)
        {
            self.release();
        }
    }

    pub(super) fn is_held(&self) -> bool {
        self.held.is_some()
    }
}

impl Drop for WritersLock {
    fn drop(&mut self) {
        self.release();
    }
}

/// The thread that lets a busy writer's lock go once the writer is idle. It sleeps while the
/// lock is not held, and looks every [`HOLD_IDLE`] while it is.
#[derive(Default)]
pub(super) struct Releaser {
    thread: OnceLock<Option<Thread>>,
}

impl Releaser {
    /// Wakes the thread (starting it the first time) to watch the lock `release_if_idle`
    /// lets go (answering whether it is still held, `None` once the owner closes), for as
    /// long as `owner` lives. `false` when no thread can be started: the caller then lets
    /// the lock go itself after each append.
    pub(super) fn watch<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        release_if_idle: fn(&Arc<T>) -> Option<bool>,
    ) -> bool {
        let thread = self.thread.get_or_init(|| {
            std::thread::Builder::new()
                .name("warden-calllog".into())
                .spawn(move || watching(&owner, release_if_idle))
                .map(|handle| handle.thread().clone())
                .map_err(|e| tracing::warn!("cannot start the call log's lock releaser: {e}"))
                .ok()
        });
        match thread {
            Some(thread) => {
                thread.unpark();
                true
            }
            None => false,
        }
    }

    /// Wakes the thread to find its owner closing.
    pub(super) fn stop(&self) {
        if let Some(Some(thread)) = self.thread.get() {
            thread.unpark();
        }
    }
}

fn watching<T>(owner: &Weak<T>, release_if_idle: fn(&Arc<T>) -> Option<bool>) {
    loop {
        std::thread::park_timeout(HOLD_IDLE);
        let Some(owner) = owner.upgrade() else {
            return;
        };
        let held = release_if_idle(&owner);
        drop(owner);
        let Some(held) = held else {
            return;
        };
        if !held {
            // Until a writer takes the lock again, or the owner goes.
            std::thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::calllog::{CallLog, Record, test_denial};
    use crate::redact::Secrets;
    use std::fs::File;
    use std::time::{Duration, Instant};

    /// Whether another writer could take the lock now (another open file, as another warden
    /// has).
    fn free(lock: &File) -> bool {
        match lock.try_lock() {
            Ok(()) => {
                lock.unlock().unwrap();
                true
            }
            Err(_) => false,
        }
    }

    /// Lines written one after another while the releaser looks at the writer between them:
    /// a line queued while the releaser held the file is written by the releaser, so no
    /// writer waits for its line for ever.
    #[test]
    fn no_line_waits_for_ever_on_the_releaser() {
        let dir = tempfile::tempdir().unwrap();
        let log = CallLog::open(&dir.path().join("calls.jsonl")).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            for n in 0..200_000 {
                // Now and then a pause, so that the releaser finds the writer idle.
                if n % 1000 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let denial = test_denial(n);
                let logged = log.write(Record::Denied(&denial), &Secrets::default());
                tokio::time::timeout(Duration::from_secs(30), logged.settled())
                    .await
                    .unwrap_or_else(|_| panic!("line {n} was never written"));
            }
        });
    }

    /// A writer that stops appending lets the writers' lock go by itself, while its log stays
    /// open; and it takes it again for its next append.
    #[test]
    fn an_idle_writer_lets_the_lock_go_and_takes_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        let log = CallLog::open(&path).unwrap();
        let other = File::open(dir.path().join("calls.jsonl.lock")).unwrap();
        for round in 0..2_usize {
            log.write(Record::Denied(&test_denial(round)), &Secrets::default())
                .wait();
            let waited = Instant::now();
            while !free(&other) {
                assert!(
                    waited.elapsed() < Duration::from_secs(30),
                    "the idle writer still holds the lock (round {round})"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(log);
        assert!(free(&other));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    }
}
