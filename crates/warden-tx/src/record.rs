//! A committed call's record: its steps, each with the pre-image of what it replaced, in
//! `calls/CALL_ID/` of the store. Written before the first step (the journal: a warden killed
//! mid-commit leaves it `committing`, and the next one rolls the steps back), then marked
//! `committed`; undo marks it `undone`, and the store's bounds mark it `dropped`.
//!
//! Nothing is synced to disk: what a killed process wrote is in the kernel's cache for the
//! next one to read, and a sync per pre-image was most of a commit's cost (~0.5 ms each
//! here). A power cut in the middle of a commit is not covered; the root's own writes are not
//! synced either.

use crate::TxError;
use crate::beneath::Beneath;
use crate::changes::{Change, ChangeKind};
use crate::entry::{Entry, Kind};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where a call's record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Being applied: the journal of a commit in progress.
    Committing,
    /// Applied; its pre-images are kept.
    Committed,
    /// Put back by an undo or a rewind.
    Undone,
    /// Applied, but its pre-images were dropped (the store's bounds): it can no longer be
    /// undone.
    Dropped,
}

/// One call's applied changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallRecord {
    /// warden's own id of the call.
    pub call_id: String,
    /// The tool that made the changes.
    pub tool: String,
    pub state: State,
    /// When it was committed, in nanoseconds since the epoch: the order `rewind` undoes in.
    pub committed_ns: u128,
    /// The process that committed it (see `owner`).
    pub owner: String,
    /// The roots the steps' `root` numbers name.
    pub roots: Vec<PathBuf>,
    /// In the order they are applied.
    pub steps: Vec<Step>,
    /// Why its pre-images were dropped, when they were.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dropped: Option<String>,
}

/// One change applied, and where the file it replaced is kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    #[serde(flatten)]
    pub change: Change,
    /// The pre-image's file in the record's `pre/` folder, for a file replaced or removed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pre: Option<String>,
}

impl CallRecord {
    /// Bytes of the pre-images it keeps: the files its steps replaced or removed.
    pub fn pre_bytes(&self) -> u64 {
        self.steps
            .iter()
            .filter_map(|s| s.change.before.as_ref()?.size)
            .sum()
    }

    /// How many of its steps are changes of `kind`.
    pub fn count(&self, kind: ChangeKind) -> usize {
        self.steps
            .iter()
            .filter(|s| s.change.kind() == kind)
            .count()
    }

    /// Reads the record in `dir`.
    pub(crate) fn read(dir: &Path, call: &str) -> Result<Self, TxError> {
        let path = dir.join("record.json");
        let text = fs::read(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => TxError::Unknown(call.to_owned()),
            _ => TxError::io("reading", &path, e),
        })?;
        serde_json::from_slice(&text).map_err(|source| TxError::Record {
            call: call.to_owned(),
            source,
        })
    }

    /// Writes it into `dir` in one rename.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), TxError> {
        let text = serde_json::to_vec(self).map_err(|source| TxError::Record {
            call: self.call_id.clone(),
            source,
        })?;
        let (temp, path) = (dir.join("record.json.new"), dir.join("record.json"));
        fs::write(&temp, &text).map_err(|e| TxError::io("writing", &temp, e))?;
        fs::rename(&temp, &path).map_err(|e| TxError::io("writing", &path, e))
    }
}

/// Applies `step` to `root`: its pre-image kept first (in `pre`), then the change made, its
/// new entry taken from the view's upper layer `upper` — moved in where it can be, copied
/// where the view lives on (`copy`: a session's).
pub(crate) fn apply(
    step: &Step,
    root: &Beneath,
    upper: &Path,
    pre: &Path,
    copy: bool,
) -> io::Result<()> {
    let Step { change, pre: kept } = step;
    if let (Some(name), Some(before)) = (kept, &change.before)
        && before.kind == Kind::File
    {
        // A link to the file replaced keeps it as it was; a copy where no link can be made.
        let kept = pre.join(name);
        let _ = fs::remove_file(&kept);
        if !root.link_out(&change.path, &kept)? {
            let mut from = root.read(&change.path)?;
            let temp = pre.join(format!("{name}.new"));
            let mut to = fs::File::create(&temp)?;
            io::copy(&mut from, &mut to)?;
            fs::rename(&temp, kept)?;
        }
    }
    let replace = change.before.is_some();
    match &change.after {
        None => root.remove(&change.path, change.before.as_ref().is_some_and(is_dir)),
        Some(after) if after.kind == Kind::Dir => root.make_dir(&change.path, after),
        Some(after) => {
            // The view's own entry moved in is the new one as it is; else a copy of it.
            let from = upper.join(&change.path);
            if !copy && root.move_in(&from, &change.path, replace)? {
                return Ok(());
            }
            let mut content = match after.kind {
                Kind::File => Some(
                    crate::changes::open_nofollow(&from)
                        .map_err(|e| io::Error::other(e.to_string()))?,
                ),
                _ => None,
            };
            let content = content.as_mut().map(|c| c as &mut dyn io::Read);
            root.put(&change.path, after, content, replace)
        }
    }
}

/// Puts back what `step` changed: what was there before, from its pre-image. `force`: a
/// rollback of a commit that may have stopped before this step, so a missing pre-image means
/// the step was never applied.
pub(crate) fn restore(step: &Step, root: &Beneath, pre: &Path, force: bool) -> io::Result<()> {
    put_back(step, root, pre, force, true)
}

/// [`restore`] into a copy of the root: the pre-image is copied, never moved, so that the
/// call stays undoable in the root itself.
pub(crate) fn restore_copy(step: &Step, root: &Beneath, pre: &Path) -> io::Result<()> {
    put_back(step, root, pre, false, false)
}

fn put_back(step: &Step, root: &Beneath, pre: &Path, force: bool, take: bool) -> io::Result<()> {
    let Step { change, pre: kept } = step;
    match &change.before {
        None => {
            // Added: removed again, unless a rollback finds something else there.
            let now = root.entry(&change.path)?;
            if now.is_some() && (!force || now == change.after) {
                let dir = change.after.as_ref().is_some_and(is_dir);
                root.remove(&change.path, dir)?;
            }
            Ok(())
        }
        Some(before) if before.kind == Kind::Dir => root.make_dir(&change.path, before),
        Some(before) if before.kind == Kind::File => {
            let Some(name) = kept else {
                return Err(io::Error::other("a file's pre-image was not recorded"));
            };
            let kept = pre.join(name);
            if take && kept.exists() && root.move_in(&kept, &change.path, true)? {
                return Ok(());
            }
            let mut content = match fs::File::open(&kept) {
                Ok(file) => file,
                Err(e) if force && e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            root.put(&change.path, before, Some(&mut content), true)
        }
        Some(before) => root.put(&change.path, before, None, true),
    }
}

fn is_dir(entry: &Entry) -> bool {
    entry.kind == Kind::Dir
}
