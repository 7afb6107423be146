//! A unified diff of a view's changed text files, for a person reviewing what a call did
//! before it is committed. Both sides are read beneath their folders without following a
//! link: a link is shown with its target, never read through; a file that is not text, or is
//! larger than [`DIFF_FILE_BYTES`], is named with its sizes instead.

use crate::beneath::Beneath;
use crate::changes::Change;
use crate::entry::{Entry, Kind};
use crate::store::{ChangeSet, View};
use similar::TextDiff;
use std::fmt::Write;
use std::io::Read;
use std::path::Path;
use warden_core::shown::escape;

/// The largest file whose text is diffed; a larger one is named with its sizes.
pub const DIFF_FILE_BYTES: u64 = 256 * 1024;

impl View {
    /// A unified diff of `changes` (this view's), at most `max` bytes: every changed path is
    /// named, in the order of the change set, until the bound cuts the rest (which says how
    /// many paths it left out).
    pub fn diff(&self, changes: &ChangeSet, max: usize) -> String {
        // Each root and its upper layer opened once, for every change below them.
        let open = |p: &Path| Beneath::open(p).map_err(|e| e.to_string());
        let folders: Vec<Folders> = (0..changes.roots.len())
            .map(|i| (open(&changes.roots[i]), open(&self.layer(i).upper)))
            .collect();
        let mut out = String::new();
        for (i, change) in changes.changes.iter().enumerate() {
            // A name may hold a line break that would forge a line of the diff: escaped.
            let name = Path::new(&changes.roots[change.root])
                .join(&change.path)
                .display()
                .to_string();
            let hunk = file_diff(change, &folders[change.root], &escape(&name));
            if out.len() + hunk.len() > max {
                let left = changes.changes.len() - i;
                let _ = writeln!(out, "… the diff stops here: {left} more changed path(s)");
                break;
            }
            out.push_str(&hunk);
        }
        out
    }
}

/// A root and its upper layer, opened (or why not).
type Folders = (Result<Beneath, String>, Result<Beneath, String>);

/// The diff of one change, headed `--- NAME` / `+++ NAME`; what it is on each side (a
/// folder, a link, a mode) follows, unless both sides are text of one mode.
fn file_diff(change: &Change, (root, upper): &Folders, name: &str) -> String {
    let read = |folder: &Result<Beneath, String>| {
        folder
            .as_ref()
            .map_err(|e| std::io::Error::other(e.clone()))?
            .read(&change.path)
    };
    let before = side(change.before.as_ref(), || read(root));
    let after = side(change.after.as_ref(), || read(upper));
    let mut out = String::new();
    match (&before, &after) {
        (Side::Text(old), Side::Text(new)) => {
            let _ = write!(
                out,
                "{}",
                TextDiff::from_lines(old.as_str(), new.as_str())
                    .unified_diff()
                    .header(name, name)
            );
            if old == new {
                let _ = writeln!(out, "--- {name}\n+++ {name}");
            }
        }
        _ => {
            let _ = writeln!(out, "--- {name}\n+++ {name}");
        }
    }
    let same_mode =
        matches!((&change.before, &change.after), (Some(b), Some(a)) if b.mode == a.mode);
    if same_mode && matches!((&before, &after), (Side::Text(_), Side::Text(_))) {
        return out;
    }
    for (when, side, entry) in [
        ("before", &before, &change.before),
        ("after", &after, &change.after),
    ] {
        if let Some(said) = side.said(entry.as_ref()) {
            let _ = writeln!(out, "  {when}: {said}");
        }
    }
    out
}

/// One side of a change as the diff shows it.
enum Side {
    /// Nothing there, or a folder: no lines.
    Empty,
    Text(String),
    /// A link, binary or large file, or one that could not be read: said, not diffed.
    Said(String),
}

fn side(entry: Option<&Entry>, open: impl FnOnce() -> std::io::Result<std::fs::File>) -> Side {
    let Some(entry) = entry else {
        return Side::Text(String::new());
    };
    match entry.kind {
        Kind::Dir => Side::Empty,
        Kind::Symlink => {
            let target = entry.target.as_deref().unwrap_or(Path::new(""));
            Side::Said(format!(
                "a link to {}",
                escape(&target.display().to_string())
            ))
        }
        Kind::File => {
            let size = entry.size.unwrap_or(0);
            if size > DIFF_FILE_BYTES {
                return Side::Said(format!("{size} bytes, too large to diff"));
            }
            let mut bytes = Vec::new();
            let read = open().and_then(|f| f.take(DIFF_FILE_BYTES).read_to_end(&mut bytes));
            if let Err(e) = read {
                return Side::Said(format!("not read: {e}"));
            }
            match String::from_utf8(bytes) {
                Ok(text) if !text.contains('\0') => Side::Text(text),
                _ => Side::Said(format!("{size} bytes, not text")),
            }
        }
    }
}

impl Side {
    /// What a line of the diff says of this side beyond its text (a folder, a link, its
    /// mode), if anything.
    fn said(&self, entry: Option<&Entry>) -> Option<String> {
        let entry = entry?;
        let what = match (self, entry.kind) {
            (Side::Said(s), _) => s.clone(),
            (_, Kind::Dir) => "a folder".to_owned(),
            _ => "a file".to_owned(),
        };
        if entry.kind == Kind::Symlink {
            return Some(what);
        }
        Some(format!("{what}, mode {:04o}", entry.mode))
    }
}
