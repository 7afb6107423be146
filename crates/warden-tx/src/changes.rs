//! A call's change set, read from its view: the upper layer of the overlay its root was seen
//! through, against the root itself (the lower layer). Only what the call touched is read —
//! the upper layer's entries, and the root's entries at the same paths — so a large root
//! with a few changes costs a few reads, not a walk of the root.
//!
//! The overlay's own marks: a whiteout (a character device 0:0) is an entry removed; an
//! opaque folder (`trusted.overlay.opaque`, or `user.overlay.opaque` where the overlay was
//! mounted in a user namespace) hides everything the root had below it. An entry copied up
//! unchanged (its times touched, say) is no change: times are not part of an entry.

use crate::TxError;
use crate::beneath::Beneath;
use crate::clock::Moment;
use crate::entry::{Entry, Kind};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// One change to one root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Change {
    /// Which of the view's roots.
    pub root: usize,
    /// Below the root.
    pub path: PathBuf,
    /// What was there; `None`: the call added it.
    pub before: Option<Entry>,
    /// What is there after; `None`: the call removed it.
    pub after: Option<Entry>,
}

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Removed,
}

impl Change {
    /// Added, modified (content, mode or link target) or removed.
    pub fn kind(&self) -> ChangeKind {
        match (&self.before, &self.after) {
            (None, _) => ChangeKind::Added,
            (_, None) => ChangeKind::Removed,
            _ => ChangeKind::Modified,
        }
    }
}

/// `changes` in the order a commit applies them: removals deepest first, then the rest
/// shallowest first (a folder before its entries).
pub(crate) fn in_order(changes: Vec<Change>) -> Vec<Change> {
    let (mut removals, mut others): (Vec<Change>, Vec<Change>) =
        changes.into_iter().partition(|c| c.after.is_none());
    removals.sort_by(|a, b| (b.root, &b.path).cmp(&(a.root, &a.path)));
    others.sort_by(|a, b| (a.root, &a.path).cmp(&(b.root, &b.path)));
    removals.into_iter().chain(others).collect()
}

/// Reads the changes the upper layer `upper` makes to the root `lower` (the view's root number
/// `root`), in an order that can be applied: a folder's removal after its entries', a
/// folder's addition before its entries'.
pub(crate) fn scan(upper: &Path, lower: &Beneath, root: usize) -> Result<Vec<Change>, TxError> {
    Ok(scan_since(upper, lower, root, None, &|_, _| false)?.0)
}

/// The entries a scan read (not folders), each with its change time.
pub(crate) type Read = Vec<(PathBuf, Moment)>;

/// [`scan`], reading only the entries other than folders whose status changed from `since`
/// on and that `settled` (path, change time) does not name (a session's view, whose older
/// entries, and those warden wrote from the root, are the root's). Answers with the changes
/// and the entries read or named, each with its change time.
pub(crate) fn scan_since(
    upper: &Path,
    lower: &Beneath,
    root: usize,
    since: Option<Moment>,
    settled: &dyn Fn(&Path, Moment) -> bool,
) -> Result<(Vec<Change>, Read), TxError> {
    let mut scan = Scan {
        upper,
        lower,
        root,
        since,
        settled,
        changes: Vec::new(),
        read: Vec::new(),
    };
    scan.walk(Path::new(""), false)?;
    Ok((scan.changes, scan.read))
}

struct Scan<'a> {
    upper: &'a Path,
    lower: &'a Beneath,
    root: usize,
    since: Option<Moment>,
    settled: &'a dyn Fn(&Path, Moment) -> bool,
    changes: Vec<Change>,
    read: Read,
}

impl Scan<'_> {
    /// The entries of the upper folder `rel`; `new`: the root has nothing below it.
    fn walk(&mut self, rel: &Path, new: bool) -> Result<(), TxError> {
        let here = self.upper.join(rel);
        let mut names: Vec<PathBuf> = fs::read_dir(&here)
            .map_err(|e| TxError::io("reading the view", &here, e))?
            .map(|e| e.map(|e| PathBuf::from(e.file_name())))
            .collect::<Result<_, _>>()
            .map_err(|e| TxError::io("reading the view", &here, e))?;
        names.sort();
        if !new && !rel.as_os_str().is_empty() && opaque(&here) {
            // What the root had here and the view does not: removed.
            let kept: BTreeSet<&PathBuf> = names.iter().collect();
            for name in self
                .lower
                .names(rel)
                .map_err(|e| TxError::io("listing", rel, e))?
            {
                if !kept.contains(&name) {
                    self.removed(&rel.join(name))?;
                }
            }
        }
        for name in &names {
            self.entry(&rel.join(name), new)?;
        }
        Ok(())
    }

    fn entry(&mut self, rel: &Path, new: bool) -> Result<(), TxError> {
        let at = self.upper.join(rel);
        let meta = fs::symlink_metadata(&at).map_err(|e| TxError::io("reading", &at, e))?;
        let file_type = meta.file_type();
        if !file_type.is_dir() {
            let changed = Moment::of_meta(&meta);
            if self.since.is_some_and(|since| changed < since) {
                return Ok(());
            }
            self.read.push((rel.to_owned(), changed));
            if (self.settled)(rel, changed) {
                return Ok(());
            }
        }
        let before = if new { None } else { self.before(rel)? };
        if file_type.is_char_device() && meta.rdev() == 0 {
            if before.is_some() {
                self.removed(rel)?;
            }
            return Ok(());
        }
        let (mode, owner) = (meta.mode() & 0o7777, (meta.uid(), meta.gid()));
        let after = if file_type.is_dir() {
            Entry::dir(mode, owner)
        } else if file_type.is_symlink() {
            let target = fs::read_link(&at).map_err(|e| TxError::io("reading", &at, e))?;
            Entry::symlink(target, owner)
        } else if file_type.is_file() {
            let mut file = open_nofollow(&at)?;
            Entry::file_from(mode, owner, &mut file).map_err(|e| TxError::io("reading", &at, e))?
        } else {
            return Err(TxError::Special(self.lower.path().join(rel)));
        };
        let replaced = match &before {
            Some(b) if b.kind == Kind::Dir && after.kind != Kind::Dir => true,
            Some(b) if b.kind != Kind::Dir && after.kind == Kind::Dir => true,
            _ => false,
        };
        if replaced {
            self.removed(rel)?;
        }
        let before = if replaced { None } else { before };
        let is_dir = after.kind == Kind::Dir;
        let now_new = new || before.is_none();
        if before.as_ref() != Some(&after) {
            self.changes.push(Change {
                root: self.root,
                path: rel.to_owned(),
                before,
                after: Some(after),
            });
        }
        if is_dir {
            self.walk(rel, now_new)?;
        }
        Ok(())
    }

    /// What the root has at `rel`.
    fn before(&self, rel: &Path) -> Result<Option<Entry>, TxError> {
        self.lower
            .entry(rel)
            .map_err(|e| TxError::io("reading", &self.lower.path().join(rel), e))
    }

    /// The root's entry at `rel` removed, a folder's entries first.
    fn removed(&mut self, rel: &Path) -> Result<(), TxError> {
        let Some(before) = self.before(rel)? else {
            return Ok(());
        };
        if before.kind == Kind::Dir {
            let names = self
                .lower
                .names(rel)
                .map_err(|e| TxError::io("listing", &self.lower.path().join(rel), e))?;
            for name in names {
                self.removed(&rel.join(name))?;
            }
        }
        self.changes.push(Change {
            root: self.root,
            path: rel.to_owned(),
            before: Some(before),
            after: None,
        });
        Ok(())
    }
}

/// True when the overlay marked the folder `dir` opaque.
fn opaque(dir: &Path) -> bool {
    ["trusted.overlay.opaque", "user.overlay.opaque"]
        .iter()
        .any(|name| {
            let mut value = [0u8; 8];
            matches!(rustix::fs::lgetxattr(dir, *name, &mut value), Ok(n) if value[..n] == *b"y")
        })
}

/// A file of the view, opened without following a link.
pub(crate) fn open_nofollow(path: &Path) -> Result<fs::File, TxError> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| TxError::io("reading", path, e))
}
