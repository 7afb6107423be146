//! A local container's first process, held by a pidfd from its start. It is its PID
//! namespace's init: once it has ended, the kernel has killed every other process of the
//! container and closed their files, so nothing of the container writes any more — which
//! the engine would confirm only after its own events (tens of milliseconds).

use std::os::fd::OwnedFd;
use std::sync::Arc;

/// How long the init of a killed container may take to end.
const END_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A container's init, by pidfd.
pub(crate) struct Init(Arc<OwnedFd>);

impl Init {
    /// The process `pid` of this machine, if it still runs.
    pub(crate) fn of(pid: i64) -> Option<Init> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
        Some(Init(Arc::new(fd)))
    }

    /// Kills it, and so every process of the container, and waits until it has ended: true
    /// when it has.
    pub(crate) async fn end(&self) -> bool {
        match rustix::process::pidfd_send_signal(&*self.0, rustix::process::Signal::KILL) {
            // ESRCH: it has ended already (a pidfd is readable then too).
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => {
                tracing::warn!("cannot kill a container's init: {e}");
                return false;
            }
        }
        let fd = self.0.clone();
        let ended = tokio::task::spawn_blocking(move || {
            use rustix::event::{PollFd, PollFlags, Timespec, poll};
            let mut fds = [PollFd::new(&*fd, PollFlags::IN)];
            let wait = Timespec {
                tv_sec: END_WAIT.as_secs() as _,
                tv_nsec: 0,
            };
            // Readable once it has ended, and for good.
            matches!(poll(&mut fds, Some(&wait)), Ok(1))
        });
        ended.await.unwrap_or(false)
    }
}
