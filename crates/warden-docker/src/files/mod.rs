//! How a tool's granted roots reach its containers: bind-mounted when the engine runs on this
//! machine, or copied in when it does not (an engine on another machine, reached over tcp or
//! through a forwarded socket), since a bind mount names a folder of the engine's machine.
//!
//! A copied root lands on a tmpfs volume of its own at its guest path (the container's root
//! filesystem is read-only, and the engine writes an upload only into a volume), uploaded
//! once the container runs: a tmpfs volume lives exactly as long as a container holds it. A
//! read-only root is root's, with no write bit, so the sandbox's user cannot change it; a
//! read-write root (only with `copy_back = true`) is the container user's, and is written
//! back to the host when the container ends: compared with what was copied in, refused as a
//! whole when the host changed a path the container changed too, else applied file by file,
//! each written beside and renamed over. Every host-side read and write goes through a
//! cap-std handle of the root: a symlink planted in a root never leads warden outside it.
//!
//! This module packs and uploads the roots; [`back`] reads them back and writes them.

use crate::engine::Engine;
use bollard::Docker;
use bollard::models::Mount;
use bollard::query_parameters::UploadToContainerOptionsBuilder;
use cap_std::fs::{Dir, MetadataExt};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use warden_command::User;
use warden_core::{ByteSize, ErrorKind, ToolError};

mod back;
mod current;
pub(crate) mod mode;

pub(crate) use back::{ReadBack, in_place, staged};
pub use mode::{FILES_ENV, Files};

/// Bytes of files a tool's roots may hold to be copied in, when the policy sets no
/// `copy_limit`.
pub const DEFAULT_COPY_LIMIT: u64 = 64 << 20;

/// One granted root, as it is copied.
#[derive(Debug, Clone)]
pub(crate) struct Root {
    pub host: PathBuf,
    pub guest: String,
    /// A read-write root: the container user's inside, and written back at the end.
    pub write_back: bool,
}

/// The roots of one tool, copied into each of its containers.
#[derive(Debug, Clone)]
pub(crate) struct Copied {
    pub roots: Vec<Root>,
    /// Bytes of files all roots together may hold; each copy may grow to twice that inside.
    pub limit: u64,
    /// The container's user, who owns the read-write copies.
    pub user: User,
}

/// What a file of a root was, or is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        size: u64,
        mtime: (i64, i64),
        sha256: [u8; 32],
        mode: u32,
    },
    /// A folder, with its mode.
    Dir(u32),
    Link(PathBuf),
}

/// Every entry of a root at copy-in, by its path inside the root.
type Manifest = BTreeMap<PathBuf, Entry>;

/// What a container's roots were when they were copied in (or a session's command last
/// settled): what their read-back compares.
#[derive(Clone)]
pub(crate) struct CopiedIn {
    /// The manifest of each root that is written back, by its index in [`Copied::roots`].
    manifests: Vec<(usize, Manifest)>,
    /// What was left out (special files, symlinks leading out of their root).
    pub notes: Vec<String>,
}

/// One root packed for upload.
struct Packed {
    tar: Vec<u8>,
    manifest: Manifest,
}

impl Copied {
    /// A tmpfs volume at each root's guest path, removed with its container. Its root folder
    /// is root's and unwritable for a read-only root, the container user's for a read-write
    /// one. Twice the limit in size: room for the whole pages small files take, and for a
    /// read-write copy to grow.
    pub(crate) fn mounts(&self) -> Vec<Mount> {
        self.roots
            .iter()
            .map(|root| {
                let (uid, gid, mode) = if root.write_back {
                    (self.user.uid, self.user.gid, "0755")
                } else {
                    (0, 0, "0555")
                };
                let options = format!(
                    "size={},uid={uid},gid={gid},mode={mode},nosuid,nodev",
                    self.limit.saturating_mul(2).max(1 << 20)
                );
                crate::volume::local_volume(root.guest.clone(), "tmpfs", options)
            })
            .collect()
    }

    /// Whether any root is written back.
    pub(crate) fn writes_back(&self) -> bool {
        self.roots.iter().any(|r| r.write_back)
    }

    /// Copies every root into the running container `id`; before its command starts.
    pub(crate) async fn copy_in(
        &self,
        engine: &Engine,
        docker: &Docker,
        id: &str,
    ) -> Result<CopiedIn, ToolError> {
        let this = self.clone();
        let (packed, notes) = tokio::task::spawn_blocking(move || this.pack())
            .await
            .map_err(|e| ToolError::internal(format!("packing the roots: {e}")))??;
        let mut manifests = Vec::new();
        for (index, (root, packed)) in self.roots.iter().zip(packed).enumerate() {
            let options = UploadToContainerOptionsBuilder::new()
                .path(&root.guest)
                .build();
            docker
                .upload_to_container(id, Some(options), bollard::body_full(packed.tar.into()))
                .await
                .map_err(|e| {
                    engine.failure(&format!("copy {} into a container", root.guest), &e)
                })?;
            if root.write_back {
                manifests.push((index, packed.manifest));
            }
        }
        Ok(CopiedIn { manifests, notes })
    }

    /// Reads every root into a tar of its own, within the limit.
    fn pack(&self) -> Result<(Vec<Packed>, Vec<String>), ToolError> {
        let mut total = 0u64;
        let mut notes = Vec::new();
        let mut packed = Vec::new();
        for root in &self.roots {
            let dir = open_root(&root.host)?;
            let mut walk = Walk {
                root,
                owner: if root.write_back {
                    self.user
                } else {
                    User { uid: 0, gid: 0 }
                },
                budget: self.limit.saturating_sub(total),
                size: 0,
                tar: tar::Builder::new(Vec::new()),
                manifest: Manifest::new(),
                notes: &mut notes,
            };
            walk.dir(&dir, Path::new(""))
                .map_err(|e| host_error(&root.host, "read", &e))?;
            if walk.size > walk.budget {
                let size = walk.size;
                return Err(ToolError::new(
                    ErrorKind::LimitExceeded,
                    format!(
                        "the root {} holds {} of files, and with the roots before it that is \
                         past the copy limit of {} (this engine gets roots copied in, not \
                         mounted): raise `copy_limit` in the policy's [executor] \
                         (`copy_limit = \"{}\"`), or grant a smaller folder",
                        root.host.display(),
                        ByteSize(size),
                        ByteSize(self.limit),
                        ByteSize((total + size).next_power_of_two()),
                    ),
                )
                .with_detail("root", root.host.display().to_string())
                .with_detail("bytes", size)
                .with_detail("copy_limit", self.limit));
            }
            total += walk.size;
            let manifest = std::mem::take(&mut walk.manifest);
            let tar = walk.tar.into_inner().map_err(|e| {
                ToolError::internal(format!("packing {}: {e}", root.host.display()))
            })?;
            packed.push(Packed { tar, manifest });
        }
        Ok((packed, notes))
    }
}

/// One root being packed.
struct Walk<'a> {
    root: &'a Root,
    /// Who owns the copies inside.
    owner: User,
    /// Bytes this root may still add; past it, files are only counted, for the message.
    budget: u64,
    size: u64,
    tar: tar::Builder<Vec<u8>>,
    manifest: Manifest,
    notes: &'a mut Vec<String>,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Dir, rel: &Path) -> io::Result<()> {
        let mut names: Vec<_> = dir
            .entries()?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            let path = rel.join(&name);
            // Not followed: a symlink is read as itself.
            let meta = dir.symlink_metadata(&name)?;
            match carried(dir, &name, &path, meta.file_type())? {
                Carried::Dir => {
                    let sub = dir.open_dir(&name)?;
                    let mode = if self.root.write_back {
                        meta.mode() & 0o777
                    } else {
                        0o555
                    };
                    let mut header = self.new_header(tar::EntryType::Directory, mode, &meta);
                    self.tar.append_data(&mut header, &path, io::empty())?;
                    self.manifest
                        .insert(path.clone(), Entry::Dir(meta.mode() & 0o777));
                    self.dir(&sub, &path)?;
                }
                Carried::File => {
                    self.size += meta.size();
                    if self.size > self.budget {
                        continue;
                    }
                    // The manifest holds what was read: the open file's own size and mtime.
                    let mut file = dir.open(&name)?;
                    let meta = file.metadata()?;
                    let mut bytes = Vec::new();
                    file.read_to_end(&mut bytes)?;
                    let mode = self.file_mode(meta.mode());
                    let mut header = self.new_header(tar::EntryType::Regular, mode, &meta);
                    header.set_size(bytes.len() as u64);
                    self.tar.append_data(&mut header, &path, bytes.as_slice())?;
                    self.manifest.insert(
                        path,
                        Entry::File {
                            size: bytes.len() as u64,
                            mtime: (meta.mtime(), meta.mtime_nsec()),
                            sha256: Sha256::digest(&bytes).into(),
                            mode: meta.mode() & 0o777,
                        },
                    );
                }
                Carried::Link(target) => {
                    let mut header = self.new_header(tar::EntryType::Symlink, 0o777, &meta);
                    self.tar.append_link(&mut header, &path, &target)?;
                    self.manifest.insert(path, Entry::Link(target));
                }
                Carried::LinkOut(target) => self.notes.push(format!(
                    "{}: a symlink to {} leads out of its root, and was not copied",
                    self.shown(&path),
                    target.display()
                )),
                Carried::Other => self.notes.push(format!(
                    "{}: not a file, folder or symlink (a socket, pipe or device), and was not \
                     copied",
                    self.shown(&path)
                )),
            }
        }
        Ok(())
    }

    /// The mode a file has inside: a read-only root's is readable by all and writable by
    /// none; a read-write root's is the host's.
    fn file_mode(&self, host: u32) -> u32 {
        if self.root.write_back {
            host & 0o777
        } else {
            (host & 0o555) | 0o444
        }
    }

    fn new_header(
        &self,
        kind: tar::EntryType,
        mode: u32,
        meta: &cap_std::fs::Metadata,
    ) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(u64::from(self.owner.uid));
        header.set_gid(u64::from(self.owner.gid));
        header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
        header.set_size(0);
        header
    }

    fn shown(&self, rel: &Path) -> String {
        self.root.host.join(rel).display().to_string()
    }
}

/// What a copy carries of one entry of a root.
enum Carried {
    Dir,
    File,
    /// A symlink whose target stays inside the root.
    Link(PathBuf),
    /// A symlink leading out: left out.
    LinkOut(PathBuf),
    /// A socket, pipe or device: left out.
    Other,
}

/// What a copy carries of the entry `name` of `dir` (at `path` in its root), of `kind` as
/// read without following it.
fn carried(
    dir: &Dir,
    name: &std::ffi::OsStr,
    path: &Path,
    kind: cap_std::fs::FileType,
) -> io::Result<Carried> {
    Ok(if kind.is_dir() {
        Carried::Dir
    } else if kind.is_file() {
        Carried::File
    } else if kind.is_symlink() {
        let target = dir.read_link_contents(name)?;
        match stays_inside(path, &target) {
            true => Carried::Link(target),
            false => Carried::LinkOut(target),
        }
    } else {
        Carried::Other
    })
}

/// Whether a symlink at `link` (inside its root) to `target` resolves inside the root, read
/// as written: an absolute target, or one that climbs above the root, does not.
fn stays_inside(link: &Path, target: &Path) -> bool {
    let mut depth = link.components().count().saturating_sub(1);
    for part in target.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            _ => return false,
        }
    }
    true
}

fn open_root(host: &Path) -> Result<Dir, ToolError> {
    Dir::open_ambient_dir(host, cap_std::ambient_authority())
        .map_err(|e| host_error(host, "open", &e))
}

fn host_error(host: &Path, what: &str, e: &io::Error) -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        format!(
            "warden could not {what} the granted root {}: {e}",
            host.display()
        ),
    )
    .with_detail("root", host.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_stays_inside_only_as_written() {
        let inside = |link: &str, target: &str| stays_inside(Path::new(link), Path::new(target));
        assert!(inside("link", "file"));
        assert!(inside("link", "./sub/../file"));
        assert!(inside("sub/link", "../file"));
        assert!(!inside("link", "../file"));
        assert!(!inside("sub/link", "../../file"));
        assert!(!inside("link", "sub/../../file"));
        assert!(!inside("link", "/etc/passwd"));
    }
}
