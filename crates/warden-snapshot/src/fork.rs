//! A fork's read-write roots: copies of its origin's, in `<home>/snapshots/forks`, outside
//! every grant. The fork's sandbox sees each copy where its origin sees the root, and its
//! commands are transactions over the copies, so nothing a fork does reaches the real
//! folders. A copy is made as the snapshot found the roots: the calls committed to them since
//! are undone in the copy, from their pre-images (`warden_tx::Store::undo_onto`), and stay
//! committed in the roots. The copies go when the fork's session does ([`ForkRoots`] dropped),
//! or, left by a warden that stopped, when a server of that home starts or forks next.
//!
//! The copy is `cp -a`'s: contents, modes, owners, times and links as links. What a person
//! changed in a root since the snapshot by no call stays in the copy.
//!
//! A fork's changes reach the roots only through an explicit commit ([`ForkRoots::commit`]):
//! what its calls changed in the copies, applied as one call that `warden undo` can put
//! back; a path the roots changed meanwhile is a `conflict`, and nothing is applied.

use crate::SnapshotError;
use crate::roots::RootsMark;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use warden_core::owner;
use warden_core::{Policy, Tool};
use warden_tx::{ChangeSet, TxError};

/// A fork's copies of its roots, removed when dropped.
#[derive(Debug)]
pub struct ForkRoots {
    dir: PathBuf,
    /// Each root with its copy.
    copies: Vec<(PathBuf, PathBuf)>,
    /// The newest call a commit took into account (0: none yet; the copies are the fork's
    /// alone, so every call committed to them is the fork's).
    committed: Mutex<u128>,
}

impl ForkRoots {
    /// Each read-write root, with the copy the fork sees in its place.
    pub fn copies(&self) -> &[(PathBuf, PathBuf)] {
        &self.copies
    }

    /// Commits to the roots what the fork's calls changed in the copies since they were made
    /// or last committed, as call `call` of `tool`, within `limit` bytes
    /// (`warden_tx::Store::commit_fork`); one commit of a fork at a time.
    pub fn commit(
        &self,
        store: &Arc<warden_tx::Store>,
        call: &str,
        tool: &str,
        limit: u64,
    ) -> Result<ChangeSet, TxError> {
        let mut since = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        store.commit_fork(call, tool, &self.copies, &mut since, limit)
    }

    /// Whether `tool`'s read-write roots are these copies, each where its root was: a
    /// sandbox of it writes them and nothing else.
    pub fn seen_by(&self, tool: &Tool) -> bool {
        let copies: Vec<PathBuf> = self.copies.iter().map(|(_, c)| c.clone()).collect();
        crate::roots::read_write(tool) == copies
    }

    /// `policy` with its grants of the roots moved to their copies: the same grants (a
    /// read-only one too, which then reads what the fork wrote), seen at the same guest paths.
    pub fn relocate(&self, policy: &Policy) -> Policy {
        let mut moved = policy.clone();
        for grant in &mut moved.grants.fs {
            if let Some((_, copy)) = self.copies.iter().find(|(root, _)| *root == grant.host) {
                grant.host = copy.clone();
            }
        }
        moved
    }
}

impl Drop for ForkRoots {
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

/// Copies `mark`'s roots into a folder of `forks` of their own, as they stood at the mark.
pub(crate) fn copy(
    forks: &Path,
    transactions: &warden_tx::Store,
    mark: &RootsMark,
) -> Result<ForkRoots, SnapshotError> {
    crate::store::sweep(forks, "a fork's copies");
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let dir = forks.join(owner::file_name(&owner::this_process(), n));
    let io = |source| SnapshotError::Store {
        path: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    // Canonical, as a grant's host folder is.
    let dir = dir.canonicalize().map_err(io)?;
    let mut roots = ForkRoots {
        dir: dir.clone(),
        copies: Vec::new(),
        committed: Mutex::new(0),
    };
    let mut bytes = 0;
    for root in &mark.paths {
        bytes += held(root).map_err(|source| SnapshotError::Store {
            path: root.clone(),
            source,
        })?;
    }
    if bytes > crate::MAX_BYTES {
        return Err(SnapshotError::RootsTooLarge {
            bytes,
            bound: crate::MAX_BYTES,
        });
    }
    for (i, root) in mark.paths.iter().enumerate() {
        let copy = dir.join(i.to_string());
        cp(root, &copy)?;
        roots.copies.push((root.clone(), copy));
    }
    let later = crate::roots::later(transactions, mark)
        .map_err(|source| SnapshotError::Roots { undone: 0, source })?;
    for record in later {
        transactions
            .undo_onto(&record.call_id, &roots.copies)
            .map_err(|source| SnapshotError::Roots { undone: 0, source })?;
    }
    Ok(roots)
}

/// `cp -a ROOT COPY`: a copy that keeps what a transaction keeps (content, mode, links) and
/// the owner, which a docker sandbox's user is chosen by.
fn cp(root: &Path, copy: &Path) -> Result<(), SnapshotError> {
    let copied = Command::new("cp")
        .arg("-a")
        .arg("--")
        .arg(root)
        .arg(copy)
        .output();
    match copied {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(SnapshotError::Copy {
            root: root.to_owned(),
            why: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }),
        Err(e) => Err(SnapshotError::Copy {
            root: root.to_owned(),
            why: format!("`cp` did not start: {e}"),
        }),
    }
}

/// The bytes of the files below `dir`, links not followed.
fn held(dir: &Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            bytes += held(&entry.path())?;
        } else if kind.is_file() {
            bytes += entry.metadata()?.len();
        }
    }
    Ok(bytes)
}

fn remove(dir: &Path) {
    crate::store::remove_left(dir, "a fork's copies");
}
