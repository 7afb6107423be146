//! Moments on the file systems' clock, as change times (`ctime`) tell them: what a commit's
//! conflicts and a session's view count from.

use crate::TxError;
use std::fs;
use std::path::Path;

/// A moment on the file systems' clock: the change time of a folder of the store, touched.
/// An entry's change time after it is a change made later — to the clock's tick: a change in the
/// same tick is not seen, and nothing made before it is taken for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Moment(i64, u64);

impl Moment {
    /// Now, as `dir` (a folder of the store) takes it.
    pub(crate) fn now(dir: &Path) -> Result<Self, TxError> {
        use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, UTIME_NOW, stat, utimensat};
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        };
        let times = Timestamps {
            last_access: now,
            last_modification: now,
        };
        let touched = utimensat(CWD, dir, &times, AtFlags::empty()).and_then(|()| stat(dir));
        let stat = touched.map_err(|e| TxError::io("touching", dir, e.into()))?;
        Ok(Moment::of(&stat))
    }

    /// An entry's change time, from its status.
    pub(crate) fn of(stat: &rustix::fs::Stat) -> Self {
        Moment(stat.st_ctime, stat.st_ctime_nsec)
    }

    /// An entry's change time, as the standard library read it.
    pub(crate) fn of_meta(meta: &fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Moment(meta.ctime(), meta.ctime_nsec() as u64)
    }
}
