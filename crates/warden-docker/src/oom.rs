//! The kernel's own word that a container's memory limit killed something. On cgroup v1 an
//! eventfd registered on the container's `memory.oom_control` (through `cgroup.event_control`,
//! as root) is signalled as the kernel picks its victim, before the victim dies: by the time
//! the command's or the container's end is seen, it has fired. The engine's OOM flag comes
//! from the same notification, read by containerd, which takes a notification whose cgroup is
//! already gone for the cgroup's removal: a container that the memory limit ended whole, and
//! that the engine cleaned up quickly (gVisor on a loaded machine), could end without the
//! flag. The kernel signals the eventfd once more when the cgroup is removed; what that leaves
//! open is said at [`OomWatch::killed`].

use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use warden_command::cgroup::Cgroup;

/// An eventfd on one container's memory cgroup.
pub(crate) struct OomWatch {
    fd: EventFd,
    /// The cgroup's folder: while it exists, no signal of its removal can have come.
    dir: PathBuf,
    /// Signals read so far.
    seen: AtomicU64,
}

/// What the signals read so far say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Killed,
    NotKilled,
    /// One signal, and the cgroup gone: a kill, or the cgroup's removal.
    Unsure,
}

impl OomWatch {
    /// A watch on `cgroup`'s memory limit; `None` where it cannot be set (cgroup v2, not root).
    pub(crate) fn on(cgroup: &Cgroup) -> Option<OomWatch> {
        let dir = cgroup.memory_v1()?;
        match Self::register(dir) {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::debug!("no OOM watch on {}: {e}", dir.display());
                None
            }
        }
    }

    fn register(dir: &Path) -> std::io::Result<OomWatch> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        // The registration holds what it needs: the file may close after it.
        let control = std::fs::File::open(dir.join("memory.oom_control"))?;
        let line = format!("{} {}", fd.as_raw_fd(), control.as_raw_fd());
        std::fs::write(dir.join("cgroup.event_control"), line)?;
        Ok(OomWatch {
            fd,
            dir: dir.to_owned(),
            seen: AtomicU64::new(0),
        })
    }

    /// Whether the memory limit has killed something since the watch was set: signals read
    /// while the cgroup's folder still exists are kills alone; once it is gone, one more may
    /// be its removal, so a single signal then is [`Verdict::Unsure`].
    pub(crate) fn killed(&self) -> Verdict {
        // Nonblocking: an error is "none since the last read".
        let read = self.fd.read().unwrap_or(0);
        let seen = self.seen.fetch_add(read, Ordering::Relaxed) + read;
        let removed = !self.dir.exists();
        match (seen, removed) {
            (0, _) => Verdict::NotKilled,
            (1, true) => Verdict::Unsure,
            _ => Verdict::Killed,
        }
    }
}
