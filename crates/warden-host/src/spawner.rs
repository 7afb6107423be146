//! Where session helpers are spawned: one thread of warden's own that lives as long as the
//! process does.
//!
//! A session's helper asks for a parent-death signal (`PR_SET_PDEATHSIG`), so that its shell
//! cannot outlive warden. The kernel sends that signal when the *thread* that spawned the
//! helper ends, not the process: spawned from whatever thread ran the session's first command
//! — a tokio blocking thread, which ends after idling 10 s, or an embedder's thread per call —
//! the session would be killed while warden lives on. This thread never ends before the
//! process, so the signal comes exactly when warden is gone, however it ended.

use std::io;
use std::sync::OnceLock;
use std::sync::mpsc::{Sender, channel};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// One helper to spawn: the command, the runtime its pipes and child belong to, and where
/// the child goes.
struct Job {
    command: Command,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The spawning thread's queue; `Err` when the thread could not be started.
static SPAWNER: OnceLock<Result<Sender<Job>, String>> = OnceLock::new();

/// Spawns `command` from the long-lived spawning thread, in the current tokio runtime.
pub(crate) async fn spawn(command: Command) -> io::Result<Child> {
    let runtime = tokio::runtime::Handle::current();
    let queue = SPAWNER
        .get_or_init(|| {
            let (queue, jobs) = channel::<Job>();
            std::thread::Builder::new()
                .name("warden-session-spawner".into())
                .spawn(move || {
                    for mut job in jobs {
                        // The child's pipes register with the caller's runtime, as if it
                        // had spawned them itself.
                        let spawned = {
                            let _in_runtime = job.runtime.enter();
                            job.command.spawn()
                        };
                        // A caller gone meanwhile drops the child, which kills it.
                        let _ = job.reply.send(spawned);
                    }
                })
                .map(|_| queue)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| io::Error::other(format!("starting the session spawner thread: {e}")))?;
    let (reply, child) = oneshot::channel();
    queue
        .send(Job {
            command,
            runtime,
            reply,
        })
        .map_err(|_| io::Error::other("the session spawner thread is gone"))?;
    child
        .await
        .map_err(|_| io::Error::other("the session spawner thread is gone"))?
}
