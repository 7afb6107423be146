//! Paths beneath a root, reached without following a link anywhere on the way: every
//! operation opens the parent folder with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and
//! acts on the last name with an `*at` call that does not follow it either. A link a call
//! planted (to `/etc/shadow`, to `..`) is an entry like any other: recorded, replaced or removed
//! itself, never read or written through.

use crate::entry::{Entry, Kind};
use rustix::fs::{
    AtFlags, CWD, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Stat, linkat, mkdirat, openat,
    openat2, readlinkat, renameat_with, statat, symlinkat, unlinkat,
};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How every path below a root is resolved: beneath it, through no link, no magic link.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// A root folder, held open.
pub(crate) struct Beneath {
    dir: OwnedFd,
    path: PathBuf,
}

impl Beneath {
    /// Opens the folder `path` (itself no link).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = rustix::fs::open(path, flags, Mode::empty())?;
        Ok(Self {
            dir,
            path: path.to_owned(),
        })
    }

    /// Opens the folder `guest` as the file system rooted at `root` has it (say, a sandbox's
    /// `/proc/PID/root`): resolved inside that root, through no link, so nothing the sandbox
    /// made on the way can lead elsewhere.
    pub(crate) fn open_in(root: &Path, guest: &Path) -> io::Result<Self> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        // Followed: `root` may be a magic link of `/proc`, by design.
        let top = rustix::fs::open(root, flags, Mode::empty())?;
        let below = guest.strip_prefix("/").unwrap_or(guest);
        let resolve = ResolveFlags::IN_ROOT
            .union(ResolveFlags::NO_SYMLINKS)
            .union(ResolveFlags::NO_MAGICLINKS);
        let path = root.join(below);
        let dir = openat2(
            &top,
            below,
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
            resolve,
        )
        .map_err(|e| io::Error::from(e).with_path("opening", &path))?;
        Ok(Self { dir, path })
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The folder holding `rel`, and `rel`'s last name.
    fn parent<'a>(&self, rel: &'a Path) -> io::Result<(OwnedFd, &'a OsStr)> {
        let name = rel
            .file_name()
            .ok_or_else(|| io::Error::other(format!("{} names no entry", rel.display())))?;
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = openat2(&self.dir, parent, flags, Mode::empty(), RESOLVE).map_err(|e| {
            io::Error::from(e).with_path("reaching the folder of", &self.path.join(rel))
        })?;
        Ok((fd, name))
    }

    /// `rel`'s own status (a link's, not its target's), `None` when nothing is there (nor a
    /// folder above it: a file where its parent would be).
    pub(crate) fn lstat(&self, rel: &Path) -> io::Result<Option<Stat>> {
        let (parent, name) = match self.parent(rel) {
            Ok(found) => found,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        match statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
            Err(e) => Err(io::Error::from(e).with_path("reading", &self.path.join(rel))),
        }
    }

    /// What is at `rel`, hashed; `None` when nothing is, or something other than a file,
    /// folder or link.
    pub(crate) fn entry(&self, rel: &Path) -> io::Result<Option<Entry>> {
        let Some(stat) = self.lstat(rel)? else {
            return Ok(None);
        };
        let mode = stat.st_mode & 0o7777;
        let owner = (stat.st_uid, stat.st_gid);
        Ok(match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Some(Entry::dir(mode, owner)),
            FileType::Symlink => Some(Entry::symlink(self.read_link(rel)?, owner)),
            FileType::RegularFile => Some(Entry::file_from(mode, owner, &mut self.read(rel)?)?),
            _ => None,
        })
    }

    /// The target of the link at `rel`.
    pub(crate) fn read_link(&self, rel: &Path) -> io::Result<PathBuf> {
        let (parent, name) = self.parent(rel)?;
        let target = readlinkat(&parent, name, Vec::new())
            .map_err(|e| io::Error::from(e).with_path("reading the link", &self.path.join(rel)))?;
        Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
    }

    /// The file at `rel`, opened for reading (a link there is refused, not followed).
    pub(crate) fn read(&self, rel: &Path) -> io::Result<File> {
        let (parent, name) = self.parent(rel)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = openat(&parent, name, flags, Mode::empty())
            .map_err(|e| io::Error::from(e).with_path("opening", &self.path.join(rel)))?;
        Ok(File::from(fd))
    }

    /// Removes the file, link or empty folder at `rel`; nothing there is not an error.
    pub(crate) fn remove(&self, rel: &Path, dir: bool) -> io::Result<()> {
        let (parent, name) = match self.parent(rel) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match unlinkat(&parent, name, flags) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(io::Error::from(e).with_path("removing", &self.path.join(rel))),
        }
    }

    /// Makes the folder `rel` as `entry` says (mode, owner), or sets those of the one there.
    pub(crate) fn make_dir(&self, rel: &Path, entry: &Entry) -> io::Result<()> {
        let mode = entry.mode;
        let (parent, name) = self.parent(rel)?;
        match mkdirat(&parent, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io::Error::from(e).with_path("making", &self.path.join(rel))),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = openat(&parent, name, flags, Mode::empty())
            .map_err(|e| io::Error::from(e).with_path("opening", &self.path.join(rel)))?;
        own(&fd, entry)
            .and_then(|()| {
                // mkdir's mode went through the umask; the recorded one is exact.
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io::Error::from)
            })
            .map_err(|e| e.with_path("setting the mode of", &self.path.join(rel)))
    }

    /// Puts `entry` (a file read from `content`, or a link) at `rel` in one rename: over what
    /// is there when `replace`, else only where nothing is (`AlreadyExists` otherwise).
    pub(crate) fn put(
        &self,
        rel: &Path,
        entry: &Entry,
        content: Option<&mut dyn Read>,
        replace: bool,
    ) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        let temp = temp_name();
        match (entry.kind, content) {
            (Kind::File, Some(content)) => {
                let flags = OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                let fd = openat(&parent, &temp, flags, Mode::from_raw_mode(0o600))
                    .map_err(|e| io::Error::from(e).with_path("writing", &self.path.join(rel)))?;
                let mut file = File::from(fd);
                let written = io::copy(content, &mut file)
                    .and_then(|_| file.flush())
                    .and_then(|()| own(&file, entry))
                    .and_then(|()| {
                        // After the owner: a change of owner clears setuid and setgid.
                        rustix::fs::fchmod(&file, Mode::from_raw_mode(entry.mode))
                            .map_err(io::Error::from)
                    });
                if let Err(e) = written {
                    let _ = unlinkat(&parent, &temp, AtFlags::empty());
                    return Err(e.with_path("writing", &self.path.join(rel)));
                }
            }
            (Kind::Symlink, _) => {
                let target = entry.target.as_deref().unwrap_or(Path::new(""));
                symlinkat(target, &parent, &temp)
                    .map_err(|e| io::Error::from(e).with_path("linking", &self.path.join(rel)))?;
                let owned = rustix::fs::chownat(
                    &parent,
                    &temp,
                    Some(rustix::process::Uid::from_raw(entry.uid)),
                    Some(rustix::process::Gid::from_raw(entry.gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
                if let Err(e) = owned.filter_permission() {
                    let _ = unlinkat(&parent, &temp, AtFlags::empty());
                    return Err(io::Error::from(e).with_path("linking", &self.path.join(rel)));
                }
            }
            _ => {
                return Err(io::Error::other(format!(
                    "{}: only a file with its content or a link is put in one rename",
                    self.path.join(rel).display()
                )));
            }
        }
        let flags = if replace {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        renameat_with(&parent, &temp, &parent, name, flags).map_err(|e| {
            let _ = unlinkat(&parent, &temp, AtFlags::empty());
            io::Error::from(e).with_path("putting in place", &self.path.join(rel))
        })
    }

    /// Links the file at `rel` as `to` (a path of warden's own, on the same filesystem): a
    /// pre-image kept without a copy. `false` where a link cannot be made there (another
    /// filesystem or mount): the caller copies instead.
    pub(crate) fn link_out(&self, rel: &Path, to: &Path) -> io::Result<bool> {
        let (parent, name) = self.parent(rel)?;
        // Without AT_SYMLINK_FOLLOW: a link at `rel` would be linked itself, not its target.
        match linkat(&parent, name, CWD, to, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::XDEV | Errno::PERM | Errno::MLINK) => Ok(false),
            Err(e) => Err(io::Error::from(e).with_path("keeping", &self.path.join(rel))),
        }
    }

    /// Renames `from` (a file or link of warden's own, on the same filesystem) to `rel`, over
    /// what is there when `replace`: content put in place without a copy. `false` where a
    /// rename cannot cross (another filesystem or mount): the caller copies instead.
    pub(crate) fn move_in(&self, from: &Path, rel: &Path, replace: bool) -> io::Result<bool> {
        let (parent, name) = self.parent(rel)?;
        let flags = if replace {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        match renameat_with(CWD, from, &parent, name, flags) {
            Ok(()) => Ok(true),
            Err(Errno::XDEV) => Ok(false),
            Err(e) => Err(io::Error::from(e).with_path("putting in place", &self.path.join(rel))),
        }
    }

    /// The names in the folder `rel` (`.` for the root).
    pub(crate) fn names(&self, rel: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(self
            .listed(rel, false)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    /// The names in the folder `rel`, each with its own status (a link's, not its target's),
    /// read through the folder held open: one walk of a tree costs a read of each folder and
    /// a status call for each entry.
    pub(crate) fn stats(&self, rel: &Path) -> io::Result<Vec<(PathBuf, Stat)>> {
        let listed = self.listed(rel, true)?;
        Ok(listed
            .into_iter()
            .filter_map(|(name, stat)| Some((name, stat?)))
            .collect())
    }

    /// The folder `rel` (the root itself when empty), opened with `flags`.
    pub(crate) fn folder(&self, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let target = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let flags = flags | OFlags::DIRECTORY | OFlags::CLOEXEC;
        openat2(&self.dir, target, flags, Mode::empty(), RESOLVE)
            .map_err(|e| io::Error::from(e).with_path("opening", &self.path.join(rel)))
    }

    /// The names in the folder `rel`, sorted, with their status when `stat` (none for an
    /// entry gone meanwhile).
    fn listed(&self, rel: &Path, stat: bool) -> io::Result<Vec<(PathBuf, Option<Stat>)>> {
        let fd = self.folder(rel, OFlags::RDONLY)?;
        let mut names = Vec::new();
        let mut dir = rustix::fs::Dir::read_from(&fd)?;
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let status = match stat {
                true => match statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(s) => Some(s),
                    Err(Errno::NOENT) => None,
                    Err(e) => {
                        let at = self.path.join(rel).join(OsStr::from_bytes(name.to_bytes()));
                        return Err(io::Error::from(e).with_path("reading", &at));
                    }
                },
                false => None,
            };
            names.push((PathBuf::from(OsStr::from_bytes(name.to_bytes())), status));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(names)
    }
}

/// Gives `fd` the owner `entry` names, where this process may (as root); elsewhere what warden
/// writes is its own user's.
fn own(fd: &impl std::os::fd::AsFd, entry: &Entry) -> io::Result<()> {
    let owned = rustix::fs::fchown(
        fd,
        Some(rustix::process::Uid::from_raw(entry.uid)),
        Some(rustix::process::Gid::from_raw(entry.gid)),
    );
    owned.filter_permission().map_err(io::Error::from)
}

/// A refusal to change an owner is no error: not root, warden keeps what it writes its own.
trait FilterPermission {
    fn filter_permission(self) -> Result<(), Errno>;
}

impl FilterPermission for Result<(), Errno> {
    fn filter_permission(self) -> Result<(), Errno> {
        match self {
            Err(Errno::PERM) => Ok(()),
            other => other,
        }
    }
}

/// A short name of warden's own beside the entry being put (short whatever the entry's name:
/// a name may be as long as the filesystem allows).
fn temp_name() -> PathBuf {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(format!(".warden-tx-{}-{n}", std::process::id()))
}

/// An error that names the path it happened at.
trait WithPath {
    fn with_path(self, what: &str, path: &Path) -> io::Error;
}

impl WithPath for io::Error {
    fn with_path(self, what: &str, path: &Path) -> io::Error {
        io::Error::new(self.kind(), format!("{what} {}: {self}", path.display()))
    }
}
