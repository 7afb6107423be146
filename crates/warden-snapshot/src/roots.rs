//! A session's read-write roots in a snapshot. Their files are not archived: each command's
//! changes to them are a call's transaction (`warden_tx`), so a snapshot keeps where their
//! history stood (the newest call committed to them), and a restore undoes every call
//! committed to them since, newest first: `warden rewind`'s rule, kept to these roots. A root
//! changed since by no call (a person's editor) makes the restore a `conflict` naming the
//! paths, unless the restore is forced; a call whose pre-images were dropped (the store's
//! bounds) cannot be undone, and the restore says so. A fork gets copies of the roots
//! instead ([`crate::fork`]).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use warden_core::{Access, Tool};
use warden_tx::{CallRecord, State, Store, TxError};

/// Where a snapshot found its tool's read-write roots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsMark {
    /// The roots' host folders.
    pub paths: Vec<PathBuf>,
    /// The newest call committed to them then, if any.
    pub after: Option<String>,
    /// When it was committed, in nanoseconds since the epoch (0: none was).
    pub after_ns: u128,
}

/// The host folders of `tool`'s read-write roots: what its snapshots mark, and a fork of
/// them copies.
pub fn read_write(tool: &Tool) -> Vec<PathBuf> {
    let grants = tool.policy.grants.fs.iter();
    grants
        .filter(|g| g.access == Access::ReadWrite)
        .map(|g| g.host.clone())
        .collect()
}

fn touches(record: &CallRecord, paths: &[PathBuf]) -> bool {
    record.roots.iter().any(|root| paths.contains(root))
}

/// Where the history of the roots at `paths` stands now.
pub(crate) fn mark(store: &Store, paths: Vec<PathBuf>) -> Result<RootsMark, TxError> {
    let records = store.records()?;
    let newest = records
        .iter()
        .filter(|r| r.state != State::Committing && touches(r, &paths))
        .max_by_key(|r| r.committed_ns);
    Ok(RootsMark {
        after: newest.map(|r| r.call_id.clone()),
        after_ns: newest.map_or(0, |r| r.committed_ns),
        paths,
    })
}

/// The calls committed to `mark`'s roots after it, newest first.
pub(crate) fn later(store: &Store, mark: &RootsMark) -> Result<Vec<CallRecord>, TxError> {
    let mut later: Vec<CallRecord> = store
        .records()?
        .into_iter()
        .filter(|r| r.committed_ns > mark.after_ns && touches(r, &mark.paths))
        .filter(|r| matches!(r.state, State::Committed | State::Dropped))
        .collect();
    later.sort_by_key(|r| std::cmp::Reverse(r.committed_ns));
    Ok(later)
}

/// Undoes every call committed to `mark`'s roots after it, newest first (`forced`: over what
/// changed since by no call), stopping at the first that cannot be undone: answers the calls
/// undone, or how many were and why the next was not.
pub(crate) fn rewind(
    store: &Store,
    mark: &RootsMark,
    forced: bool,
) -> Result<Vec<CallRecord>, (usize, TxError)> {
    let mut undone = Vec::new();
    for record in later(store, mark).map_err(|e| (0, e))? {
        let done = match forced {
            true => store.undo_forced(&record.call_id),
            false => store.undo(&record.call_id),
        };
        let done = done.map_err(|e| (undone.len(), e))?;
        undone.push(done);
    }
    Ok(undone)
}
