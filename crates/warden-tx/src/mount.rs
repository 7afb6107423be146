//! A view's overlay as a detached mount (Linux's mount API), for an executor that mounts it
//! where its sandbox sees the root: made here, then moved into the sandbox's mount namespace.

use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, fsconfig_create, fsconfig_set_flag,
    fsconfig_set_string, fsmount, fsopen,
};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// A detached overlay of `lower` whose writes land in `upper` (`fsopen(2)`, `fsmount(2)`),
/// with `work` its work folder. `userxattr`: made in a user namespace, where the overlay
/// marks an opaque folder with a `user.` attribute.
pub fn overlay(lower: &Path, upper: &Path, work: &Path, userxattr: bool) -> io::Result<OwnedFd> {
    let fs = fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)?;
    // `lowerdir+` (Linux 6.8) takes the path as it is; the older `lowerdir` splits at `:`.
    if fsconfig_set_string(&fs, "lowerdir+", lower).is_err() {
        let escaped = lower
            .to_string_lossy()
            .replace('\\', "\\\\")
            .replace(':', "\\:");
        fsconfig_set_string(&fs, "lowerdir", escaped)?;
    }
    fsconfig_set_string(&fs, "upperdir", upper)?;
    fsconfig_set_string(&fs, "workdir", work)?;
    if userxattr {
        fsconfig_set_flag(&fs, "userxattr")?;
    }
    // Without it, the overlay's end syncs the whole filesystem of the upper layer and waits
    // for the disk (~5 ms a call here). A view lives for one call and is never mounted again;
    // what it commits warden copies out itself. Linux 5.10 and later.
    let _ = fsconfig_set_flag(&fs, "volatile");
    fsconfig_create(&fs)?;
    Ok(fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::empty(),
    )?)
}

/// Mounts the detached mount `detached` at `at` (`move_mount(2)`), in this process's mount
/// namespace. Allocates nothing: it may run between a fork and an exec.
pub fn move_mount(detached: impl AsFd, at: &CStr) -> io::Result<()> {
    Ok(rustix::mount::move_mount(
        detached,
        c"",
        rustix::fs::CWD,
        at,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?)
}
