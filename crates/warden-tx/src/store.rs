//! The store in warden's home: the views of calls running (`views/`), and the records of
//! calls committed (`calls/`), with their pre-images.

use crate::beneath::Beneath;
use crate::changes::{Change, in_order, scan};
use crate::clock::Moment;
use crate::entry::Kind;
use crate::record::{CallRecord, State, Step, apply, restore, restore_copy};
use crate::trash::{Trash, remove_tree};
use crate::{KEEP_BYTES, KEEP_FOR, TxError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use warden_core::owner::{self, Liveness};

/// Commits between two applications of the store's bounds.
const PRUNE_EVERY: u64 = 100;

/// Views and records of one warden home. Commits of one process are applied one at a time.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    owner: String,
    committed: Mutex<Committed>,
    /// Made, recovered and pruned: once, at the first use (see [`Store::at`]).
    ready: OnceLock<Result<(), String>>,
    /// Where views and pre-images go once done with.
    trash: Trash,
}

/// What this process committed, for conflicts between calls that ran side by side.
#[derive(Debug, Default)]
struct Committed {
    /// Commits so far.
    count: u64,
    /// Commits, and bytes of pre-images, since the store's bounds were last applied.
    unpruned: (u64, u64),
    /// The commit that last changed each path (root joined with the change's path).
    last: HashMap<PathBuf, u64>,
}

/// One call's view of its read-write roots: an overlay layer for each. Dropped without a
/// commit, it is discarded: the roots never saw the call.
#[derive(Debug)]
pub struct View {
    store: Arc<Store>,
    pub(crate) dir: PathBuf,
    pub(crate) roots: Vec<PathBuf>,
    /// Commits this process had made when the call started.
    since: u64,
    /// When the call started, on the file systems' clock: a root's entry whose status changed
    /// later was changed meanwhile, by this process or another (see [`Moment`]).
    pub(crate) started: Moment,
    /// A commit copies the view's entries into the roots rather than moving them: a
    /// session's overlay lives on, and keeps using them.
    pub(crate) copies: bool,
    /// Paths (root joined with the change's) a commit refuses as conflicts besides those
    /// changed since the call started: a session's, changed by others while it held
    /// unsettled writes of its own there.
    pub(crate) clashed: BTreeSet<PathBuf>,
    /// The changes read from a copy of the roots rather than from the overlay's upper layers,
    /// once any is staged (see [`View::stage`]).
    pub(crate) staged: Option<Vec<Change>>,
}

/// The folders of one root's overlay: the call's writes land in `upper`; `work` is the
/// overlay's own.
#[derive(Debug, Clone)]
pub struct Layer {
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// What a call changed in its roots.
#[derive(Debug, Clone, Default)]
pub struct ChangeSet {
    /// The roots the changes' `root` numbers name.
    pub roots: Vec<PathBuf>,
    pub changes: Vec<Change>,
}

impl Store {
    /// Opens (making) the store in `dir`: rolls back the commits a warden killed in the middle
    /// left, removes the views of wardens that are gone, and drops pre-images past the bounds.
    pub fn open(dir: &Path) -> Result<Arc<Self>, TxError> {
        let store = Self::at(dir);
        store.ready()?;
        Ok(store)
    }

    /// The store in `dir`, opened as [`Store::open`] does at its first use: a process that
    /// makes no call with a read-write root never touches it.
    pub fn at(dir: &Path) -> Arc<Self> {
        let owner = owner::this_process();
        Arc::new(Self {
            dir: dir.to_owned(),
            trash: Trash::new(dir.join("trash"), &owner),
            owner,
            committed: Mutex::default(),
            ready: OnceLock::new(),
        })
    }

    /// Where it is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ready(&self) -> Result<(), TxError> {
        let ready = self.ready.get_or_init(|| {
            let made = ["", "views", "calls", "trash"].iter().try_for_each(|sub| {
                let path = self.dir.join(sub);
                fs::create_dir_all(&path).map_err(|e| TxError::io("making", &path, e))
            });
            // Outside every grant, and no one else's to read: pre-images are the roots'
            // content.
            made.and_then(|()| set_private(&self.dir))
                .and_then(|()| self.read_records())
                .and_then(|records| {
                    // One read for both: recovery takes the `committing` records, the bounds
                    // the `committed` ones.
                    self.trash.empty();
                    self.recover(&records)?;
                    self.prune(records)
                })
                .map_err(|e| e.to_string())
        });
        ready.clone().map_err(|why| TxError::Unready {
            dir: self.dir.clone(),
            why,
        })
    }

    /// The folder each view is a folder of.
    pub fn views(&self) -> PathBuf {
        self.dir.join("views")
    }

    /// A view of `roots` (each a folder, canonical) for one call.
    pub fn view(self: &Arc<Self>, roots: &[PathBuf]) -> Result<View, TxError> {
        self.ready()?;
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let dir = self.views().join(owner::file_name(&self.owner, n));
        for (i, root) in roots.iter().enumerate() {
            for sub in ["upper", "work"] {
                let path = dir.join(i.to_string()).join(sub);
                fs::create_dir_all(&path).map_err(|e| TxError::io("making", &path, e))?;
            }
            like_root(&dir.join(i.to_string()).join("upper"), root)?;
        }
        Ok(View {
            store: self.clone(),
            started: Moment::now(&dir)?,
            dir,
            roots: roots.to_vec(),
            since: lock(&self.committed).count,
            copies: false,
            clashed: BTreeSet::new(),
            staged: None,
        })
    }

    /// The records of committed calls, oldest first.
    pub fn records(&self) -> Result<Vec<CallRecord>, TxError> {
        self.ready()?;
        self.read_records()
    }

    fn read_records(&self) -> Result<Vec<CallRecord>, TxError> {
        let calls = self.dir.join("calls");
        let mut records = Vec::new();
        let entries = fs::read_dir(&calls).map_err(|e| TxError::io("reading", &calls, e))?;
        for entry in entries.flatten() {
            let call = entry.file_name().to_string_lossy().into_owned();
            match CallRecord::read(&entry.path(), &call) {
                Ok(record) => records.push(record),
                Err(e) => tracing::warn!("skipping a record: {e}"),
            }
        }
        records.sort_by_key(|r| r.committed_ns);
        Ok(records)
    }

    /// What each tool wrote in the calls committed in the last `window` (all of them when
    /// `None`), undone ones included and counted.
    pub fn writes(
        &self,
        window: Option<std::time::Duration>,
    ) -> Result<Vec<crate::ToolWrites>, TxError> {
        let since = window.map_or(0, |w| now_ns().saturating_sub(w.as_nanos()));
        Ok(crate::writes::by_tool(&self.records()?, since))
    }

    /// Puts back exactly what call `call` changed, if nothing since changed those paths
    /// (a [`TxError::Conflict`] otherwise, and nothing is touched).
    pub fn undo(&self, call: &str) -> Result<CallRecord, TxError> {
        self.undo_with(call, false)
    }

    /// As [`Store::undo`], over whatever changed those paths since: what another call or a
    /// person wrote there is replaced by what the call found (a path that became a folder
    /// with entries where a file was is an error, and stops it there).
    pub fn undo_forced(&self, call: &str) -> Result<CallRecord, TxError> {
        self.undo_with(call, true)
    }

    fn undo_with(&self, call: &str, forced: bool) -> Result<CallRecord, TxError> {
        self.ready()?;
        let dir = self.record_dir(call)?;
        let _one_at_a_time = lock(&self.committed);
        let mut record = CallRecord::read(&dir, call)?;
        undoable(&record)?;
        let roots = open_roots(&record.roots)?;
        let changed = match forced {
            true => Vec::new(),
            false => changed_since(&record, &roots)?,
        };
        if !changed.is_empty() {
            return Err(TxError::Conflict {
                call: Some(call.to_owned()),
                paths: changed,
            });
        }
        let pre = dir.join("pre");
        for step in record.steps.iter().rev() {
            let root = &roots[step.change.root];
            restore(step, root, &pre, false)
                .map_err(|e| TxError::io("undoing a change at", root.path(), e))?;
        }
        record.state = State::Undone;
        record.write(&dir)?;
        self.trash.discard(&pre);
        Ok(record)
    }

    /// Puts back in copies of the roots what call `call` changed in the roots, over whatever
    /// the copies hold there: a fork's roots, copied after the call and taken back to before
    /// it. `copies` pairs roots with their copies; changes in a root it does not name are
    /// left out. The call stays committed and undoable in the roots themselves.
    pub fn undo_onto(&self, call: &str, copies: &[(PathBuf, PathBuf)]) -> Result<(), TxError> {
        self.ready()?;
        let dir = self.record_dir(call)?;
        let _one_at_a_time = lock(&self.committed);
        let record = CallRecord::read(&dir, call)?;
        undoable(&record)?;
        let copy_of = |root: &PathBuf| copies.iter().find(|(r, _)| r == root).map(|(_, c)| c);
        let targets: Vec<Option<Beneath>> = record
            .roots
            .iter()
            .map(|root| {
                copy_of(root)
                    .map(|copy| {
                        Beneath::open(copy).map_err(|e| TxError::io("opening the copy", copy, e))
                    })
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        let pre = dir.join("pre");
        for step in record.steps.iter().rev() {
            if let Some(copy) = &targets[step.change.root] {
                restore_copy(step, copy, &pre)
                    .map_err(|e| TxError::io("undoing a change at", copy.path(), e))?;
            }
        }
        Ok(())
    }

    /// Undoes every call committed after `call`, newest first; stops at the first that cannot
    /// be undone. Answers the calls undone.
    pub fn rewind(&self, call: &str) -> Result<Vec<CallRecord>, TxError> {
        let records = self.records()?;
        let Some(at) = records.iter().position(|r| r.call_id == call) else {
            return Err(TxError::Unknown(call.to_owned()));
        };
        let mut undone = Vec::new();
        for record in records[at + 1..].iter().rev() {
            if record.state == State::Committed {
                undone.push(self.undo(&record.call_id)?);
            }
        }
        Ok(undone)
    }

    fn record_dir(&self, call: &str) -> Result<PathBuf, TxError> {
        // A call id names a folder: letters, digits, `-` and `_` only (warden's are hex
        // digits and a count), so no id reaches outside `calls/`.
        let valid = !call.is_empty()
            && call
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(TxError::Unknown(call.to_owned()));
        }
        Ok(self.dir.join("calls").join(call))
    }

    /// Rolls back the commits of `records` whose warden died before finishing them.
    fn recover(&self, records: &[CallRecord]) -> Result<(), TxError> {
        for record in records {
            if record.state != State::Committing || !gone(&record.owner) {
                continue;
            }
            let dir = self.record_dir(&record.call_id)?;
            let roots = open_roots(&record.roots)?;
            let pre = dir.join("pre");
            for step in record.steps.iter().rev() {
                let root = &roots[step.change.root];
                restore(step, root, &pre, true)
                    .map_err(|e| TxError::io("rolling back a change at", root.path(), e))?;
            }
            tracing::warn!(
                call = %record.call_id,
                "rolled back the changes of a call whose warden stopped while committing them"
            );
            remove_tree(&dir);
        }
        let views = self.views();
        for entry in fs::read_dir(&views).into_iter().flatten().flatten() {
            if owner::left_behind(&entry.file_name().to_string_lossy()) {
                remove_tree(&entry.path());
            }
        }
        Ok(())
    }

    /// Drops the pre-images of `records` (oldest first) past [`KEEP_FOR`], then the oldest
    /// past [`KEEP_BYTES`].
    fn prune(&self, records: Vec<CallRecord>) -> Result<(), TxError> {
        let now = now_ns();
        let mut kept: u64 = 0;
        for mut record in records.into_iter().rev() {
            if record.state != State::Committed {
                continue;
            }
            let old = now.saturating_sub(record.committed_ns) > KEEP_FOR.as_nanos();
            let why = if old {
                Some(format!("older than {} days", KEEP_FOR.as_secs() / 86_400))
            } else if kept + record.pre_bytes() > KEEP_BYTES {
                Some(format!(
                    "newer calls' pre-images fill the {} MiB kept",
                    KEEP_BYTES >> 20
                ))
            } else {
                kept += record.pre_bytes();
                None
            };
            if let Some(why) = why {
                let dir = self.record_dir(&record.call_id)?;
                self.trash.discard(&dir.join("pre"));
                tracing::info!(call = %record.call_id, "dropped the pre-images of a call: {why}");
                record.state = State::Dropped;
                record.dropped = Some(why);
                record.write(&dir)?;
            }
        }
        Ok(())
    }
}

impl View {
    /// Starts the call: a conflict is a path another call committed after this, not after the
    /// view was made (a sandbox prepared ahead of its call sees the commits made meanwhile).
    pub fn begin(&mut self) {
        self.since = lock(&self.store.committed).count;
        // A view whose folder cannot be touched keeps the time it was made at.
        if let Ok(now) = Moment::now(&self.dir) {
            self.started = now;
        }
    }

    /// The overlay folders of root number `i`.
    pub fn layer(&self, i: usize) -> Layer {
        let dir = self.dir.join(i.to_string());
        Layer {
            upper: dir.join("upper"),
            work: dir.join("work"),
        }
    }

    /// The roots it views.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// What the call changed. Read once every process of the call is gone, or once what a
    /// copy of the roots holds is staged.
    pub fn changes(&self) -> Result<ChangeSet, TxError> {
        if let Some(staged) = &self.staged {
            return Ok(ChangeSet {
                roots: self.roots.clone(),
                changes: in_order(staged.clone()),
            });
        }
        let mut changes = Vec::new();
        for (i, root) in self.roots.iter().enumerate() {
            let lower = Beneath::open(root).map_err(|e| TxError::io("opening", root, e))?;
            changes.extend(scan(&self.layer(i).upper, &lower, i)?);
        }
        Ok(ChangeSet {
            roots: self.roots.clone(),
            changes,
        })
    }

    /// Applies `changes` (this view's) to the roots as call `call` of `tool`, keeping what they
    /// replace for undo. Refused, and nothing applied, when a call that committed after this
    /// view was made changed one of the same paths ([`TxError::Conflict`]) or when the
    /// changes and what they replace hold more than `limit` bytes ([`TxError::TooLarge`]).
    pub fn commit(
        self,
        call: &str,
        tool: &str,
        changes: &ChangeSet,
        limit: u64,
    ) -> Result<(), TxError> {
        self.commit_in(call, tool, changes, limit)
    }

    /// [`View::commit`], the view kept.
    pub(crate) fn commit_in(
        &self,
        call: &str,
        tool: &str,
        changes: &ChangeSet,
        limit: u64,
    ) -> Result<(), TxError> {
        let replaced = changes.replaced_bytes();
        let bytes = changes.bytes() + replaced;
        if bytes > limit {
            return Err(TxError::TooLarge { bytes, limit });
        }
        if changes.changes.is_empty() {
            return Ok(());
        }
        let store = self.store.clone();
        let mut committed = lock(&store.committed);
        let paths: Vec<PathBuf> = changes
            .changes
            .iter()
            .map(|c| self.roots[c.root].join(&c.path))
            .collect();
        // This process's commits since the call started, then anyone's (another warden's, an
        // undo's): an entry whose status changed since.
        let roots = open_roots(&self.roots)?;
        let mut clashes = Vec::new();
        for (path, change) in paths.iter().zip(&changes.changes) {
            let ours = committed.last.get(path).is_some_and(|&at| at > self.since);
            let theirs = roots[change.root]
                .lstat(&change.path)
                .map_err(|e| TxError::io("reading", path, e))?
                .is_some_and(|stat| Moment::of(&stat) > self.started);
            if ours || theirs || self.clashed.contains(path) {
                clashes.push(path.clone());
            }
        }
        if !clashes.is_empty() {
            return Err(TxError::Conflict {
                call: None,
                paths: clashes,
            });
        }
        self.apply(&store, &roots, call, tool, changes)?;
        // The bounds are applied at the store's first use, then after every
        // [`PRUNE_EVERY`] commits or an eighth of [`KEEP_BYTES`] of pre-images: reading every
        // record after each commit would make a commit's cost grow with the store.
        committed.unpruned.0 += 1;
        committed.unpruned.1 += replaced;
        if committed.unpruned.0 >= PRUNE_EVERY || committed.unpruned.1 >= KEEP_BYTES / 8 {
            committed.unpruned = (0, 0);
            store.prune(store.read_records()?)?;
        }
        committed.count += 1;
        let count = committed.count;
        committed.last.extend(paths.into_iter().map(|p| (p, count)));
        Ok(())
    }

    fn apply(
        &self,
        store: &Store,
        roots: &[Beneath],
        call: &str,
        tool: &str,
        changes: &ChangeSet,
    ) -> Result<(), TxError> {
        let dir = store.record_dir(call)?;
        let pre = dir.join("pre");
        fs::create_dir_all(&pre).map_err(|e| TxError::io("making", &pre, e))?;
        // Removals first (a folder's entries before it), then additions and modifications
        // (a folder before its entries): the order the scan found them in, within each.
        let (removals, others): (Vec<&Change>, Vec<&Change>) =
            changes.changes.iter().partition(|c| c.after.is_none());
        let steps: Vec<Step> = removals
            .into_iter()
            .chain(others)
            .enumerate()
            .map(|(k, change)| Step {
                change: change.clone(),
                pre: change
                    .before
                    .as_ref()
                    .filter(|b| b.kind == Kind::File)
                    .map(|_| k.to_string()),
            })
            .collect();
        let mut record = CallRecord {
            call_id: call.to_owned(),
            tool: tool.to_owned(),
            state: State::Committing,
            committed_ns: now_ns(),
            owner: store.owner.clone(),
            roots: self.roots.clone(),
            steps,
            dropped: None,
        };
        record.write(&dir)?;
        for (k, step) in record.steps.iter().enumerate() {
            let root = &roots[step.change.root];
            let upper = self.layer(step.change.root).upper;
            if let Err(e) = apply(step, root, &upper, &pre, self.copies) {
                // Put back what was applied, and forget the call: it changed nothing.
                for done in record.steps[..=k].iter().rev() {
                    let _ = restore(done, &roots[done.change.root], &pre, true);
                }
                remove_tree(&dir);
                return Err(TxError::io(
                    "applying a change at",
                    &root.path().join(&step.change.path),
                    e,
                ));
            }
        }
        record.state = State::Committed;
        record.write(&dir)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.store.trash.discard(&self.dir);
    }
}

impl ChangeSet {
    /// Bytes of the files the changes leave.
    pub fn bytes(&self) -> u64 {
        self.changes
            .iter()
            .filter_map(|c| c.after.as_ref()?.size)
            .sum()
    }

    /// Bytes of the files the changes replace or remove: their pre-images.
    pub fn replaced_bytes(&self) -> u64 {
        self.changes
            .iter()
            .filter_map(|c| c.before.as_ref()?.size)
            .sum()
    }

    /// A sha256 of the changes as [`ChangeSet::to_json`] lists them all: what the call log
    /// records.
    pub fn digest(&self) -> String {
        let all = self.to_json(usize::MAX);
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(all["changes"].to_string()))
        )
    }

    /// The changes as an answer shows them: the first `max`, with how many there are.
    pub fn to_json(&self, max: usize) -> Value {
        let shown: Vec<Value> = self
            .changes
            .iter()
            .take(max)
            .map(|c| {
                let entry = c.after.as_ref().or(c.before.as_ref());
                let mut v = json!({
                    "root": self.roots[c.root],
                    "path": c.path,
                    "change": c.kind(),
                    "type": entry.map(|e| e.kind),
                });
                if let Some(after) = &c.after {
                    extend(&mut v, after);
                }
                v
            })
            .collect();
        json!({
            "count": self.changes.len(),
            "bytes": self.bytes(),
            "changes": shown,
        })
    }
}

fn extend(v: &mut Value, entry: &crate::Entry) {
    if entry.kind != Kind::Symlink {
        v["mode"] = format!("{:04o}", entry.mode).into();
    }
    if let Some(size) = entry.size {
        v["size"] = size.into();
    }
    if let Some(sha) = &entry.sha256 {
        v["sha256"] = sha.as_str().into();
    }
    if let Some(target) = &entry.target {
        v["target"] = target.to_string_lossy().into_owned().into();
    }
}

/// Whether `record`'s call can be put back: committed, its pre-images kept.
fn undoable(record: &CallRecord) -> Result<(), TxError> {
    let why = match record.state {
        State::Committed => return Ok(()),
        State::Committing => "it is being committed".to_owned(),
        State::Undone => "it was undone already".to_owned(),
        State::Dropped => format!(
            "its pre-images were dropped ({})",
            record.dropped.as_deref().unwrap_or("the store's bounds")
        ),
    };
    Err(TxError::NotUndoable {
        call: record.call_id.clone(),
        why,
    })
}

/// The paths whose entries are not what `record` left: what an undo would overwrite.
fn changed_since(record: &CallRecord, roots: &[Beneath]) -> Result<Vec<PathBuf>, TxError> {
    let added: BTreeSet<(usize, &Path)> = record
        .steps
        .iter()
        .filter(|s| s.change.before.is_none())
        .map(|s| (s.change.root, s.change.path.as_path()))
        .collect();
    let mut changed = Vec::new();
    for step in &record.steps {
        let (root, path) = (&roots[step.change.root], &step.change.path);
        let now = root
            .entry(path)
            .map_err(|e| TxError::io("reading", &root.path().join(path), e))?;
        if now != step.change.after {
            changed.push(root.path().join(path));
            continue;
        }
        // A folder the call added must hold nothing a later call put there.
        if step.change.before.is_none() && now.as_ref().is_some_and(|e| e.kind == Kind::Dir) {
            let names = root
                .names(path)
                .map_err(|e| TxError::io("listing", &root.path().join(path), e))?;
            if names
                .iter()
                .any(|n| !added.contains(&(step.change.root, path.join(n).as_path())))
            {
                changed.push(root.path().join(path));
            }
        }
    }
    Ok(changed)
}

fn open_roots(roots: &[PathBuf]) -> Result<Vec<Beneath>, TxError> {
    roots
        .iter()
        .map(|r| Beneath::open(r).map_err(|e| TxError::io("opening the root", r, e)))
        .collect()
}

/// Gives the upper layer `upper` the mode and owner of `root`: the overlay shows its root
/// folder as the upper layer's, so a sandbox's user may write where it may in the root.
fn like_root(upper: &Path, root: &Path) -> Result<(), TxError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(root).map_err(|e| TxError::io("reading", root, e))?;
    fs::set_permissions(upper, meta.permissions()).map_err(|e| TxError::io("setting", upper, e))?;
    match std::os::unix::fs::chown(upper, Some(meta.uid()), Some(meta.gid())) {
        // Not root: what warden makes is its own user's, as the root's writes would be.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(()),
        other => other.map_err(|e| TxError::io("setting the owner of", upper, e)),
    }
}

fn set_private(dir: &Path) -> Result<(), TxError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| TxError::io("making private", dir, e))
}

/// True when `owner` no longer runs: gone from this machine, or another boot's (nothing of
/// it runs now; a home is not shared between machines).
fn gone(owner: &str) -> bool {
    owner::liveness(owner) != Liveness::Running
}

fn lock(m: &Mutex<Committed>) -> std::sync::MutexGuard<'_, Committed> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
