//! Where long-lived children are spawned: one thread of warden's own that lives as long as
//! the process does.
//!
//! A child that asks for a parent-death signal (`PR_SET_PDEATHSIG`: the fork server, and
//! every helper it forks with it) must not outlive warden, and only that. The kernel sends
//! the signal when the *thread* that spawned the child ends, not the process: spawned from
//! whatever thread needed it first — a tokio blocking thread, which ends after idling 10 s,
//! or an embedder's thread per call — the child would be killed while warden lives on. This
//! thread never ends before the process, so the signal comes exactly when warden is gone,
//! however it ended.

use std::io;
use std::sync::OnceLock;
use std::sync::mpsc::{Sender, channel};

/// One spawn to run on the spawning thread.
type Job = Box<dyn FnOnce() + Send>;

/// The spawning thread's queue; `Err` when the thread could not be started.
static SPAWNER: OnceLock<io::Result<Sender<Job>>> = OnceLock::new();

/// Runs `spawn` on the long-lived spawning thread and answers what it returned.
pub(crate) fn on_spawner<T: Send + 'static>(
    spawn: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let queue = SPAWNER
        .get_or_init(|| {
            let (queue, jobs) = channel::<Job>();
            std::thread::Builder::new()
                .name("warden-spawner".into())
                .spawn(move || {
                    for job in jobs {
                        job();
                    }
                })
                .map(|_| queue)
        })
        .as_ref()
        .map_err(|e| io::Error::other(format!("starting the spawner thread: {e}")))?;
    let (reply, answer) = std::sync::mpsc::sync_channel(1);
    queue
        .send(Box::new(move || {
            // A caller gone meanwhile drops what was spawned.
            let _ = reply.send(spawn());
        }))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
