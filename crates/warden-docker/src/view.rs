//! A per-call container's read-write roots as a transaction (see `warden_tx`): instead of a
//! bind of the folder, the container mounts an overlay that the engine makes from it, whose
//! upper layer is the call's view in warden's home. The overlay is an anonymous `local`
//! volume, so it goes with the container: once the container is removed (every process of
//! the call killed), what the view holds is final, and the call's answer commits it or
//! drops it. A session's container mounts its view the same way, settled command by command
//! (`warden_tx::SessionView`).
//!
//! warden reads and moves what the container's user wrote, so a tool's calls are
//! transactions only where warden can: it runs as root, or its containers run as warden's own
//! user. Elsewhere they write in place, and `[review] changes = true` is refused at load.
//!
//! An engine that gets the roots copied in (one elsewhere) mounts nothing of warden's: a
//! per-call container's view holds what its copies changed, read back while it still runs
//! and staged by warden itself (as whoever warden is), so its calls are transactions
//! wherever warden keeps a store. A session's copies are written back when its container
//! goes.

use crate::files::Copied;
use crate::plan::Plan;
use bollard::models::{Mount, MountType};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_tx::{Store, View};

/// Why a tool's calls (and programs, and a session's commands) cannot be transactions in a
/// container, if they cannot: `None` when they are (its roots mounted, by a user warden can
/// act as, or copied in).
pub(crate) fn in_place(plan: &Plan, store: bool) -> Option<&'static str> {
    if !store {
        Some(warden_tx::settle::NO_STORE)
    } else if plan.copied.is_none() && !acts_as(plan.user.uid) {
        Some(
            "the container's user is neither warden's own nor is warden root, so warden could \
             not read or move what its calls write: run the tool as warden's user (`user` in \
             [executor]), warden as root, or have its roots copied in and read back \
             (`files = \"copy\"` and `copy_back = true` in [executor])",
        )
    } else {
        None
    }
}

/// True when a session's container can have a view: its roots are mounted, and warden
/// reaches what its processes see, to write a discard or a sync: its processes are this
/// machine's (runc: through its shell's `/proc/PID/root`), or it runs under gVisor, whose
/// file server serves the engine's mounts (through those). With its roots copied in, its
/// commands are settled from the copies instead (`crate::files`).
pub(crate) fn session_viewed(plan: &Plan) -> bool {
    plan.copied.is_none() && (plan.gvisor || plan.runtime.as_deref().is_none_or(|r| r == "runc"))
}

/// True when warden may read and move files that `uid` makes.
fn acts_as(uid: u32) -> bool {
    let me = nix::unistd::geteuid();
    me.is_root() || me.as_raw() == uid
}

/// A view for the read-write folders `mounts` bind, each bind replaced by its overlay, with
/// where the container sees each; `None` when none is read-write.
pub(crate) fn viewed(
    store: &Arc<Store>,
    mounts: &mut [Mount],
) -> Result<Option<(View, Vec<PathBuf>)>, warden_tx::TxError> {
    let writable: Vec<usize> = (0..mounts.len())
        .filter(|&i| {
            let m = &mounts[i];
            m.typ == Some(MountType::BIND)
                && m.read_only != Some(true)
                && m.source.as_deref().is_some_and(|s| Path::new(s).is_dir())
        })
        .collect();
    if writable.is_empty() {
        return Ok(None);
    }
    let roots: Vec<PathBuf> = writable
        .iter()
        .filter_map(|&i| mounts[i].source.as_deref().map(PathBuf::from))
        .collect();
    let view = store.view(&roots)?;
    let mut guests = Vec::new();
    for (n, &i) in writable.iter().enumerate() {
        let layer = view.layer(n);
        let target = mounts[i].target.clone().unwrap_or_default();
        guests.push(PathBuf::from(&target));
        mounts[i] = overlay(&roots[n], &layer.upper, &layer.work, target);
    }
    Ok(Some((view, guests)))
}

/// A view of the read-write roots `copied` copies in, with where the container sees each;
/// `None` when none is read-write. Its changes are staged from the copies read back.
pub(crate) fn of_copies(
    store: &Arc<Store>,
    copied: &Copied,
) -> Result<Option<(View, Vec<PathBuf>)>, warden_tx::TxError> {
    let (roots, guests): (Vec<PathBuf>, Vec<PathBuf>) = copied
        .roots
        .iter()
        .filter(|r| r.write_back)
        .map(|r| (r.host.clone(), PathBuf::from(&r.guest)))
        .unzip();
    if roots.is_empty() {
        return Ok(None);
    }
    Ok(Some((store.view(&roots)?, guests)))
}

/// An anonymous volume the engine mounts as an overlay of `lower`, its writes in `upper`.
/// `userxattr`: the overlay marks an opaque folder with a `user.` attribute, which warden can
/// read without privileges; `volatile`: a view that is dropped need not reach the disk.
fn overlay(lower: &Path, upper: &Path, work: &Path, target: String) -> Mount {
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr,volatile",
        escaped(lower),
        escaped(upper),
        escaped(work)
    );
    crate::volume::local_volume(target, "overlay", options)
}

/// `path` as an overlay option's value: its separators (`,` between options, `:` between
/// lower layers) and the escape itself are escaped.
fn escaped(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '\\' | ',' | ':') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_option_cannot_be_split_by_a_path() {
        assert_eq!(escaped(Path::new("/a,b:c\\d")), "/a\\,b\\:c\\\\d");
    }
}
