//! Where snapshots are kept: `<home>/snapshots/<id>/` (0700), its archive (`archive.tar`)
//! and what it is of (`snapshot.json`), both 0600. warden's home is outside every grant, so
//! no sandbox reaches them.

use crate::SnapshotError;
use crate::shell::ShellState;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

    /// Keeps `archive` as snapshot `meta.id`, within the bounds; answers the snapshot kept:
    /// an earlier one of the same tool and digest, when there is one.
    pub fn add(&self, meta: Meta, archive: &[u8]) -> Result<Meta, SnapshotError> {
        let kept = self.list()?;
        if let Some(same) = kept
            .iter()
            .rev()
            .find(|m| m.digest == meta.digest && m.tool == meta.tool)
        {
            return Ok(same.clone());
        }
        let bytes: u64 = kept.iter().map(|m| m.bytes).sum::<u64>() + archive.len() as u64;
        if kept.len() >= MAX_SNAPSHOTS || bytes > MAX_BYTES {
            return Err(SnapshotError::Full {
                count: kept.len(),
                bytes,
            });
        }
        let io = |source| SnapshotError::Store {
            path: self.dir.clone(),
            source,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io)?;
        // Written under a name of its own, then renamed: a snapshot is whole or absent.
        let partial = self.dir.join(format!(".{}.partial", meta.id));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&partial)
            .map_err(io)?;
        let written = write_new(&partial.join("archive.tar"), archive)
            .and_then(|()| write_new(&partial.join("snapshot.json"), &json(&meta)))
            .and_then(|()| fs::rename(&partial, self.dir.join(&meta.id)));
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&partial);
            return Err(io(e));
        }
        Ok(meta)
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
    pub fn open_archive(&self, id: &str) -> Result<(fs::File, u64), SnapshotError> {
        let opened = fs::File::open(self.folder(id)?.join("archive.tar"))
            .and_then(|file| Ok((file.metadata()?.len(), file)));
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

/// A new snapshot id: `snap-` and 128 random bits in hex.
pub fn new_id() -> Result<String, SnapshotError> {
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

    fn meta(id: &str, bytes: u64, created_ms: u64) -> Meta {
        Meta {
            id: id.into(),
            tool: "shell".into(),
            policy_digest: "sha256:00".into(),
            created_ms,
            bytes,
            digest: format!("sha256:{id}"),
            shell: ShellState::default(),
            roots: None,
        }
    }

    #[test]
    fn snapshots_are_kept_listed_and_deleted_by_id_only() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::at(&home.path().join("snapshots"));
        assert!(store.list().unwrap().is_empty());
        let (a, b) = (new_id().unwrap(), new_id().unwrap());
        store.add(meta(&b, 3, 2), b"abc").unwrap();
        store.add(meta(&a, 1, 1), b"x").unwrap();
        let again = Meta {
            id: new_id().unwrap(),
            ..meta(&b, 3, 5)
        };
        assert_eq!(
            store.add(again, b"abc").unwrap().id,
            b,
            "the same snapshot again"
        );
        let ids: Vec<String> = store.list().unwrap().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, [a.clone(), b.clone()], "oldest first");
        let (mut file, len) = store.open_archive(&b).unwrap();
        let mut kept = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut kept).unwrap();
        assert_eq!((kept.as_slice(), len), (&b"abc"[..], 3));
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
        let first = new_id().unwrap();
        store.add(meta(&first, MAX_BYTES - 1, 1), b"").unwrap();
        let refused = store.add(meta(&new_id().unwrap(), 2, 2), b"xy");
        assert!(
            matches!(refused, Err(SnapshotError::Full { count: 1, .. })),
            "{refused:?}"
        );
        assert_eq!(store.list().unwrap().len(), 1);
    }
}
