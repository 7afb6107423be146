//! Where snapshots are kept: `<home>/snapshots/<id>/` (0700), its archive (`archive.tar`)
//! and what it is of (`snapshot.json`), both 0600; one being written is in a folder of its
//! own in `partial/`, named for its warden, which a later warden removes once that one has
//! stopped. warden's home is outside every grant, so no sandbox reaches them.

use crate::SnapshotError;
use crate::direct::{DirectReader, DirectWriter};
use crate::shell::ShellState;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use warden_core::owner;

/// The folder of the store's snapshots being written, each in a folder of its own until
/// it is kept (renamed to its id).
const PARTIAL: &str = "partial";

/// The most snapshots a home keeps: a new one past it is refused, never an old one evicted
/// (a checkpoint may still name it).
pub const MAX_SNAPSHOTS: usize = 256;
/// The most bytes the archives of a home's snapshots hold together; and the most a fork
/// copies of its read-write roots.
pub const MAX_BYTES: u64 = 4 << 30;

/// What a snapshot is of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// `snap-` and 32 hex digits.
    pub id: String,
    /// The tool whose session it was taken of.
    pub tool: String,
    /// The policy in force then (`policy_digest` of the call log): a restore under another
    /// policy is refused.
    pub policy_digest: String,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// The archive's size.
    pub bytes: u64,
    /// `sha256:` of the policy's digest, the archive as the sandbox's `tar` wrote it, and the
    /// shell's state: a snapshot of a sandbox no call changed since the last is that one
    /// again, not another copy.
    pub digest: String,
    /// The shell's state, without the variables the policy sets from warden's environment,
    /// its secret ones, and the client's.
    pub shell: ShellState,
    /// Where the tool's read-write roots stood, when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<crate::RootsMark>,
}

/// A folder of snapshots.
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The snapshots in `dir` (made at the first snapshot).
    pub fn at(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
        }
    }

    /// Where it is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new snapshot's archive, under a new id, to be written and then kept (or dropped,
    /// leaving nothing). What a warden that stopped while writing one left is removed first.
    pub fn begin(&self) -> Result<Partial, SnapshotError> {
        let id = new_id()?;
        let io = |source| SnapshotError::Store {
            path: self.dir.clone(),
            source,
        };
        let partials = self.dir.join(PARTIAL);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&partials)
            .map_err(io)?;
        sweep(&partials, "a snapshot being written");
        // Written in a folder of its own, then renamed: a snapshot is whole or absent.
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let dir = partials.join(owner::file_name(&owner::this_process(), n));
        fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io)?;
        let archive = DirectWriter::create(&dir.join("archive.tar"));
        let archive = archive.map_err(|e| {
            let _ = fs::remove_dir(&dir);
            io(e)
        })?;
        Ok(Partial {
            id,
            dir,
            archive,
            kept: false,
        })
    }

    /// Keeps `partial` as a snapshot of what `meta` says (its id and size are the
    /// partial's), within the bounds; answers the snapshot kept: an earlier one of the same
    /// tool and digest, when there is one (`partial` is then dropped).
    pub fn keep(&self, meta: Meta, mut partial: Partial) -> Result<Meta, SnapshotError> {
        let meta = Meta {
            id: partial.id.clone(),
            bytes: partial.archive.written(),
            ..meta
        };
        let kept = self.list()?;
        if let Some(same) = kept
            .iter()
            .rev()
            .find(|m| m.digest == meta.digest && m.tool == meta.tool)
        {
            return Ok(same.clone());
        }
        let bytes: u64 = kept.iter().map(|m| m.bytes).sum::<u64>() + meta.bytes;
        if kept.len() >= MAX_SNAPSHOTS || bytes > MAX_BYTES {
            return Err(SnapshotError::Full {
                count: kept.len(),
                bytes,
            });
        }
        partial
            .archive
            .finish()
            .and_then(|()| write_new(&partial.dir.join("snapshot.json"), &json(&meta)))
            .and_then(|()| fs::rename(&partial.dir, self.dir.join(&meta.id)))
            .map_err(|source| SnapshotError::Store {
                path: self.dir.clone(),
                source,
            })?;
        partial.kept = true;
        Ok(meta)
    }

    /// Removes the snapshots that wardens which stopped while writing them left (a server
    /// does as it starts; a snapshot does too, before it begins).
    pub fn sweep(&self) {
        sweep(&self.dir.join(PARTIAL), "a snapshot being written");
    }

    /// Snapshot `id`'s record.
    pub fn meta(&self, id: &str) -> Result<Meta, SnapshotError> {
        let path = self.folder(id)?.join("snapshot.json");
        let text = fs::read(&path).map_err(|e| self.missing(id, e))?;
        serde_json::from_slice(&text).map_err(|e| SnapshotError::Corrupt {
            path,
            why: e.to_string(),
        })
    }

    /// Snapshot `id`'s archive opened to be read, and its size.
    pub fn open_archive(&self, id: &str) -> Result<(DirectReader, u64), SnapshotError> {
        let opened = DirectReader::open(&self.folder(id)?.join("archive.tar"))
            .map(|file| (file.size(), file));
        let (len, file) = opened.map_err(|e| self.missing(id, e))?;
        Ok((file, len))
    }

    /// Every snapshot, oldest first.
    pub fn list(&self) -> Result<Vec<Meta>, SnapshotError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SnapshotError::Store {
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut all = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_id(&name) {
                all.push(self.meta(&name)?);
            }
        }
        all.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(all)
    }

    /// Removes snapshot `id`.
    pub fn delete(&self, id: &str) -> Result<(), SnapshotError> {
        fs::remove_dir_all(self.folder(id)?).map_err(|e| self.missing(id, e))
    }

    fn folder(&self, id: &str) -> Result<PathBuf, SnapshotError> {
        if !is_id(id) {
            return Err(SnapshotError::NotFound(id.to_owned()));
        }
        Ok(self.dir.join(id))
    }

    fn missing(&self, id: &str, e: std::io::Error) -> SnapshotError {
        if e.kind() == std::io::ErrorKind::NotFound {
            SnapshotError::NotFound(id.to_owned())
        } else {
            SnapshotError::Store {
                path: self.dir.join(id),
                source: e,
            }
        }
    }
}

/// A snapshot being written, in a folder of its own that is removed unless it is kept.
pub struct Partial {
    id: String,
    dir: PathBuf,
    archive: DirectWriter,
    kept: bool,
}

impl Partial {
    /// The id it is kept under.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Write for Partial {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.archive.write(data)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.archive.flush()
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.kept {
            remove_left(&self.dir, "a snapshot not kept");
        }
    }
}

/// Removes what processes that no longer run left in `dir` (`what`, for a warning), each
/// named by [`owner::file_name`].
pub(crate) fn sweep(dir: &Path, what: &str) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if owner::left_behind(&entry.file_name().to_string_lossy()) {
            remove_left(&entry.path(), what);
        }
    }
}

/// Removes the folder `dir` (`what`, for a warning), gone already or not.
pub(crate) fn remove_left(dir: &Path, what: &str) {
    if let Err(e) = fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("{what} at {} was not removed: {e}", dir.display());
    }
}

/// A new snapshot id: `snap-` and 128 random bits in hex.
fn new_id() -> Result<String, SnapshotError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| SnapshotError::Random(e.to_string()))?;
    Ok(format!("snap-{}", hex::encode(bytes)))
}

/// Whether `name` is a snapshot id (so never a path).
fn is_id(name: &str) -> bool {
    name.strip_prefix("snap-")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn json(meta: &Meta) -> Vec<u8> {
    // A record of strings, numbers and a map of strings always serializes.
    serde_json::to_vec_pretty(meta).unwrap_or_default()
}

fn write_new(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(data)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot of `archive` whose digest is named for `name`.
    fn meta(name: &str, created_ms: u64) -> Meta {
        Meta {
            id: String::new(),
            tool: "shell".into(),
            policy_digest: "sha256:00".into(),
            created_ms,
            bytes: 0,
            digest: format!("sha256:{name}"),
            shell: ShellState::default(),
            roots: None,
        }
    }

    fn add(store: &Store, meta: Meta, archive: &[u8]) -> Result<Meta, SnapshotError> {
        let mut partial = store.begin()?;
        partial.write_all(archive).unwrap();
        store.keep(meta, partial)
    }

    #[test]
    fn snapshots_are_kept_listed_and_deleted_by_id_only() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::at(&home.path().join("snapshots"));
        assert!(store.list().unwrap().is_empty());
        let b = add(&store, meta("b", 2), b"abc").unwrap();
        assert_eq!(b.bytes, 3);
        let a = add(&store, meta("a", 1), b"x").unwrap().id;
        assert_eq!(
            add(&store, meta("b", 5), b"abc").unwrap(),
            b,
            "the same snapshot again"
        );
        let b = b.id;
        let ids: Vec<String> = store.list().unwrap().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, [a.clone(), b.clone()], "oldest first");
        let (mut file, len) = store.open_archive(&b).unwrap();
        let mut kept = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut kept).unwrap();
        assert_eq!((kept.as_slice(), len), (&b"abc"[..], 3));
        let names = |dir: &Path| std::fs::read_dir(dir).unwrap().count();
        assert_eq!(names(store.dir()), 3, "the two and the folder of partials");
        assert_eq!(
            names(&store.dir().join(PARTIAL)),
            0,
            "nothing left of the snapshot found again"
        );
        store.delete(&a).unwrap();
        assert!(matches!(store.meta(&a), Err(SnapshotError::NotFound(_))));
        for bad in ["../snapshots", "snap-../../x", "", "snap-zz"] {
            assert!(
                matches!(store.open_archive(bad), Err(SnapshotError::NotFound(_))),
                "{bad}"
            );
        }
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode(&home.path().join("snapshots")).mode() & 0o777, 0o700);
        let archive = home.path().join("snapshots").join(&b).join("archive.tar");
        assert_eq!(mode(&archive).mode() & 0o777, 0o600);
    }

    #[test]
    fn a_full_store_refuses_a_new_snapshot_and_keeps_the_old_ones() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::at(home.path());
        let first = add(&store, meta("first", 1), b"").unwrap();
        // As though it were as large as the store lets a home keep, but for a byte.
        let record = home.path().join(&first.id).join("snapshot.json");
        let large = Meta {
            bytes: MAX_BYTES - 1,
            ..first
        };
        std::fs::write(&record, json(&large)).unwrap();
        let refused = add(&store, meta("second", 2), b"xy");
        assert!(
            matches!(refused, Err(SnapshotError::Full { count: 1, .. })),
            "{refused:?}"
        );
        assert_eq!(store.list().unwrap(), [large]);
        let names = |dir: &Path| std::fs::read_dir(dir).unwrap().count();
        assert_eq!(
            names(home.path()),
            2,
            "the first and the folder of partials"
        );
        let partials = home.path().join(PARTIAL);
        assert_eq!(names(&partials), 0, "nothing left of the refused one");
    }

    #[test]
    fn what_a_stopped_warden_was_writing_goes_and_a_live_ones_stays() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::at(home.path());
        let partials = home.path().join(PARTIAL);
        let me = owner::this_process();
        let (head, _) = me.rsplit_once(':').expect("three parts");
        let stopped = partials.join(owner::file_name(&format!("{head}:1"), 0));
        let live = partials.join(owner::file_name(&me, u64::MAX));
        for dir in [&stopped, &live] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("archive.tar"), b"half").unwrap();
        }
        let writing = store.begin().unwrap();
        assert!(!stopped.exists(), "a stopped warden's partial is removed");
        assert!(live.exists(), "a live warden's partial is its own");
        std::fs::create_dir_all(&stopped).unwrap();
        store.sweep();
        assert!(!stopped.exists() && live.exists());
        assert!(
            partials.join(writing.dir.file_name().unwrap()).exists(),
            "the sweep leaves the snapshot being written"
        );
        drop(writing);
        assert_eq!(std::fs::read_dir(&partials).unwrap().count(), 1);
    }
}
