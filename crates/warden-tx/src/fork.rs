//! A fork's changes, committed to the roots it copied. A fork's sandbox writes copies of its
//! origin's read-write roots, each of its commands a transaction over the copies; a commit
//! applies to the roots what those transactions changed since the copies were made (or last
//! committed), as one call of its own: pre-images kept, journalled, undoable. Each changed
//! entry is read beneath its copy without following a link, and staged in a view of the
//! roots before it is applied, since the fork's processes may still run. A path the roots
//! changed meanwhile (what they hold differs from what the fork started from there) is a
//! [`TxError::Conflict`], and nothing is applied.

use crate::TxError;
use crate::beneath::Beneath;
use crate::changes::{Change, in_order};
use crate::entry::{Entry, Kind};
use crate::record::{CallRecord, State};
use crate::store::{ChangeSet, Store};
use rustix::fs::FileType;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Store {
    /// Commits to the roots, as call `call` of `tool`, what the calls committed to their
    /// `copies` (each root with its copy) after `since_ns` changed there, and moves
    /// `since_ns` past those calls; answers the change set applied (empty: nothing to
    /// commit). `limit`: the bytes the changes and what they replace may hold
    /// ([`TxError::TooLarge`] past it).
    pub fn commit_fork(
        self: &Arc<Self>,
        call: &str,
        tool: &str,
        copies: &[(PathBuf, PathBuf)],
        since_ns: &mut u128,
        limit: u64,
    ) -> Result<ChangeSet, TxError> {
        let records = self.records()?;
        let through = records.iter().map(|r| r.committed_ns).max().unwrap_or(0);
        let starts = started_from(&records, copies, *since_ns);
        let open = |path: &Path| Beneath::open(path).map_err(|e| TxError::io("opening", path, e));
        let roots: Vec<Beneath> = copies
            .iter()
            .map(|(r, _)| open(r))
            .collect::<Result<_, _>>()?;
        let forks: Vec<Beneath> = copies
            .iter()
            .map(|(_, c)| open(c))
            .collect::<Result<_, _>>()?;
        let (mut changes, mut clashes) = (Vec::new(), Vec::new());
        for ((root, path), base) in starts {
            let now = entry_at(&forks[root], &path)?;
            if same(&now, &base) {
                continue;
            }
            let there = entry_at(&roots[root], &path)?;
            if !same(&there, &base) {
                clashes.push(roots[root].path().join(&path));
                continue;
            }
            changes.push(Change {
                root,
                path,
                before: there,
                after: now,
            });
        }
        if !clashes.is_empty() {
            return Err(TxError::Conflict {
                call: None,
                paths: clashes,
            });
        }
        let roots_paths: Vec<PathBuf> = copies.iter().map(|(r, _)| r.clone()).collect();
        if changes.is_empty() {
            *since_ns = through.max(*since_ns);
            return Ok(ChangeSet {
                roots: roots_paths,
                changes,
            });
        }
        let view = self.view(&roots_paths)?;
        for change in changes.iter_mut().filter(|c| c.after.is_some()) {
            let upper = view.layer(change.root).upper;
            change.after = stage(&forks[change.root], &change.path, &upper)?;
        }
        // What the fork removed meanwhile is applied as it was staged.
        changes.retain(|c| c.before.is_some() || c.after.is_some());
        let changes = ChangeSet {
            roots: roots_paths,
            changes: in_order(changes),
        };
        view.commit(call, tool, &changes, limit)?;
        *since_ns = through.max(*since_ns);
        Ok(changes)
    }
}

/// For each path the calls committed to the copies after `since_ns` changed, what it held
/// before the first of them: what the fork started from there. Keyed by the root's number
/// in `copies` and the path below it.
fn started_from(
    records: &[CallRecord],
    copies: &[(PathBuf, PathBuf)],
    since_ns: u128,
) -> BTreeMap<(usize, PathBuf), Option<Entry>> {
    let mut starts = BTreeMap::new();
    // Oldest first (as the store reads them): the first record of a path holds its start.
    for record in records {
        if record.committed_ns <= since_ns || record.state == State::Committing {
            continue;
        }
        for step in &record.steps {
            let copy = &record.roots[step.change.root];
            if let Some(root) = copies.iter().position(|(_, c)| c == copy) {
                starts
                    .entry((root, step.change.path.clone()))
                    .or_insert_with(|| step.change.before.clone());
            }
        }
    }
    starts
}

/// What is at `rel` beneath `b`; None where nothing is, or where a folder above it is none
/// (a link the fork put in its place: never followed).
pub(crate) fn entry_at(b: &Beneath, rel: &Path) -> Result<Option<Entry>, TxError> {
    let io = |at: &Path, e| TxError::io("reading", &b.path().join(at), e);
    let mut above: Vec<&Path> = rel
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    above.reverse();
    for dir in above {
        let stat = b.lstat(dir).map_err(|e| io(dir, e))?;
        if !stat.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory) {
            return Ok(None);
        }
    }
    b.entry(rel).map_err(|e| io(rel, e))
}

/// Whether two entries hold the same: kind, mode, content and target (a copy made by a
/// warden that is not root may own what the root's user owns).
fn same(a: &Option<Entry>, b: &Option<Entry>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            (a.kind, a.mode, &a.sha256, &a.target) == (b.kind, b.mode, &b.sha256, &b.target)
        }
        (None, None) => true,
        _ => false,
    }
}

/// Copies the entry at `rel` beneath `fork` into `upper` (warden's own folder) at the same
/// path, its parents made as plain folders: answers what was staged, or None when nothing is
/// there now (the fork removed it meanwhile).
fn stage(fork: &Beneath, rel: &Path, upper: &Path) -> Result<Option<Entry>, TxError> {
    let io = |what, e: io::Error| TxError::io(what, &fork.path().join(rel), e);
    let Some(entry) = entry_at(fork, rel)? else {
        return Ok(None);
    };
    if entry.kind == Kind::Dir {
        return Ok(Some(entry));
    }
    let to = upper.join(rel);
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| TxError::io("making", parent, e))?;
    }
    let staged = Beneath::open(upper).map_err(|e| TxError::io("opening", upper, e))?;
    // A link is put as its entry names its target; a file's bytes are read beneath the fork.
    let mut content = match entry.kind {
        Kind::File => Some(fork.read(rel).map_err(|e| io("reading", e))?),
        _ => None,
    };
    let content = content.as_mut().map(|c| c as &mut dyn io::Read);
    staged
        .put(rel, &entry, content, false)
        .map_err(|e| TxError::io("staging", &to, e))?;
    // What is applied is what was staged: the fork may have written on meanwhile.
    staged
        .entry(rel)
        .map_err(|e| TxError::io("reading", &to, e))
}
