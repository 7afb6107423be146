//! Whether a session's copies still hold what its read-write roots do. Its commands are
//! settled against the copies' manifest; when the roots change otherwise (another call, a
//! `warden undo` or a snapshot's restore, a person's editor), the copies are out of date and
//! the session's next command needs fresh ones. Checked before each command by the entries'
//! status (a file whose size, mode and mtime are as recorded is not read), with a walk of
//! each root.

use super::back::{Staged, host_changed};
use super::{Carried, Copied, CopiedIn, Entry, Manifest, Root, carried};
use cap_std::fs::{Dir, MetadataExt};
use sha2::{Digest, Sha256};
use std::io;
use std::path::Path;

impl CopiedIn {
    /// Takes what `staged` read as what the copies now hold, once their changes are
    /// committed: the roots hold it too. A file keeps the time it was recorded with while its
    /// content is the same; a changed one takes the root's, where the root's file holds the
    /// same bytes (else its content is what the next check compares).
    pub(crate) fn rebase(&mut self, copied: &Copied, staged: Staged) {
        for (index, mut manifest) in staged.manifests {
            let Some(old) = self.manifests.iter_mut().find(|(i, _)| *i == index) else {
                continue;
            };
            if let Some(root) = copied.roots.get(index) {
                with_times(root, &old.1, &mut manifest);
            }
            old.1 = manifest;
        }
    }

    /// Whether every read-write root holds what its copy was last settled against.
    pub(crate) fn current(&self, copied: &Copied) -> bool {
        self.manifests.iter().all(|(index, manifest)| {
            copied.roots.get(*index).is_some_and(|root| {
                let found = Dir::open_ambient_dir(&root.host, cap_std::ambient_authority())
                    .and_then(|dir| {
                        let mut seen = 0;
                        let same = unchanged(&dir, &dir, Path::new(""), manifest, &mut seen)?;
                        Ok(same && seen == manifest.len())
                    });
                found.unwrap_or(false)
            })
        })
    }
}

/// Whether the entries below `rel` (the folder `dir` of the root `root`) are as `manifest`
/// has them, counting those it carries in `seen`.
fn unchanged(
    root: &Dir,
    dir: &Dir,
    rel: &Path,
    manifest: &Manifest,
    seen: &mut usize,
) -> io::Result<bool> {
    for entry in dir.entries()? {
        let name = entry?.file_name();
        let path = rel.join(&name);
        let kind = dir.symlink_metadata(&name)?.file_type();
        let carried = carried(dir, &name, &path, kind)?;
        if matches!(carried, Carried::LinkOut(_) | Carried::Other) {
            continue;
        }
        *seen += 1;
        let was = manifest.get(&path);
        if was.is_none() || host_changed(root, &path, was) {
            return Ok(false);
        }
        if matches!(carried, Carried::Dir)
            && !unchanged(root, &dir.open_dir(&name)?, &path, manifest, seen)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Gives each file of `manifest` its time: `old`'s where it records the same file, else the
/// root's where the root's file holds the same bytes; what [`host_changed`] compares first.
fn with_times(root: &Root, old: &Manifest, manifest: &mut Manifest) {
    let dir = Dir::open_ambient_dir(&root.host, cap_std::ambient_authority()).ok();
    for (path, entry) in manifest.iter_mut() {
        let Entry::File {
            size,
            mtime,
            sha256,
            mode,
        } = entry
        else {
            continue;
        };
        if let Some(Entry::File {
            mtime: was,
            sha256: s,
            mode: m,
            ..
        }) = old.get(path)
            && (s, m) == (&*sha256, &*mode)
        {
            *mtime = *was;
            continue;
        }
        let Some(meta) = dir.as_ref().and_then(|d| d.symlink_metadata(path).ok()) else {
            continue;
        };
        let same = meta.is_file()
            && meta.size() == *size
            && meta.mode() & 0o777 == *mode
            && dir
                .as_ref()
                .and_then(|d| d.read(path).ok())
                .is_some_and(|bytes| Sha256::digest(&bytes).as_slice() == sha256.as_slice());
        if same {
            *mtime = (meta.mtime(), meta.mtime_nsec());
        }
    }
}
