//! Files written whole or not at all: the bytes go to a temporary name beside the file, which
//! is renamed over it once complete and removed when anything fails. A full disk or a crash
//! leaves the old file or none, never half of one, and nothing beside it; a retry finds the
//! folder as it was.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` whole (see the module's doc).
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = Temporary::beside(path);
    let mut file = File::create_new(temporary.path())?;
    file.write_all(bytes)?;
    file.sync_all()?;
    temporary.rename_to(path)
}

/// A temporary file beside where a file will go, removed when dropped unless it was renamed
/// into place.
pub struct Temporary {
    path: PathBuf,
}

impl Temporary {
    /// A name beside `path` (hidden, this process's) for the file being made: nothing is
    /// created yet.
    pub fn beside(path: &Path) -> Temporary {
        let name = path.file_name().map_or_else(Default::default, |n| {
            let mut hidden = std::ffi::OsString::from(".");
            hidden.push(n);
            hidden.push(format!(".{}.tmp", std::process::id()));
            hidden
        });
        Temporary {
            path: path.with_file_name(name),
        }
    }

    /// Where the temporary file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the finished file to `path`, replacing what was there.
    pub fn rename_to(self, path: &Path) -> std::io::Result<()> {
        std::fs::rename(&self.path, path)?;
        std::mem::forget(self);
        Ok(())
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_nothing_is_left_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        write_whole(&path, b"old").unwrap();
        write_whole(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        // A temporary file that was never renamed goes with its guard.
        let temporary = Temporary::beside(&path);
        std::fs::write(temporary.path(), b"half").unwrap();
        drop(temporary);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
