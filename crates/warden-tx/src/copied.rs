//! A call's changes read from a copy of its roots rather than from an overlay: a container on
//! an engine elsewhere gets its roots copied in, and hands back what its copy holds while it
//! still runs. The caller names each path the copy changed, with what the copy holds there;
//! each is staged in the view's upper layer (a file's bytes, a link) and becomes the view's
//! change set, committed or discarded as any view's. The copy's processes never reach the
//! view: what is staged is final once staged.

use crate::TxError;
use crate::beneath::Beneath;
use crate::changes::Change;
use crate::entry::{Entry, Kind};
use crate::fork::entry_at;
use crate::store::View;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What a copy of a root holds at a path it changed.
#[derive(Debug, Clone, Copy)]
pub enum Copied<'a> {
    File {
        bytes: &'a [u8],
        mode: u32,
    },
    Dir {
        mode: u32,
    },
    /// A link, and its target as written.
    Link(&'a Path),
}

impl View {
    /// Stages, as the call's change to root number `root` at `path` (below the root), what
    /// the call's copy of the root holds there: `None` where the copy removed it. Once any
    /// path is staged, [`View::changes`] answers the staged ones, each against what the root
    /// holds there now; a root the call did not change needs nothing staged. What the root's
    /// folder owner would own is staged as theirs where warden may (as root).
    pub fn stage(
        &mut self,
        root: usize,
        path: &Path,
        now: Option<Copied<'_>>,
    ) -> Result<(), TxError> {
        let Some(dir) = self.roots.get(root).cloned() else {
            return Err(TxError::io(
                "staging",
                path,
                std::io::Error::other(format!("the view has no root number {root}")),
            ));
        };
        let at = Beneath::open(&dir).map_err(|e| TxError::io("opening", &dir, e))?;
        let before = entry_at(&at, path)?;
        let meta = fs::metadata(&dir).map_err(|e| TxError::io("reading", &dir, e))?;
        let owner = (meta.uid(), meta.gid());
        let after = match now {
            None => None,
            Some(Copied::Dir { mode }) => Some(Entry::dir(mode & 0o7777, owner)),
            Some(Copied::File { bytes, mode }) => {
                // Its size and sha256 are read from what was staged.
                let entry = Entry {
                    kind: Kind::File,
                    mode: mode & 0o7777,
                    size: None,
                    sha256: None,
                    target: None,
                    uid: owner.0,
                    gid: owner.1,
                };
                Some(self.put(root, path, &entry, Some(bytes))?)
            }
            Some(Copied::Link(target)) => {
                let entry = Entry::symlink(target.to_owned(), owner);
                Some(self.put(root, path, &entry, None)?)
            }
        };
        if before.is_none() && after.is_none() {
            return Ok(());
        }
        self.staged.get_or_insert_with(Vec::new).push(Change {
            root,
            path: path.to_owned(),
            before,
            after,
        });
        Ok(())
    }

    /// Marks `path` of root number `root` as changed meanwhile by someone else (what the root
    /// holds there is not what the copy started from): a commit of the view refuses it as a
    /// [`TxError::Conflict`], whenever it was changed.
    pub fn clash(&mut self, root: usize, path: &Path) {
        if let Some(dir) = self.roots.get(root) {
            self.clashed.insert(dir.join(path));
        }
    }

    /// Puts `entry` in root `root`'s upper layer at `path` (its folders made as plain
    /// ones), and answers it as staged: its owner is warden's where warden may not set it.
    fn put(
        &self,
        root: usize,
        path: &Path,
        entry: &Entry,
        bytes: Option<&[u8]>,
    ) -> Result<Entry, TxError> {
        let upper = self.layer(root).upper;
        let to = upper.join(path);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| TxError::io("making", parent, e))?;
        }
        let staged = Beneath::open(&upper).map_err(|e| TxError::io("opening", &upper, e))?;
        let mut content = bytes;
        let content = content.as_mut().map(|c| c as &mut dyn std::io::Read);
        staged
            .put(path, entry, content, true)
            .map_err(|e| TxError::io("staging", &to, e))?;
        match staged.entry(path) {
            Ok(Some(entry)) if entry.kind != Kind::Dir => Ok(entry),
            Ok(_) => Err(TxError::io(
                "staging",
                &to,
                std::io::Error::other("the staged entry is gone"),
            )),
            Err(e) => Err(TxError::io("reading", &to, e)),
        }
    }
}
