//! The write-back of read-write roots: the container's copies read back while it runs,
//! compared with what was copied in, refused as a whole on a conflict, else applied change
//! by change, each file written beside and renamed over, through cap-std handles.

use super::{Copied, CopiedIn, Entry, Manifest, Root, open_root, stays_inside};
use crate::engine::Engine;
use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use warden_core::{ByteSize, ErrorKind, ToolError};
use warden_tx::View;

/// What the container holds at a path of a root, as read back: with modes.
enum Found {
    File(Vec<u8>, u32),
    Dir(u32),
    Link(PathBuf),
}

/// One change to make on the host.
enum Change {
    /// A folder made, or given another mode: the mode it has in the copy.
    Dir(PathBuf, u32),
    File(PathBuf, Vec<u8>, u32),
    Link(PathBuf, PathBuf),
    Remove(PathBuf, Entry),
}

impl Change {
    fn path(&self) -> &Path {
        match self {
            Change::Dir(p, _) | Change::File(p, ..) | Change::Link(p, _) | Change::Remove(p, _) => {
                p
            }
        }
    }
}

/// One read-write root as the container's copy holds it, read back while it ran.
pub(crate) struct ReadBack {
    /// Its index in [`Copied::roots`].
    index: usize,
    root: Root,
    manifest: Manifest,
    tar: Vec<u8>,
}

impl CopiedIn {
    /// Writes the read-write roots back from the container `id`, which must still run (its
    /// copies end with it), in place: what a session's container comes to at its end.
    /// Answers notes for the answer. A conflict in any root refuses them all: nothing is
    /// written.
    pub(crate) async fn write_back(
        &self,
        copied: &Copied,
        engine: &Engine,
        docker: &Docker,
        id: &str,
        tool: &str,
    ) -> Result<Vec<String>, ToolError> {
        let copies = self.read_back(copied, engine, docker, id).await?;
        in_place(copies, tool).await
    }

    /// Reads the read-write roots back from the container `id`, which must still run: a
    /// stopped container's copies are gone, and the engine would hand back empty folders.
    pub(crate) async fn read_back(
        &self,
        copied: &Copied,
        engine: &Engine,
        docker: &Docker,
        id: &str,
    ) -> Result<Vec<ReadBack>, ToolError> {
        let mut copies = Vec::new();
        for (index, manifest) in &self.manifests {
            let Some(root) = copied.roots.get(*index) else {
                continue;
            };
            let tar = download(engine, docker, id, root, copied.limit).await?;
            copies.push(ReadBack {
                index: *index,
                root: root.clone(),
                manifest: manifest.clone(),
                tar,
            });
        }
        if copies.is_empty() {
            return Ok(copies);
        }
        // Only a container that still runs after the reads gave its real copies.
        let running = docker
            .inspect_container(id, None)
            .await
            .ok()
            .and_then(|c| c.state)
            .and_then(|s| s.running)
            .unwrap_or(false);
        if !running {
            let roots: Vec<String> = copies
                .iter()
                .map(|c| c.root.host.display().to_string())
                .collect();
            return Err(ToolError::new(
                ErrorKind::ToolError,
                format!(
                    "the container ended before warden could read back the read-write root{} \
                     {} (a copy ends with its container): nothing was written back",
                    if roots.len() == 1 { "" } else { "s" },
                    roots.join(", ")
                ),
            )
            .with_detail("roots", roots));
        }
        Ok(copies)
    }
}

/// Writes what the containers' copies changed to the host roots, in place, unless the host
/// changed a path a copy changed too: then nothing is written. Answers notes for the answer.
pub(crate) async fn in_place(copies: Vec<ReadBack>, tool: &str) -> Result<Vec<String>, ToolError> {
    if copies.is_empty() {
        return Ok(Vec::new());
    }
    let tool = tool.to_owned();
    tokio::task::spawn_blocking(move || apply(&copies, &tool))
        .await
        .map_err(|e| ToolError::internal(format!("writing back: {e}")))?
}

/// Stages what the containers' copies changed in `view`, a view of their roots, as the call's
/// change set: the roots are untouched until the view commits. Answers the view, with what
/// was staged; on an error the view is dropped, nothing of it kept.
pub(crate) async fn staged(
    copies: Vec<ReadBack>,
    mut view: View,
) -> Result<(View, Staged), ToolError> {
    tokio::task::spawn_blocking(move || stage(&copies, &mut view).map(|staged| (view, staged)))
        .await
        .map_err(|e| ToolError::internal(format!("staging a copy's changes: {e}")))?
}

/// What [`staged`] staged: notes for the answer (what was left out), and each root's
/// manifest as its copy now holds it (what the copy's next changes are read against, once
/// these are committed).
pub(crate) struct Staged {
    pub notes: Vec<String>,
    pub(super) manifests: Vec<(usize, Manifest)>,
}

/// The container's copy of `root`, as a tar, bounded (the copy's tmpfs bounds it too).
async fn download(
    engine: &Engine,
    docker: &Docker,
    id: &str,
    root: &Root,
    limit: u64,
) -> Result<Vec<u8>, ToolError> {
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(&root.guest)
        .build();
    let mut stream = docker.download_from_container(id, Some(options));
    // File bytes, and a header and padding per file on top.
    let bound = limit.saturating_mul(2).saturating_add(16 << 20);
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            engine.failure(&format!("read {} back from a container", root.guest), &e)
        })?;
        tar.extend_from_slice(&chunk);
        if tar.len() as u64 > bound {
            return Err(ToolError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "the container's copy of {} grew past twice the copy limit of {} (with \
                     the archive's headers): nothing was written back",
                    root.host.display(),
                    ByteSize(limit)
                ),
            ));
        }
    }
    Ok(tar)
}

/// One root's changes, planned before any root is written.
struct Planned<'a> {
    root: &'a Root,
    dir: Dir,
    changes: Vec<Change>,
    /// The paths (on the host) that both sides changed.
    conflicts: Vec<PathBuf>,
    tar: &'a [u8],
}

/// Reads the containers' copies, and writes their changes to the host roots unless the host
/// changed a path the container changed too, in any root: then nothing is written, and each
/// changed root's copy is kept in a file the error names.
fn apply(copies: &[ReadBack], tool: &str) -> Result<Vec<String>, ToolError> {
    let mut notes = Vec::new();
    let mut planned = Vec::new();
    for ReadBack {
        root,
        manifest,
        tar,
        ..
    } in copies
    {
        let found = read_copy(root, tar, &mut notes)?;
        let changes = changes(manifest, &found);
        if changes.is_empty() {
            continue;
        }
        let dir = open_root(&root.host)?;
        let conflicts = changes
            .iter()
            .map(Change::path)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|p| host_changed(&dir, p, manifest.get(*p)))
            .map(|p| root.host.join(p))
            .collect();
        planned.push(Planned {
            root,
            dir,
            changes,
            conflicts,
            tar,
        });
    }
    if planned.iter().any(|p| !p.conflicts.is_empty()) {
        return Err(refused(&planned, tool));
    }
    for p in &planned {
        let owner = owner_when_root(&p.dir);
        write(&p.dir, &p.changes, owner).map_err(|(path, e)| {
            ToolError::new(
                ErrorKind::Internal,
                format!(
                    "writing back {} failed at {} ({e}); the changes before it are written",
                    p.root.host.display(),
                    path.display()
                ),
            )
            .with_detail("root", p.root.host.display().to_string())
        })?;
        notes.push(format!(
            "{} change{} written back to {}",
            p.changes.len(),
            if p.changes.len() == 1 { "" } else { "s" },
            p.root.host.display()
        ));
    }
    Ok(notes)
}

/// Stages each copy's changes in `view` (see [`staged`]), each root by its host folder. A
/// path the host changed since the copy's manifest was taken is staged as a clash: the
/// view's commit refuses it as a conflict.
fn stage(copies: &[ReadBack], view: &mut View) -> Result<Staged, ToolError> {
    let mut staged = Staged {
        notes: Vec::new(),
        manifests: Vec::new(),
    };
    for ReadBack {
        index,
        root,
        manifest,
        tar,
    } in copies
    {
        let found = read_copy(root, tar, &mut staged.notes)?;
        let Some(number) = view.roots().iter().position(|r| *r == root.host) else {
            return Err(ToolError::internal(format!(
                "the call's view has no root {}",
                root.host.display()
            )));
        };
        let paths: BTreeSet<PathBuf> = changes(manifest, &found)
            .iter()
            .map(|c| c.path().to_owned())
            .collect();
        let dir = if paths.is_empty() {
            None
        } else {
            Some(open_root(&root.host)?)
        };
        for path in paths {
            let now = found.get(&path).map(|f| match f {
                Found::File(bytes, mode) => warden_tx::Copied::File { bytes, mode: *mode },
                Found::Dir(mode) => warden_tx::Copied::Dir { mode: *mode },
                Found::Link(target) => warden_tx::Copied::Link(target),
            });
            view.stage(number, &path, now).map_err(|e| {
                ToolError::internal(format!(
                    "staging what the container changed in {}: {e}",
                    root.host.display()
                ))
            })?;
            if dir
                .as_ref()
                .is_some_and(|d| host_changed(d, &path, manifest.get(&path)))
            {
                view.clash(number, &path);
            }
        }
        staged.manifests.push((*index, manifest_of(&found)));
    }
    Ok(staged)
}

/// The manifest of what a copy holds: what its next changes are read against. Without a
/// time: the host's file is compared by its content.
fn manifest_of(found: &BTreeMap<PathBuf, Found>) -> Manifest {
    found
        .iter()
        .map(|(path, f)| {
            let entry = match f {
                Found::File(bytes, mode) => Entry::File {
                    size: bytes.len() as u64,
                    mtime: (0, 0),
                    sha256: Sha256::digest(bytes).into(),
                    mode: *mode,
                },
                Found::Dir(mode) => Entry::Dir(*mode),
                Found::Link(target) => Entry::Link(target.clone()),
            };
            (path.clone(), entry)
        })
        .collect()
}

/// The refusal of a write-back with conflicts: the paths, and where each changed root's copy
/// was kept (`details.conflicts`, `details.kept`).
fn refused(planned: &[Planned<'_>], tool: &str) -> ToolError {
    let conflicts: Vec<String> = planned
        .iter()
        .flat_map(|p| p.conflicts.iter().map(|c| c.display().to_string()))
        .collect();
    let mut kept = Vec::new();
    let mut where_kept = Vec::new();
    for p in planned {
        let root = p.root.host.display();
        match keep(p.tar, tool) {
            Ok(path) => {
                where_kept.push(format!("{root} is kept in {} (a tar)", path.display()));
                kept.push(path.display().to_string());
            }
            Err(e) => where_kept.push(format!("{root} could not be kept ({e})")),
        }
    }
    ToolError::new(
        ErrorKind::ToolError,
        format!(
            "nothing was written back: the host changed {} since {} copied in, and the \
             container changed {} too ({}); warden never merges. The container's copy of {}",
            if conflicts.len() == 1 {
                "a path"
            } else {
                "paths"
            },
            if conflicts.len() == 1 {
                "it was"
            } else {
                "they were"
            },
            if conflicts.len() == 1 { "it" } else { "them" },
            conflicts.join(", "),
            where_kept.join("; of "),
        ),
    )
    .with_detail("conflicts", conflicts)
    .with_detail("kept", kept)
}

/// The entries of the container's copy, by their path inside the root.
fn read_copy(
    root: &Root,
    tar: &[u8],
    notes: &mut Vec<String>,
) -> Result<BTreeMap<PathBuf, Found>, ToolError> {
    let bad = |e: io::Error| {
        ToolError::internal(format!("reading the copy of {}: {e}", root.host.display()))
    };
    let mut found = BTreeMap::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let raw = entry.path().map_err(bad)?.into_owned();
        // The engine names entries under the guest folder's own name: `w/…`.
        let mut parts = raw.components();
        parts.next();
        let rel: PathBuf = parts.as_path().to_owned();
        if rel.as_os_str().is_empty() {
            continue;
        }
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            notes.push(format!(
                "{}: an unsafe path, not written back",
                rel.display()
            ));
            continue;
        }
        let mode = entry.header().mode().map_err(bad)? & 0o777;
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                found.insert(rel, Found::Dir(mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).map_err(bad)?;
                found.insert(rel, Found::File(bytes, mode));
            }
            // A hard link made inside: the file it links to, once more.
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(bad)?
                    .map(std::borrow::Cow::into_owned);
                let target: Option<PathBuf> = target.map(|t| t.components().skip(1).collect());
                match target.and_then(|t| found.get(&t)) {
                    Some(Found::File(bytes, mode)) => {
                        let file = Found::File(bytes.clone(), *mode);
                        found.insert(rel, file);
                    }
                    _ => notes.push(format!("{}: a hard link, not written back", rel.display())),
                }
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(bad)?
                    .map(std::borrow::Cow::into_owned);
                match target {
                    Some(t) if stays_inside(&rel, &t) => {
                        found.insert(rel, Found::Link(t));
                    }
                    _ => notes.push(format!(
                        "{}: a symlink leading out of the root, not written back",
                        root.host.join(&rel).display()
                    )),
                }
            }
            _ => notes.push(format!(
                "{}: not a file, folder or symlink, not written back",
                root.host.join(&rel).display()
            )),
        }
    }
    Ok(found)
}

/// What the container changed, against what was copied in.
fn changes(manifest: &Manifest, found: &BTreeMap<PathBuf, Found>) -> Vec<Change> {
    let mut changes = Vec::new();
    for (path, now) in found {
        let was = manifest.get(path);
        let same = match (now, was) {
            (Found::Dir(mode), Some(Entry::Dir(m))) => mode == m,
            (
                Found::File(bytes, mode),
                Some(Entry::File {
                    sha256, mode: m, ..
                }),
            ) => mode == m && Sha256::digest(bytes).as_slice() == sha256,
            (Found::Link(t), Some(Entry::Link(w))) => t == w,
            _ => false,
        };
        if same {
            continue;
        }
        // Of another kind than before: what was there goes first.
        if let Some(was) = was {
            let same_kind = matches!(
                (now, was),
                (Found::Dir(_), Entry::Dir(_))
                    | (Found::File(..), Entry::File { .. })
                    | (Found::Link(_), Entry::Link(_))
            );
            if !same_kind {
                changes.push(Change::Remove(path.clone(), was.clone()));
            }
        }
        changes.push(match now {
            Found::Dir(mode) => Change::Dir(path.clone(), *mode),
            Found::File(bytes, mode) => Change::File(path.clone(), bytes.clone(), *mode),
            Found::Link(t) => Change::Link(path.clone(), t.clone()),
        });
    }
    for (path, was) in manifest {
        if !found.contains_key(path) {
            changes.push(Change::Remove(path.clone(), was.clone()));
        }
    }
    changes
}

/// Whether the host's `path` differs from what was copied in (`was`; `None`: nothing was).
pub(super) fn host_changed(dir: &Dir, path: &Path, was: Option<&Entry>) -> bool {
    let meta = match dir.symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return was.is_some(),
        Err(_) => return true,
    };
    let kind = meta.file_type();
    match was {
        None => true,
        Some(Entry::Dir(mode)) => !kind.is_dir() || meta.mode() & 0o777 != *mode,
        Some(Entry::Link(target)) => {
            !kind.is_symlink() || dir.read_link_contents(path).ok().as_ref() != Some(target)
        }
        Some(Entry::File {
            size,
            mtime,
            sha256,
            mode,
        }) => {
            if !kind.is_file() || meta.size() != *size || meta.mode() & 0o777 != *mode {
                return true;
            }
            if (meta.mtime(), meta.mtime_nsec()) == *mtime {
                return false;
            }
            match dir.read(path) {
                Ok(bytes) => Sha256::digest(&bytes).as_slice() != sha256,
                Err(_) => true,
            }
        }
    }
}

/// The owner of the root, when warden runs as root: what it writes is theirs, as it would be
/// had the container's user written it through a mount.
fn owner_when_root(dir: &Dir) -> Option<(u32, u32)> {
    if !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    dir.dir_metadata().ok().map(|m| (m.uid(), m.gid()))
}

/// Applies the changes: removals first (files, then folders deepest first), then new
/// folders (shallowest first), then files and symlinks, each made beside and renamed over,
/// then the folders' modes.
fn write(
    dir: &Dir,
    changes: &[Change],
    owner: Option<(u32, u32)>,
) -> Result<(), (PathBuf, io::Error)> {
    let at = |path: &Path| {
        let path = path.to_owned();
        move |e: io::Error| (path, e)
    };
    let mut removed_dirs = Vec::new();
    for change in changes {
        if let Change::Remove(path, was) = change {
            match was {
                Entry::Dir(_) => removed_dirs.push(path),
                _ => match dir.remove_file(path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(at(path)(e)),
                    _ => {}
                },
            }
        }
    }
    removed_dirs.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for path in removed_dirs {
        dir.remove_dir(path).map_err(at(path))?;
    }
    // Opened for reading: a folder's handle from `open_dir` can be neither chowned nor
    // chmodded.
    let opened = |path: &Path| {
        dir.open_with(path, OpenOptions::new().read(true))
            .map(cap_std::fs::File::into_std)
    };
    let mut modes = Vec::new();
    for change in changes {
        if let Change::Dir(path, mode) = change {
            // A folder that is there changed only its mode.
            let made = match dir.create_dir(path) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                Err(e) => return Err(at(path)(e)),
            };
            if let (true, Some((uid, gid))) = (made, owner) {
                std::os::unix::fs::fchown(opened(path).map_err(at(path))?, Some(uid), Some(gid))
                    .map_err(at(path))?;
            }
            modes.push((path, *mode));
        }
    }
    for change in changes {
        match change {
            Change::File(path, bytes, mode) => {
                let (parent, name, temp) = beside(dir, path).map_err(at(path))?;
                let written = (|| {
                    let mut file = parent
                        .open_with(
                            &temp,
                            OpenOptions::new().write(true).create_new(true).mode(0o600),
                        )?
                        .into_std();
                    file.write_all(bytes)?;
                    // Set, not asked of `open`: the process's umask would take bits away.
                    file.set_permissions(std::fs::Permissions::from_mode(*mode))?;
                    if let Some((uid, gid)) = owner {
                        std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
                    }
                    file.sync_all()?;
                    parent.rename(&temp, &parent, &name)
                })();
                if let Err(e) = written {
                    let _ = parent.remove_file(&temp);
                    return Err(at(path)(e));
                }
            }
            Change::Link(path, target) => {
                let (parent, name, temp) = beside(dir, path).map_err(at(path))?;
                parent
                    .symlink_contents(target, &temp)
                    .and_then(|()| parent.rename(&temp, &parent, &name))
                    .map_err(at(path))?;
            }
            _ => {}
        }
    }
    // Folders' modes last, deepest first, set rather than asked of `mkdir` (whose mode the
    // umask trims): a folder the copy made unwritable still took its files first.
    modes.sort_by_key(|(path, ..)| std::cmp::Reverse(path.components().count()));
    for (path, mode) in modes {
        opened(path)
            .and_then(|d| d.set_permissions(std::fs::Permissions::from_mode(mode)))
            .map_err(at(path))?;
    }
    Ok(())
}

/// The folder holding `path`, its name, and a name for a temporary file beside it.
fn beside(dir: &Dir, path: &Path) -> io::Result<(Dir, std::ffi::OsString, String)> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => dir.open_dir(p)?,
        _ => dir.try_clone()?,
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("a path without a name"))?
        .to_owned();
    let temp = format!(".warden-{}.tmp", &warden_command::session::nonce()[..12]);
    Ok((parent, name, temp))
}

/// Keeps the container's copy of a root, whose write-back was refused, in a file of its own.
fn keep(tar: &[u8], tool: &str) -> io::Result<PathBuf> {
    let file = tempfile::Builder::new()
        .prefix(&format!("warden-copy-back-{tool}-"))
        .suffix(".tar")
        .tempfile()?;
    let (mut file, path) = file.keep().map_err(|e| e.error)?;
    file.write_all(tar)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_put_what_was_there_first_and_skip_the_unchanged() {
        let file = |text: &[u8]| Entry::File {
            size: text.len() as u64,
            mtime: (0, 0),
            sha256: Sha256::digest(text).into(),
            mode: 0o644,
        };
        let manifest = Manifest::from([
            (PathBuf::from("same"), file(b"same")),
            (PathBuf::from("edited"), file(b"old")),
            (PathBuf::from("gone"), file(b"gone")),
            (PathBuf::from("became-dir"), file(b"x")),
        ]);
        let found = BTreeMap::from([
            (PathBuf::from("same"), Found::File(b"same".to_vec(), 0o644)),
            (PathBuf::from("edited"), Found::File(b"new".to_vec(), 0o644)),
            (PathBuf::from("became-dir"), Found::Dir(0o755)),
            (PathBuf::from("new"), Found::Link(PathBuf::from("same"))),
        ]);
        let listed: Vec<String> = changes(&manifest, &found)
            .iter()
            .map(|c| {
                let what = match c {
                    Change::Dir(..) => "dir",
                    Change::File(..) => "file",
                    Change::Link(..) => "link",
                    Change::Remove(..) => "remove",
                };
                format!("{what} {}", c.path().display())
            })
            .collect();
        assert_eq!(
            listed,
            [
                "remove became-dir",
                "dir became-dir",
                "file edited",
                "link new",
                "remove gone"
            ]
        );
    }
}
