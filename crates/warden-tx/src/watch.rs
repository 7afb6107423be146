//! What changed in a session's roots between two of its commands, as the kernel tells it
//! (inotify: a watch on every folder of every root), so that bringing the session's view up
//! to the roots reads what changed rather than the status of every entry. Where the kernel
//! cannot tell — no watches to be had (the user's limits), events lost (the queue
//! overflowed), or a folder moved (the paths watched are stale) — [`Watch::changed`] answers
//! `None` and the caller walks the roots, as it does without a watch.

use crate::beneath::Beneath;
use rustix::fs::OFlags;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, Reader, WatchFlags};
use rustix::io::Errno;
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a change to a folder's entries, or to the folder itself, shows as.
const MASK: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

/// Watches on every folder of a session's roots.
#[derive(Debug)]
pub(crate) struct Watch {
    fd: OwnedFd,
    /// Each watched folder, by its watch: its root's number and its path below it.
    folders: HashMap<i32, (usize, PathBuf)>,
}

/// What changed, as the events named it: root number and path.
#[derive(Debug, Default)]
pub(crate) struct Changed {
    /// Paths whose entry may have changed, been made or removed (parents before children).
    pub paths: BTreeSet<(usize, PathBuf)>,
    /// Folders made since: everything below them is new too (made, perhaps, before their
    /// own watch was).
    pub folders: Vec<(usize, PathBuf)>,
}

impl Watch {
    /// Watches every folder of `roots`; `None` where the kernel will not.
    pub(crate) fn new(roots: &[Beneath]) -> Option<Self> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
        let mut watch = Watch {
            fd,
            folders: HashMap::new(),
        };
        for (i, root) in roots.iter().enumerate() {
            watch.add_tree(root, i, Path::new("")).ok()?;
        }
        Some(watch)
    }

    /// Watches the folder `rel` of `root` (root number `i`) and every folder below it.
    fn add_tree(&mut self, root: &Beneath, i: usize, rel: &Path) -> io::Result<()> {
        // Through a descriptor opened beneath the root: no link on the way is followed.
        let folder = root.folder(rel, OFlags::PATH)?;
        let at = format!("/proc/self/fd/{}", folder.as_raw_fd());
        let wd = inotify::add_watch(&self.fd, at.as_str(), MASK)?;
        self.folders.insert(wd, (i, rel.to_owned()));
        for (name, stat) in root.stats(rel)? {
            if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
            {
                self.add_tree(root, i, &rel.join(name))?;
            }
        }
        Ok(())
    }

    /// What changed since this was last asked; `None` when the kernel could not tell. New
    /// folders are watched from here on.
    pub(crate) fn changed(&mut self, roots: &[Beneath]) -> Option<Changed> {
        let mut changed = Changed::default();
        let mut buf = [MaybeUninit::uninit(); 16 * 1024];
        let mut reader = Reader::new(&self.fd, &mut buf);
        let mut gone = Vec::new();
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(Errno::AGAIN) => break,
                Err(_) => return None,
            };
            let flags = event.events();
            // A folder moved: what is watched below it has other paths now.
            let moved_folder = flags.contains(ReadFlags::ISDIR)
                && flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO);
            if flags.intersects(ReadFlags::QUEUE_OVERFLOW | ReadFlags::MOVE_SELF) || moved_folder {
                return None;
            }
            if flags.contains(ReadFlags::IGNORED) {
                gone.push(event.wd());
                continue;
            }
            let Some((i, folder)) = self.folders.get(&event.wd()) else {
                continue;
            };
            let path = match event.file_name() {
                Some(name) => folder.join(OsStr::from_bytes(name.to_bytes())),
                None => folder.clone(),
            };
            if flags.contains(ReadFlags::ISDIR | ReadFlags::CREATE) {
                changed.folders.push((*i, path.clone()));
            }
            changed.paths.insert((*i, path));
        }
        for wd in gone {
            self.folders.remove(&wd);
        }
        for (i, folder) in &changed.folders {
            // Gone again already is no matter: it is no longer there to bring.
            match self.add_tree(&roots[*i], *i, folder) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(_) => return None,
            }
        }
        Some(changed)
    }
}
