//! A session's view: one overlay of its read-write roots for as long as its shell lives,
//! settled command by command (see `crate::settle::settle_command`).
//!
//! The overlay cannot be started afresh under a running shell, and its upper layer cannot be
//! edited under the mounted overlay (the overlay keeps what it looked up). So:
//! - a command's changes are the upper layer's entries changed since the last command was
//!   settled, against the roots (older ones were settled already);
//! - a commit copies them into the roots, and the overlay keeps using its own;
//! - a discard, and a sync with what others committed to the roots meanwhile (other calls,
//!   other wardens, an undo), are written through the overlay itself, as the session's
//!   processes see it (the `/proc/PID/root` of [`SessionView::new`]'s `shell`, or the mount
//!   a gVisor sandbox's file server serves, [`SessionView::mounted_at`]), never into the
//!   upper layer;
//! - what others changed is what the kernel tells (`crate::watch`), or a walk of the roots
//!   where it cannot.

use crate::beneath::Beneath;
use crate::changes::scan_since;
use crate::clock::Moment;
use crate::entry::{Entry, Kind};
use crate::watch::{Changed, Watch};
use crate::{ChangeSet, TxError, View};
use rustix::fs::FileType;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// One session's view of its read-write roots.
#[derive(Debug)]
pub struct SessionView {
    view: View,
    /// The session's tool, whose calls its commits are.
    tool: String,
    /// The session's file system as warden reaches it: `/proc/PID/root` of its shell, or
    /// this machine's `/` (see [`SessionView::mounted_at`]).
    seen_from: PathBuf,
    /// Where the session sees each root, in it.
    guests: Vec<PathBuf>,
    /// When the last command's changes were read: the upper layer's entries changed before
    /// are settled, as the roots' own.
    settled: Moment,
    /// Entries of the upper layer changed since `settled` that are settled too (read at the
    /// last settling, or written by warden since), by root and path, with the change time
    /// they had: one changed again since is the session's.
    known: HashMap<(usize, PathBuf), Moment>,
    /// What the command being settled read, for `known` once it is.
    reading: HashMap<(usize, PathBuf), Moment>,
    /// When the roots were last read into the view.
    synced: Moment,
    /// What tells which paths of the roots changed, where the kernel can.
    watch: Option<Watch>,
    /// The roots were walked once: from then on the watch tells what changed.
    walked: bool,
}

impl SessionView {
    /// `view`, mounted for a session of `tool` whose processes (the process `shell` among
    /// them, as this machine numbers it) see its root number `i` at `guests[i]`. What warden
    /// writes there, through `shell`'s `/proc/PID/root`, lands in the view's upper layer, as
    /// the session's own writes do.
    pub fn new(view: View, tool: &str, shell: i32, guests: Vec<PathBuf>) -> Self {
        Self::reached(
            view,
            tool,
            PathBuf::from(format!("/proc/{shell}/root")),
            guests,
        )
    }

    /// `view`, mounted for a session of `tool` whose processes are not this machine's (a
    /// gVisor sandbox), seeing its root number `i` through the overlay mounted at
    /// `merged[i]` on this machine (the engine's mount of the volume, which the sandbox's
    /// file server serves, revalidating what changed). What warden writes there lands in the
    /// view's upper layer, as the session's own writes do.
    pub fn mounted_at(view: View, tool: &str, merged: Vec<PathBuf>) -> Self {
        Self::reached(view, tool, PathBuf::from("/"), merged)
    }

    fn reached(mut view: View, tool: &str, seen_from: PathBuf, guests: Vec<PathBuf>) -> Self {
        view.copies = true;
        let started = view.started;
        // Set up before the first command's walk, which sees what changed until then.
        let watch = opened(&view.roots)
            .ok()
            .and_then(|roots| Watch::new(&roots));
        Self {
            view,
            tool: tool.to_owned(),
            seen_from,
            guests,
            settled: started,
            known: HashMap::new(),
            reading: HashMap::new(),
            synced: started,
            watch,
            walked: false,
        }
    }

    /// A command starts: what others changed in the roots since the last one is written into
    /// the view (a path the session's background processes changed meanwhile is left as they
    /// made it, and the next commit of it is a conflict), and a conflict from here on is a
    /// path changed after this.
    pub fn begin(&mut self) -> Result<(), TxError> {
        let now = Moment::now(&self.view.dir)?;
        let roots = opened(&self.view.roots)?;
        let changed = match (&mut self.watch, self.walked) {
            (Some(watch), true) => watch.changed(&roots),
            _ => None,
        };
        if changed.is_none() && self.walked && self.watch.is_some() {
            // It could not tell: watched afresh, then walked.
            self.watch = Watch::new(&roots);
        }
        for (i, root) in roots.into_iter().enumerate() {
            let upper = open(&self.view.layer(i).upper)?;
            let merged = self.merged(i)?;
            let mut sync = Sync {
                root,
                merged,
                upper: &upper,
                synced: self.synced,
                settled: self.settled,
                known: &self.known,
                i,
                clashes: Vec::new(),
                wrote: Vec::new(),
            };
            let synced = match &changed {
                Some(changed) => sync.visit_changed(changed),
                None => sync.walk(Path::new("")),
            };
            let root = &self.view.roots[i];
            synced.map_err(|e| TxError::io("bringing the session's view up to", root, e))?;
            let (clashes, wrote) = (sync.clashes, sync.wrote);
            self.view
                .clashed
                .extend(clashes.into_iter().map(|p| root.join(p)));
            // What warden wrote is settled.
            for path in wrote {
                note(&mut self.known, &upper, i, path);
            }
        }
        self.synced = now;
        self.walked = true;
        self.view.begin();
        Ok(())
    }

    /// Now, on the view's clock: what [`SessionView::settled`] takes once the command's
    /// changes are read.
    pub(crate) fn now(&self) -> Result<Moment, TxError> {
        Moment::now(&self.view.dir)
    }

    /// What was changed since the last command was settled: the command's changes, and its
    /// session's background processes' since the last answer.
    pub(crate) fn changes(&mut self) -> Result<ChangeSet, TxError> {
        let mut changes = Vec::new();
        self.reading.clear();
        for (i, root) in self.view.roots.iter().enumerate() {
            let lower = open(root)?;
            let upper = self.view.layer(i).upper;
            // What warden settled or wrote since is the root's: where warden is not root, an
            // entry it wrote is its own user's, whatever the root's owner.
            let known = &self.known;
            let settled = |path: &Path, at: Moment| known.get(&(i, path.to_owned())) == Some(&at);
            let (found, read) = scan_since(&upper, &lower, i, Some(self.settled), &settled)?;
            changes.extend(found);
            self.reading
                .extend(read.into_iter().map(|(path, at)| ((i, path), at)));
        }
        Ok(ChangeSet {
            roots: self.view.roots.clone(),
            changes,
        })
    }

    /// Commits `changes` to the roots as call `call` of the session's tool (see
    /// [`View::commit`]).
    pub(crate) fn commit(
        &self,
        call: &str,
        changes: &ChangeSet,
        limit: u64,
    ) -> Result<(), TxError> {
        self.view.commit_in(call, &self.tool, changes, limit)
    }

    /// Root number `i` as the session sees it.
    fn merged(&self, i: usize) -> Result<Beneath, TxError> {
        let guest = &self.guests[i];
        Beneath::open_in(&self.seen_from, guest)
            .map_err(|e| TxError::io("opening the session's view of", guest, e))
    }

    /// Puts what `changes` changed back as the roots have it, through the session's view.
    pub(crate) fn revert(&mut self, changes: &ChangeSet) -> Result<(), TxError> {
        let merged = (0..self.guests.len())
            .map(|i| self.merged(i))
            .collect::<Result<Vec<_>, _>>()?;
        let roots = opened(&self.view.roots)?;
        let uppers = (0..self.view.roots.len())
            .map(|i| open(&self.view.layer(i).upper))
            .collect::<Result<Vec<_>, _>>()?;
        for change in changes.changes.iter().rev() {
            let (to, from) = (&merged[change.root], &roots[change.root]);
            let put_back = match &change.before {
                None => to.remove(&change.path, change.after.as_ref().is_some_and(is_dir)),
                Some(before) => put(to, from, &change.path, before),
            };
            put_back.map_err(|e| TxError::io("putting back", &to.path().join(&change.path), e))?;
            let upper = &uppers[change.root];
            note(&mut self.reading, upper, change.root, change.path.clone());
        }
        Ok(())
    }

    /// The command is settled: the upper layer's entries changed before `at` are the roots',
    /// and so are those read as it was.
    pub(crate) fn settled(&mut self, at: Moment) {
        self.settled = at;
        self.known = std::mem::take(&mut self.reading);
        self.view.clashed.clear();
    }
}

/// One root's (number `i`) sync: its entries changed since `synced` written through `merged`.
struct Sync<'a> {
    root: Beneath,
    merged: Beneath,
    upper: &'a Beneath,
    synced: Moment,
    settled: Moment,
    known: &'a HashMap<(usize, PathBuf), Moment>,
    i: usize,
    /// Paths the session changed that the root changed too.
    clashes: Vec<PathBuf>,
    /// Paths written through `merged`.
    wrote: Vec<PathBuf>,
}

impl Sync<'_> {
    /// The folder `rel` of the root, and everything below it.
    fn walk(&mut self, rel: &Path) -> io::Result<()> {
        for (name, stat) in self.root.stats(rel)? {
            let path = rel.join(&name);
            if Moment::of(&stat) >= self.synced {
                self.bring(&path)?;
            }
            // Below a folder the view has too (not one the session removed meanwhile).
            if is_dir_stat(&stat) && self.merged.lstat(&path)?.is_some_and(|s| is_dir_stat(&s)) {
                self.walk(&path)?;
            }
        }
        // Gone from the root meanwhile (a folder's entries' removal changes its status), unless
        // the session made or changed it since its last command: that is its own, to commit.
        let top = rel.as_os_str().is_empty();
        let changed = top
            || self
                .root
                .lstat(rel)?
                .is_some_and(|s| Moment::of(&s) >= self.synced);
        if changed && (top || self.merged.lstat(rel)?.is_some_and(|s| is_dir_stat(&s))) {
            let kept = self.root.names(rel)?;
            for name in self.merged.names(rel)? {
                let path = rel.join(&name);
                if kept.binary_search(&name).is_err() && !self.unsettled(&path)? {
                    remove_tree(&self.merged, &path)?;
                    self.wrote.push(path);
                }
            }
        }
        Ok(())
    }

    /// The paths of this root that `changed` names, and everything below the folders it made.
    fn visit_changed(&mut self, changed: &Changed) -> io::Result<()> {
        let here = self.i;
        for (_, rel) in changed.paths.iter().filter(|(i, _)| *i == here) {
            self.visit(rel)?;
        }
        for (_, folder) in changed.folders.iter().filter(|(i, _)| *i == here) {
            if self.merged.lstat(folder)?.is_some_and(|s| is_dir_stat(&s)) {
                self.walk(folder)?;
            }
        }
        Ok(())
    }

    /// The root's entry at `rel` into the view, or its removal, where the view has the
    /// folder above it (not one the session removed meanwhile).
    fn visit(&mut self, rel: &Path) -> io::Result<()> {
        let Some(parent) = rel.parent() else {
            // The root folder itself: its own status is not brought.
            return Ok(());
        };
        if !parent.as_os_str().is_empty()
            && !self.merged.lstat(parent)?.is_some_and(|s| is_dir_stat(&s))
        {
            return Ok(());
        }
        if self.root.lstat(rel)?.is_some() {
            return self.bring(rel);
        }
        if self.merged.lstat(rel)?.is_some() && !self.unsettled(rel)? {
            remove_tree(&self.merged, rel)?;
            self.wrote.push(rel.to_owned());
        }
        Ok(())
    }

    /// The root's entry at `rel` into the view, unless the view has it already or the
    /// session changed it since its last command.
    fn bring(&mut self, rel: &Path) -> io::Result<()> {
        let Some(now) = self.root.entry(rel)? else {
            return Ok(());
        };
        let seen = self.merged.entry(rel)?;
        if seen.as_ref() == Some(&now) {
            return Ok(());
        }
        if self.unsettled(rel)? {
            self.clashes.push(rel.to_owned());
            return Ok(());
        }
        if let Some(seen) = seen
            && (seen.kind == Kind::Dir) != (now.kind == Kind::Dir)
        {
            remove_tree(&self.merged, rel)?;
        }
        put(&self.merged, &self.root, rel, &now)?;
        self.wrote.push(rel.to_owned());
        Ok(())
    }

    /// True when the session changed `rel` since its last command was settled.
    fn unsettled(&self, rel: &Path) -> io::Result<bool> {
        let Some(stat) = self.upper.lstat(rel)? else {
            return Ok(false);
        };
        let changed = Moment::of(&stat);
        let known = self.known.get(&(self.i, rel.to_owned())) == Some(&changed);
        Ok(!is_dir_stat(&stat) && changed >= self.settled && !known)
    }
}

/// Notes the change time `upper` has for `path` of root `i` in `known` (as settled).
fn note(known: &mut HashMap<(usize, PathBuf), Moment>, upper: &Beneath, i: usize, path: PathBuf) {
    match upper.lstat(&path) {
        Ok(Some(stat)) => {
            known.insert((i, path), Moment::of(&stat));
        }
        _ => {
            known.remove(&(i, path));
        }
    }
}

/// Puts `entry` at `rel` in `to`, a file's content read from `from` at the same path.
fn put(to: &Beneath, from: &Beneath, rel: &Path, entry: &Entry) -> io::Result<()> {
    match entry.kind {
        Kind::Dir => to.make_dir(rel, entry),
        Kind::File => to.put(rel, entry, Some(&mut from.read(rel)?), true),
        Kind::Symlink => to.put(rel, entry, None, true),
    }
}

/// Removes `rel` from `to`, a folder with everything in it.
fn remove_tree(to: &Beneath, rel: &Path) -> io::Result<()> {
    let Some(stat) = to.lstat(rel)? else {
        return Ok(());
    };
    let dir = is_dir_stat(&stat);
    if dir {
        for name in to.names(rel)? {
            remove_tree(to, &rel.join(name))?;
        }
    }
    to.remove(rel, dir)
}

fn is_dir(entry: &Entry) -> bool {
    entry.kind == Kind::Dir
}

fn is_dir_stat(stat: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::Directory
}

fn open(path: &Path) -> Result<Beneath, TxError> {
    Beneath::open(path).map_err(|e| TxError::io("opening", path, e))
}

fn opened(paths: &[PathBuf]) -> Result<Vec<Beneath>, TxError> {
    paths.iter().map(|p| open(p)).collect()
}
