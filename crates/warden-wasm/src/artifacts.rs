//! The content-addressed component store and the on-disk compile cache.
//!
//! The store holds `<sha256>.wasm`, verified once when stored: a component, or a WASI 0.1
//! module exactly as its author built it. The cache holds `<sha256>-<engine key>.cwasm`, which
//! only warden writes, so a second process deserialises instead of compiling (a module's key
//! also names its wrapping, [`crate::wasip1`]), and `stamps/`: what each hashed source file
//! looked like, so an unchanged 18 MB component is not hashed again on every start (~9 ms).

use crate::engine::compatibility_key;
use crate::wasip1::{self, ModuleError};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use warden_core::{Temporary, write_whole};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where components and compiled code live.
#[derive(Debug, Clone)]
pub struct Artifacts {
    pub store: PathBuf,
    pub cache: PathBuf,
}

/// Why a component could not be stored or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("cannot read the component {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} is not a valid WebAssembly component ({reason}); rebuild it for wasm32-wasip2")]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "{path} is not WebAssembly (it does not start with WebAssembly's magic bytes): build \
         the tool for wasm32-wasip2 (a component) or as a WASI 0.1 command (wasip1) and add \
         the .wasm it makes"
    )]
    NotWasm { path: PathBuf },
    #[error("{path} is a WASI 0.1 module that cannot be a tool: {error}")]
    Module { path: PathBuf, error: ModuleError },
}

/// What a `.wasm` file holds, by its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// A component (WASI 0.2): run as it is.
    Component,
    /// A core module: a WASI 0.1 command, wrapped into a component before it is compiled.
    Module,
}

impl Binary {
    /// Reads the first 8 bytes of `path`: `\0asm`, then a version and a layer (1 and 0 for a
    /// core module, 0x0d and 1 for a component).
    pub fn of(path: &Path) -> Result<Binary, ArtifactError> {
        let mut head = Vec::with_capacity(8);
        std::fs::File::open(path)
            .and_then(|f| f.take(8).read_to_end(&mut head))
            .map_err(|error| ArtifactError::Read {
                path: path.to_owned(),
                error,
            })?;
        match head.as_slice() {
            [0, b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00] => Ok(Binary::Component),
            [0, b'a', b's', b'm', 0x01, 0x00, 0x00, 0x00] => Ok(Binary::Module),
            _ => Err(ArtifactError::NotWasm {
                path: path.to_owned(),
            }),
        }
    }
}

/// The sha256 of a file, as lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, ArtifactError> {
    let read_err = |source| ArtifactError::Read {
        path: path.to_owned(),
        error: source,
    };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(read_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// A file as it was when hashed. A changed file cannot keep its stamp: every write moves
/// its change time (`ctime`), which no one can set back.
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn line(&self, sha: &str) -> String {
        let Stamp {
            dev,
            ino,
            len,
            mtime_ns,
            ctime_ns,
        } = self;
        format!("{sha} {dev} {ino} {len} {mtime_ns} {ctime_ns}\n")
    }
}

/// Seconds since its last change before a file is stamped: a file changed within the clock
/// tick it was hashed in could change again and keep its change time, so it is hashed again
/// on every load until it is older.
const SETTLED_SECS: u64 = 2;

impl Artifacts {
    /// The names of the tools a load kept under `key` ([`Artifacts::record_names`]).
    pub fn names(&self, key: &str) -> Option<Vec<String>> {
        let text = std::fs::read(self.names_file(key)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Keeps `names`, the tools a load found, under `key`, unless kept already; a cache that
    /// cannot be written only costs the next call a load.
    pub fn record_names(&self, key: &str, names: &[&str]) {
        let file = self.names_file(key);
        if file.is_file() {
            return;
        }
        let written = serde_json::to_vec(names)
            .map_err(|e| ArtifactError::Write {
                path: file.clone(),
                error: std::io::Error::other(e),
            })
            .and_then(|json| write_atomic(&self.cache.join("names"), &file, &json));
        if let Err(e) = written {
            tracing::debug!("cannot keep the names of a component's tools: {e}");
        }
    }

    fn names_file(&self, key: &str) -> PathBuf {
        self.cache.join("names").join(format!("{key}.json"))
    }

    /// The sha256 of `source`: from its stamp when the file is exactly as it was when last
    /// hashed, else hashed now (and stamped once it has settled).
    pub fn sha256_stamped(&self, source: &Path) -> Result<String, ArtifactError> {
        let read_err = |source_err| ArtifactError::Read {
            path: source.to_owned(),
            error: source_err,
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let meta = std::fs::metadata(source).map_err(read_err)?;
        let stamp = Stamp::of(&meta);
        let file = self.stamp_file(source);
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Some((sha, _)) = text.split_once(' ')
            && sha.len() == 64
            && sha.bytes().all(|b| b.is_ascii_hexdigit())
            && text == stamp.line(sha)
        {
            return Ok(sha.to_owned());
        }
        let sha = sha256_file(source)?;
        let settled = u64::try_from(meta.ctime()).is_ok_and(|changed| changed + SETTLED_SECS < now);
        // Nor may it have changed while it was hashed.
        let unchanged = std::fs::metadata(source).is_ok_and(|m| Stamp::of(&m) == stamp);
        if settled && unchanged {
            let written = write_atomic(
                &self.cache.join("stamps"),
                &file,
                stamp.line(&sha).as_bytes(),
            );
            if let Err(e) = written {
                tracing::warn!("cannot stamp {}: {e}", source.display());
            }
        }
        Ok(sha)
    }

    /// Where the stamp of `source` is kept: named by the hash of its absolute path.
    fn stamp_file(&self, source: &Path) -> PathBuf {
        let absolute = std::path::absolute(source).unwrap_or_else(|_| source.to_owned());
        let name = hex::encode(&Sha256::digest(absolute.as_os_str().as_encoded_bytes())[..16]);
        self.cache.join("stamps").join(name)
    }

    /// The stored copy of a component, if it is there.
    pub fn stored(&self, sha: &str) -> PathBuf {
        self.store.join(format!("{sha}.wasm"))
    }

    /// Copies `source` into the store and returns its sha256. The copy is verified by hashing
    /// what was written, so the store only ever holds what its name says.
    pub fn put(&self, source: &Path) -> Result<String, ArtifactError> {
        let sha = sha256_file(source)?;
        let dest = self.stored(&sha);
        if dest.exists() && sha256_file(&dest).is_ok_and(|s| s == sha) {
            return Ok(sha);
        }
        create_dir(&self.store)?;
        // Gone with its guard when the copy fails (a full disk) or is refused.
        let tmp = Temporary::beside(&dest);
        std::fs::copy(source, tmp.path()).map_err(|source| ArtifactError::Write {
            path: dest.clone(),
            error: source,
        })?;
        if sha256_file(tmp.path())? != sha {
            return Err(ArtifactError::Invalid {
                path: source.to_owned(),
                reason: "it changed while being stored".into(),
            });
        }
        tmp.rename_to(&dest)
            .map_err(|source| ArtifactError::Write {
                path: dest.clone(),
                error: source,
            })?;
        Ok(sha)
    }

    /// The compiled component for `sha`, from the cache or compiled now from `wasm` (and then
    /// cached); a WASI 0.1 module is checked and wrapped first. `on_compile` is told before a
    /// compile starts, for progress reporting.
    pub fn compiled(
        &self,
        engine: &Engine,
        sha: &str,
        wasm: &Path,
        binary: Binary,
        on_compile: &dyn Fn(&Path),
    ) -> Result<Component, ArtifactError> {
        let key = match binary {
            Binary::Component => compatibility_key(engine),
            Binary::Module => format!("{}-{}", compatibility_key(engine), wasip1::wrapping_key()),
        };
        let cached = self.cache.join(format!("{sha}-{key}.cwasm"));
        if cached.is_file() {
            // SAFETY: files in the cache are written only by `compiled` below, from a
            // component wasmtime compiled with this engine's settings (the key says so), and
            // written atomically.
            match unsafe { Component::deserialize_file(engine, &cached) } {
                Ok(c) => return Ok(c),
                Err(e) => {
                    tracing::warn!("recompiling: cached {} unusable: {e:#}", cached.display())
                }
            }
        }
        tracing::info!(component = %wasm.display(), "compiling");
        on_compile(wasm);
        let bytes = std::fs::read(wasm).map_err(|source| ArtifactError::Read {
            path: wasm.to_owned(),
            error: source,
        })?;
        let bytes = match binary {
            Binary::Component => bytes,
            Binary::Module => wasip1::wrap(&bytes).map_err(|error| ArtifactError::Module {
                path: wasm.to_owned(),
                error,
            })?,
        };
        let invalid = |e: wasmtime::Error| match binary {
            Binary::Component => ArtifactError::Invalid {
                path: wasm.to_owned(),
                reason: format!("{e:#}"),
            },
            Binary::Module => ArtifactError::Module {
                path: wasm.to_owned(),
                error: ModuleError::Invalid(format!("{e:#}")),
            },
        };
        let component = Component::from_binary(engine, &bytes).map_err(invalid)?;
        let serialized = component.serialize().map_err(invalid)?;
        if let Err(e) = write_atomic(&self.cache, &cached, &serialized) {
            // A read-only cache costs a compile per process, nothing more.
            tracing::warn!("cannot cache compiled code: {e}");
        }
        Ok(component)
    }
}

fn create_dir(dir: &Path) -> Result<(), ArtifactError> {
    std::fs::create_dir_all(dir).map_err(|source| ArtifactError::Write {
        path: dir.to_owned(),
        error: source,
    })
}

fn write_atomic(dir: &Path, dest: &Path, bytes: &[u8]) -> Result<(), ArtifactError> {
    create_dir(dir)?;
    write_whole(dest, bytes).map_err(|source| ArtifactError::Write {
        path: dest.to_owned(),
        error: source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_spares_the_hash_of_an_unchanged_file_and_no_changed_file_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let artifacts = Artifacts {
            store: dir.path().join("store"),
            cache: dir.path().join("cache"),
        };
        let source = dir.path().join("tool.wasm");
        std::fs::write(&source, b"first").unwrap();
        let first = sha256_file(&source).unwrap();
        assert_eq!(artifacts.sha256_stamped(&source).unwrap(), first);
        assert!(
            !artifacts.stamp_file(&source).exists(),
            "a file changed a moment ago is not stamped"
        );
        std::thread::sleep(std::time::Duration::from_secs(SETTLED_SECS + 1));
        assert_eq!(artifacts.sha256_stamped(&source).unwrap(), first);
        let stamp = artifacts.stamp_file(&source);
        assert!(stamp.is_file(), "a settled file is stamped");
        assert_eq!(artifacts.sha256_stamped(&source).unwrap(), first);

        // Rewritten in place, same length: the change time moves, the stamp no longer fits.
        std::fs::write(&source, b"other").unwrap();
        assert_eq!(
            artifacts.sha256_stamped(&source).unwrap(),
            sha256_file(&source).unwrap()
        );
        // A damaged stamp is no stamp.
        std::fs::write(&stamp, "short 1 2 3 4 5\n").unwrap();
        assert_eq!(
            artifacts.sha256_stamped(&source).unwrap(),
            sha256_file(&source).unwrap()
        );
    }
}
