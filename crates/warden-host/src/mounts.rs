//! The sandbox's own root, made by `init` in its mount namespace and entered before the
//! command starts: the host's system folders as they are, the call's own tmpfs at `/tmp`,
//! with credentials a tmpfs at [`TRUST_MOUNT`], and each granted root at its guest path
//! ([`crate::layout`]). The host's `/tmp`, homes and everything else are not in it.
//!
//! Each root is a copy of its mounts, detached from every tree: when warden is root the helper
//! copies them before `init` starts, as root, who passes through any folder, so a root below a
//! 0700 home works without widening the home (a descriptor of the host's tree cannot be
//! bind-mounted in another mount namespace; a detached copy can be moved into one). A read-only
//! root's copy is read-only, so that no broader Landlock rule (the private `/tmp`'s) can write
//! into a root below `/tmp`.

use crate::failure::{Failure, setup};
use crate::layout::{STASH, SYSTEM_FOLDERS, TMP, system_folder, viewed};
use crate::plan::{Root, Sandbox, TRUST_MOUNT, ViewLayer};
use nix::errno::Errno;
use nix::libc;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The roots' copies, each with its guest path, outer ones first, and what a session with
/// views keeps in its stash, each with its path there: what [`enter`] mounts.
pub(crate) struct Detached {
    roots: Vec<(PathBuf, OwnedFd)>,
    stash: Vec<(PathBuf, OwnedFd)>,
}

/// Copies the mounts of every root `sandbox` mounts (not those seen through a system folder),
/// as this process's user may reach them; a root with a view is an overlay of it instead.
/// `in_user_namespace`: this process is root only in a user namespace of its own, where an
/// overlay keeps its marks in `user.` extended attributes; then, with a stash, a read-only
/// copy of each viewed root and a copy of the views folder too (where warden is root, a
/// shell beside the session's makes its views from the host's folders instead).
pub(crate) fn detach(sandbox: &Sandbox, in_user_namespace: bool) -> Result<Detached, Failure> {
    let mut roots = Vec::new();
    for root in sandbox
        .roots
        .iter()
        .filter(|r| system_folder(&r.guest).is_none())
    {
        let copy = match &root.view {
            Some(layer) => overlay(&root.host, layer, in_user_namespace)
                .map_err(|e| failed(&root.host, "making the call's view of", e))?,
            None => {
                open_tree(&root.host).map_err(|e| failed(&root.host, "copying the mounts of", e))?
            }
        };
        set_attributes(&copy, &attributes(root.writable))
            .map_err(|e| failed(&root.host, "setting the mount of", e))?;
        roots.push((root.guest.clone(), copy));
    }
    roots.sort_by_key(|(guest, _)| guest.components().count());
    let mut stash = Vec::new();
    if let Some(views) = sandbox.stash.as_ref().filter(|_| in_user_namespace) {
        // Each viewed root read-only (the views of shells beside write elsewhere), in order.
        let viewed = sandbox.roots.iter().filter(|r| viewed(r));
        let mut kept: Vec<(String, &Path, bool)> = viewed
            .enumerate()
            .map(|(n, root)| (stashed_root(n), root.host.as_path(), false))
            .collect();
        kept.push((STASHED_VIEWS.to_owned(), views, true));
        for (at, host, writable) in kept {
            let copy = open_tree(host).map_err(|e| failed(host, "copying the mounts of", e))?;
            set_attributes(&copy, &attributes(writable))
                .map_err(|e| failed(host, "setting the mount of", e))?;
            stash.push((PathBuf::from(at), copy));
        }
    }
    Ok(Detached { roots, stash })
}

/// Where the stash ([`STASH`]) keeps warden's views folder.
const STASHED_VIEWS: &str = "views";

/// Where the stash keeps viewed root number `n`.
fn stashed_root(n: usize) -> String {
    format!("roots/{n}")
}

/// Why a copy of `host` failed, for the model.
fn failed(host: &Path, what: &str, e: Errno) -> Failure {
    let message = format!("{what} the root {}: {e}", host.display());
    if e == Errno::ENOSYS {
        Failure::unavailable(format!(
            "{message} (this kernel lacks the mount API warden uses: Linux 5.12 or later)"
        ))
    } else {
        setup(message)
    }
}

/// A copy's mount: private, and read-only unless `writable`.
fn attributes(writable: bool) -> libc::mount_attr {
    libc::mount_attr {
        attr_set: if writable { 0 } else { libc::MOUNT_ATTR_RDONLY },
        attr_clr: 0,
        propagation: MsFlags::MS_PRIVATE.bits(),
        userns_fd: 0,
    }
}

/// Makes the sandbox's root and enters it: this process's mount namespace changes, and
/// the working directory is `/`. `user`: when warden is root, the command's user, as whom
/// the root's folders are made (the only one mapped: a file of an unmapped owner cannot be
/// made).
pub(crate) fn enter(
    sandbox: &Sandbox,
    roots: Detached,
    user: Option<(Uid, Gid)>,
) -> Result<(), Failure> {
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    mount(None::<&str>, "/", None::<&str>, private, None::<&str>)
        .map_err(|e| setup(format!("making the mounts private: {e}")))?;
    if let Some((uid, gid)) = user {
        nix::unistd::setfsgid(gid);
        nix::unistd::setfsuid(uid);
    }
    // Made where the host's /tmp was (every system has one), then made the root: the host's
    // /tmp goes with the rest of the old root.
    let new = Path::new(TMP);
    tmpfs(new, "size=1m,mode=0755", MsFlags::empty())?;
    for folder in SYSTEM_FOLDERS {
        share(folder, new)?;
    }
    let tmp = new.join("tmp");
    make_dir(&tmp)?;
    tmpfs(
        &tmp,
        &format!("size={},mode=1777", sandbox.tmp),
        MsFlags::empty(),
    )?;
    if sandbox.trust {
        // Its user's: the bundle is written as that user, before confinement.
        let run = inside(new, Path::new(TRUST_MOUNT));
        make_dir(&run)?;
        let options = format!(
            "size={TRUST_SIZE},mode=0755,uid={},gid={}",
            sandbox.uid, sandbox.gid
        );
        tmpfs(&run, &options, MsFlags::MS_NOEXEC)?;
    }
    for (guest, copy) in roots.roots {
        let at = inside(new, &guest);
        make_dir(&at)?;
        move_mount(&copy, &at)
            .map_err(|e| setup(format!("mounting a root at {}: {e}", guest.display())))?;
    }
    if !roots.stash.is_empty() {
        let stash = inside(new, Path::new(STASH));
        for (at, copy) in roots.stash {
            let at = stash.join(at);
            make_dir(&at)?;
            move_mount(&copy, &at)
                .map_err(|e| setup(format!("keeping {} for shells beside: {e}", at.display())))?;
        }
        // The cover: read-only, empty, and no one's to enter.
        tmpfs(&stash, "size=4k,mode=0", MsFlags::MS_RDONLY)?;
    }
    let failed = |what: &str, e: Errno| setup(format!("entering the sandbox's root ({what}): {e}"));
    nix::unistd::chdir(new).map_err(|e| failed("chdir", e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| failed("pivot_root", e))?;
    // The old root is stacked below the new one at `/`: gone from this namespace.
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| failed("detaching the host's root", e))?;
    nix::unistd::chdir("/").map_err(|e| failed("chdir", e))?;
    // Its folders are only where the rest is mounted: no one changes them.
    let read_only = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV;
    mount(None::<&str>, "/", None::<&str>, read_only, None::<&str>)
        .map_err(|e| failed("making it read-only", e))
}

/// A shell beside a session's own view of each viewed root of `sandbox`: an overlay of the
/// root as `lower` names it (by its number and itself) whose writes land in `view`'s folders
/// below `views`, with the guest path it is seen at.
fn overlays_beside(
    sandbox: &Sandbox,
    view: &[ViewLayer],
    lower: impl Fn(usize, &Root) -> PathBuf,
    views: &Path,
    in_user_namespace: bool,
) -> Result<Vec<(PathBuf, OwnedFd)>, Failure> {
    let roots: Vec<&Root> = sandbox.roots.iter().filter(|r| viewed(r)).collect();
    if roots.len() != view.len() {
        return Err(setup(format!(
            "a view of {} roots for a shell beside a session that views {}",
            view.len(),
            roots.len()
        )));
    }
    let mut made = Vec::new();
    for (n, (root, layer)) in roots.into_iter().zip(view).enumerate() {
        let layer = ViewLayer {
            upper: views.join(&layer.upper),
            work: views.join(&layer.work),
        };
        let failed = |what: &str, e| beside(format!("{what} of {}", root.guest.display()), e);
        let copy =
            overlay(&lower(n, root), &layer, in_user_namespace).map_err(|e| failed("a view", e))?;
        set_attributes(&copy, &attributes(true)).map_err(|e| failed("setting the view", e))?;
        made.push((root.guest.clone(), copy));
    }
    Ok(made)
}

/// Why a view of its own for a shell beside a session's failed.
fn beside(what: String, e: Errno) -> Failure {
    setup(format!(
        "a view of its own for a shell beside the session's ({what}): {e}"
    ))
}

/// The views of a shell beside a session's, made by the helper as root before it joins the
/// session, of the roots and warden's views folder (the plan's `stash`) as the host has them,
/// which the session's namespaces do not show: [`view_beside`] mounts them.
pub(crate) fn views_ahead(
    sandbox: &Sandbox,
    view: &[ViewLayer],
) -> Result<Vec<(PathBuf, OwnedFd)>, Failure> {
    let views = sandbox
        .stash
        .as_deref()
        .ok_or_else(|| setup("a view beside a session without warden's views folder"))?;
    overlays_beside(sandbox, view, |_, root| root.host.clone(), views, false)
}

/// For a shell beside a session's, its namespaces joined and its root entered: in a mount
/// namespace of its own, each viewed root of `sandbox` is seen through a view of its own,
/// `made` ahead ([`views_ahead`]) or else made here from the session's stash (an overlay of
/// the stash's copy of the root, whose writes land in `view`'s folders in the stash's views
/// folder), after which the stash leaves this namespace, where the command runs. A root seen
/// inside a viewed one keeps the session's mount of it (copied before the view covers it),
/// or its own view where it is viewed too: outer mounts go first.
pub(crate) fn view_beside(
    sandbox: &Sandbox,
    view: &[ViewLayer],
    made: Option<Vec<(PathBuf, OwnedFd)>>,
) -> Result<(), Failure> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| beside("a mount namespace".into(), e))?;
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    mount(None::<&str>, "/", None::<&str>, private, None::<&str>)
        .map_err(|e| beside("making the mounts private".into(), e))?;
    let inner = inside_views(sandbox)?;
    let made = match made {
        Some(made) => made,
        None => {
            let stash = Path::new(STASH);
            umount2(stash, MntFlags::MNT_DETACH)
                .map_err(|e| beside("uncovering its stash".into(), e))?;
            let lower = |n: usize, _: &Root| stash.join(stashed_root(n));
            let views = stash.join(STASHED_VIEWS);
            let made = overlays_beside(sandbox, view, lower, &views, true)?;
            let kept = (0..made.len()).map(|n| stash.join(stashed_root(n)));
            for path in kept.chain([views]) {
                umount2(&path, MntFlags::MNT_DETACH)
                    .map_err(|e| beside(format!("leaving {}", path.display()), e))?;
            }
            made
        }
    };
    let mut mounts: Vec<(PathBuf, OwnedFd)> = made.into_iter().chain(inner).collect();
    mounts.sort_by_key(|(guest, _)| guest.components().count());
    for (guest, copy) in mounts {
        move_mount(&copy, &guest)
            .map_err(|e| beside(format!("mounting at {}", guest.display()), e))?;
    }
    Ok(())
}

/// Copies of the session's mounts of the roots `sandbox` mounts inside a viewed root and does
/// not view itself (a read-only root inside a read-write one), each with its guest path.
fn inside_views(sandbox: &Sandbox) -> Result<Vec<(PathBuf, OwnedFd)>, Failure> {
    let views: Vec<&Path> = sandbox
        .roots
        .iter()
        .filter(|r| viewed(r))
        .map(|r| r.guest.as_path())
        .collect();
    let inside = |r: &&Root| {
        views
            .iter()
            .any(|v| r.guest != *v && r.guest.starts_with(v))
    };
    sandbox
        .roots
        .iter()
        .filter(|r| !viewed(r) && system_folder(&r.guest).is_none())
        .filter(inside)
        .map(|r| {
            let copy = open_tree(&r.guest)
                .map_err(|e| beside(format!("copying the mount at {}", r.guest.display()), e))?;
            Ok((r.guest.clone(), copy))
        })
        .collect()
}

/// Bytes of the tmpfs at [`TRUST_MOUNT`]: a bundle of this machine's roots and the sandbox's CA
/// is a few hundred KiB.
const TRUST_SIZE: u64 = 4 << 20;

/// `path` (absolute) inside the new root at `new`.
fn inside(new: &Path, path: &Path) -> PathBuf {
    new.join(path.strip_prefix("/").unwrap_or(path))
}

fn make_dir(path: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|e| setup(format!("making {}: {e}", path.display())))
}

fn tmpfs(at: &Path, options: &str, extra: MsFlags) -> Result<(), Failure> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | extra;
    mount(Some("tmpfs"), at, Some("tmpfs"), flags, Some(options))
        .map_err(|e| setup(format!("mounting a tmpfs at {}: {e}", at.display())))
}

/// The host's `folder` in the new root at `new`, as it is: a link stays a link, a folder is
/// bound with every mount below it; a folder this system lacks is left out.
fn share(folder: &str, new: &Path) -> Result<(), Failure> {
    let failed = |e: std::io::Error| setup(format!("sharing {folder}: {e}"));
    let Ok(meta) = std::fs::symlink_metadata(folder) else {
        return Ok(());
    };
    let at = inside(new, Path::new(folder));
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(folder).map_err(failed)?;
        return std::os::unix::fs::symlink(target, &at).map_err(failed);
    }
    make_dir(&at)?;
    let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
    mount(Some(folder), &at, None::<&str>, bind, None::<&str>)
        .map_err(|e| setup(format!("sharing {folder}: {e}")))
}

fn c_path(path: &Path) -> Result<CString, Errno> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
}

/// A detached copy of the mounts at `path` and below (`open_tree(2)`).
fn open_tree(path: &Path) -> Result<OwnedFd, Errno> {
    let path = c_path(path)?;
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as u32;
    // SAFETY: a NUL-terminated path; the kernel answers a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the descriptor is new and ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A detached overlay of `lower` whose writes land in `layer` (`warden_tx::mount`).
pub(crate) fn overlay(
    lower: &Path,
    layer: &ViewLayer,
    in_user_namespace: bool,
) -> Result<OwnedFd, Errno> {
    warden_tx::mount::overlay(lower, &layer.upper, &layer.work, in_user_namespace).map_err(errno)
}

/// Sets `attr` on every mount of the detached copy `copy` (`mount_setattr(2)`).
fn set_attributes(copy: &OwnedFd, attr: &libc::mount_attr) -> Result<(), Errno> {
    let flags = libc::AT_EMPTY_PATH | libc::AT_RECURSIVE;
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor; `attr` is of its size.
    let done = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            copy.as_raw_fd(),
            c"".as_ptr(),
            flags,
            std::ptr::from_ref(attr),
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if done < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// Mounts the detached copy `copy` at `at` (`warden_tx::mount`).
fn move_mount(copy: &OwnedFd, at: &Path) -> Result<(), Errno> {
    warden_tx::mount::move_mount(copy, &c_path(at)?).map_err(errno)
}

/// An error of the mount API as its errno.
fn errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}
