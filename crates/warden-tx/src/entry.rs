//! One entry of a tree as a transaction sees it: what "byte-exact" covers. Content (a file's
//! bytes, by sha256), mode (permission bits, setuid/setgid/sticky included) and links (their
//! target, never followed). The owner is kept too (a file the sandbox's user made stays
//! its), where warden may set it (as root). Not covered: times, extended attributes, hard links
//! (a file linked twice is two files), and special files (a call that makes a device, pipe or
//! socket gets it refused at commit, see [`crate::changes`]).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{self, Read};
use std::path::PathBuf;

/// What kind of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

/// An entry's kind, mode and content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Permission bits (with setuid, setgid, sticky); 0 for a link.
    pub mode: u32,
    /// A file's bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub size: Option<u64>,
    /// A file's sha256, hex.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sha256: Option<String>,
    /// A link's target, as written.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target: Option<PathBuf>,
    /// Its owner and group.
    pub uid: u32,
    pub gid: u32,
}

impl Entry {
    /// A folder of `mode`, owned by `owner` (uid, gid).
    pub(crate) fn dir(mode: u32, owner: (u32, u32)) -> Self {
        Self {
            kind: Kind::Dir,
            mode,
            size: None,
            sha256: None,
            target: None,
            uid: owner.0,
            gid: owner.1,
        }
    }

    /// A link to `target`.
    pub(crate) fn symlink(target: PathBuf, owner: (u32, u32)) -> Self {
        Self {
            kind: Kind::Symlink,
            mode: 0,
            size: None,
            sha256: None,
            target: Some(target),
            uid: owner.0,
            gid: owner.1,
        }
    }

    /// A file of `mode` whose bytes `content` reads.
    pub(crate) fn file_from(
        mode: u32,
        owner: (u32, u32),
        content: &mut impl Read,
    ) -> io::Result<Self> {
        let mut hasher = Sha256::new();
        let size = io::copy(content, &mut HashWriter(&mut hasher))?;
        Ok(Self {
            kind: Kind::File,
            mode,
            size: Some(size),
            sha256: Some(hex::encode(hasher.finalize())),
            target: None,
            uid: owner.0,
            gid: owner.1,
        })
    }
}

struct HashWriter<'a>(&'a mut Sha256);

impl io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
