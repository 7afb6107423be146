//! Removing what a transaction is done with — a view once committed or discarded, pre-images
//! past the store's bounds — off the call's path. Freeing a folder's blocks can wait for the
//! disk (on a filesystem mounted with `discard`, each freed block is a synchronous discard: a
//! millisecond or more a call where this was measured). So a tree is renamed into the store's
//! `trash` folder, which takes it out of its place at once, and removed there by a thread of
//! the process's own. What a process leaves in the trash (it ended first) the next
//! [`crate::Store`] to open the home removes.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, PoisonError};

/// The trash of one store: its folder, and the thread that empties it, started at its first
/// use.
#[derive(Debug)]
pub(crate) struct Trash {
    dir: PathBuf,
    /// Names trees apart from other processes' in the same trash.
    owner: String,
    remover: Mutex<Option<Sender<PathBuf>>>,
}

impl Trash {
    pub(crate) fn new(dir: PathBuf, owner: &str) -> Self {
        Self {
            dir,
            owner: owner.to_owned(),
            remover: Mutex::new(None),
        }
    }

    /// Takes the tree `path` away: out of its place now, removed soon. Where it cannot be
    /// renamed into the trash (it is gone, or on another filesystem), it is removed here.
    pub(crate) fn discard(&self, path: &Path) {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let to = self.dir.join(warden_core::owner::file_name(&self.owner, n));
        match fs::rename(path, &to) {
            Ok(()) => self.remove_later(to),
            Err(_) => remove_tree(path),
        }
    }

    /// Removes, by the trash's thread, what the trash holds: trees of processes that ended
    /// before their own thread removed them.
    pub(crate) fn empty(&self) {
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            self.remove_later(entry.path());
        }
    }

    /// Has the trash's thread remove `tree` (started now if it is not running), or removes it
    /// here when no thread can be started.
    fn remove_later(&self, tree: PathBuf) {
        let mut remover = self.remover.lock().unwrap_or_else(PoisonError::into_inner);
        let tree = match remover.as_ref() {
            Some(sender) => match sender.send(tree) {
                Ok(()) => return,
                Err(unsent) => unsent.0,
            },
            None => tree,
        };
        match start_remover() {
            Some(sender) => match sender.send(tree) {
                Ok(()) => *remover = Some(sender),
                Err(unsent) => remove_tree(&unsent.0),
            },
            None => remove_tree(&tree),
        }
    }
}

/// A thread that removes each tree it is sent, until the process ends.
fn start_remover() -> Option<Sender<PathBuf>> {
    let (sender, trees) = channel::<PathBuf>();
    std::thread::Builder::new()
        .name("warden-tx-trash".into())
        .spawn(move || {
            for tree in trees {
                remove_tree(&tree);
            }
        })
        .ok()?;
    Some(sender)
}

/// Removes `dir` and everything in it, making each folder readable first: an overlay's work
/// folder is left without permissions.
pub(crate) fn remove_tree(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if fs::remove_dir_all(dir).is_ok() {
        return;
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path());
        }
    }
    let _ = fs::remove_dir_all(dir);
}
