//! Which helper program warden starts as its fork server: this very program, or a small helper
//! beside it, used only when it is of this build and no one but warden's owner could have
//! written it.

use std::ffi::OsString;
use std::path::PathBuf;

/// How warden starts its helper: a program and the arguments that make it one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helper {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl Helper {
    /// This very program, re-executed with `args`: its `main` must call
    /// [`crate::helper_main`] first thing when it sees them.
    pub fn this_program(args: &[&str]) -> Self {
        Self {
            program: PathBuf::from("/proc/self/exe"),
            args: args.iter().map(OsString::from).collect(),
        }
    }

    /// The program as a person would name it: the file behind a `/proc/self` link (this
    /// program, or the helper file kept open), else the path as given.
    pub fn shown(&self) -> PathBuf {
        match std::fs::read_link(&self.program) {
            Ok(target) if self.program.starts_with("/proc/self") => target,
            _ => self.program.clone(),
        }
    }

    /// The helper program `name` in this program's folder (its `main` is
    /// [`crate::helper_program_main`]), if it is there and of this build: its file holds this
    /// build's [`crate::PROTOCOL`]. `None` otherwise, saying why at debug level. The file read
    /// is the one started from then on, through a descriptor kept open for the process's
    /// life, even once a rebuild replaces the file at that path.
    pub fn beside_this_program(name: &str) -> Option<Self> {
        let path = std::env::current_exe().ok()?.with_file_name(name);
        match pinned(&path) {
            Ok(program) => Some(Self {
                program,
                args: Vec::new(),
            }),
            Err(Unused::Other(why)) => {
                tracing::debug!("the host helper at {} not used: {why}", path.display());
                None
            }
            Err(Unused::Unsafe(why)) => {
                tracing::warn!(
                    "the host helper at {} not used, warden starts itself as the helper instead: {why}",
                    path.display()
                );
                None
            }
        }
    }
}

/// The helper file at `path`, checked to be of this build and writable by no one but
/// warden's owner (or root), and kept open: the path that starts that very file.
fn pinned(path: &std::path::Path) -> Result<PathBuf, Unused> {
    let other = |e: std::io::Error| Unused::Other(e.to_string());
    let file = std::fs::File::open(path).map_err(other)?;
    // The protocol id says which build a helper is of, not who wrote it: anyone who can write
    // the file can copy the id into it. What is checked is the file opened (its descriptor,
    // so no rename can swap it after the check) and the folder that names it.
    let meta = file.metadata().map_err(other)?;
    if !meta.is_file() {
        return Err(Unused::Unsafe(Unsafe::NotAFile));
    }
    only_owner_writes(&meta, "it").map_err(Unused::Unsafe)?;
    let folder = path.parent().unwrap_or(std::path::Path::new("/"));
    let folder_meta = std::fs::metadata(folder).map_err(other)?;
    only_owner_writes(&folder_meta, "its folder").map_err(Unused::Unsafe)?;
    if !holds(&file, crate::PROTOCOL.as_bytes()).map_err(other)? {
        return Err(Unused::Other(format!(
            "it is of another build (it holds no protocol id {})",
            crate::PROTOCOL
        )));
    }
    // Close-on-exec, and never closed: `execve` of /proc/self/fd/N in the child opens this
    // very file before the descriptor goes. Above the descriptors a helper is handed (its
    // reports and gate on 3 and 4, put there just before its `execve`).
    let fd = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(PINNED_FD))
        .map_err(|e| Unused::Other(e.to_string()))?;
    Ok(PathBuf::from(format!("/proc/self/fd/{fd}")))
}

/// Why a helper beside this program is not used.
enum Unused {
    /// It is missing, unreadable or of another build.
    Other(String),
    /// Someone other than warden's owner could have written it.
    Unsafe(Unsafe),
}

/// Why someone other than warden's owner could have written a helper or its folder.
#[derive(Debug, thiserror::Error)]
enum Unsafe {
    #[error("it is not a regular file")]
    NotAFile,
    #[error("{what} belongs to user {owner}, neither root nor warden's own user {me}")]
    Owner {
        what: &'static str,
        owner: u32,
        me: u32,
    },
    #[error("{what} is writable by its group or by others (mode {mode:o}): `chmod go-w` it")]
    Writable { what: &'static str, mode: u32 },
}

/// Refuses `meta` unless it belongs to root or to warden's own user, and its group and others
/// cannot write it: then nothing warden starts (a sandbox maps to another user when warden
/// is root; no read-write grant contains the helper's folder otherwise) could have written it.
fn only_owner_writes(meta: &std::fs::Metadata, what: &'static str) -> Result<(), Unsafe> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::Uid::effective().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(Unsafe::Owner {
            what,
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Unsafe::Writable {
            what,
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// The lowest descriptor the helper's file is kept on, clear of
/// [`crate::plan::REPORT_FD`] and [`crate::plan::GATE_FD`].
const PINNED_FD: std::os::fd::RawFd = 10;

/// How much of the helper file is read at a time while looking for the protocol id: small,
/// since a buffer's pages are taken fresh each time warden starts (and the id sits a few
/// hundred KiB in).
const CHUNK: usize = 64 << 10;

/// Whether `needle` occurs in the file, read a chunk at a time.
fn holds(mut file: &std::fs::File, needle: &[u8]) -> std::io::Result<bool> {
    use std::io::Read;
    let finder = memchr::memmem::Finder::new(needle);
    let mut buf = vec![0; CHUNK + needle.len()];
    // The tail of the last chunk, kept at the front so a needle across chunks is found.
    let mut kept = 0;
    loop {
        let n = file.read(&mut buf[kept..])?;
        if n == 0 {
            return Ok(false);
        }
        let end = kept + n;
        if finder.find(&buf[..end]).is_some() {
            return Ok(true);
        }
        kept = needle.len().saturating_sub(1).min(end);
        buf.copy_within(end - kept..end, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    /// The id is found wherever it lies, across a chunk's end too, and not where it is absent
    /// or cut short.
    #[test]
    fn the_protocol_id_is_found_anywhere_in_the_file() {
        let needle = b"0.1.0-0123456789abcdef";
        for at in [0, 100, CHUNK - 10, CHUNK - 1, CHUNK, 3 * CHUNK + 5] {
            let mut file = tempfile::tempfile().unwrap();
            let mut bytes = vec![b'x'; at];
            bytes.extend_from_slice(needle);
            bytes.extend(std::iter::repeat_n(b'y', 100));
            file.write_all(&bytes).unwrap();
            file.rewind().unwrap();
            assert!(holds(&file, needle).unwrap(), "at {at}");
            let mut cut = tempfile::tempfile().unwrap();
            cut.write_all(&bytes[..at + needle.len() - 1]).unwrap();
            cut.rewind().unwrap();
            assert!(!holds(&cut, needle).unwrap(), "cut short at {at}");
        }
    }
}
