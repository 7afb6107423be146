//! The content-addressed component store and the on-disk compile cache.
//!
//! The store holds `<sha256>.wasm`, verified once when stored. The cache holds
//! `<sha256>-<engine key>.cwasm`, which only warden writes, so a second process deserialises
//! instead of compiling.

use crate::engine::compatibility_key;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
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
    #[error("cannot read the component {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid WebAssembly component ({reason}); rebuild it for wasm32-wasip2")]
    Invalid { path: PathBuf, reason: String },
}

/// The sha256 of a file, as lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, ArtifactError> {
    let read_err = |source| ArtifactError::Read {
        path: path.to_owned(),
        source,
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

impl Artifacts {
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
        let tmp = self
            .store
            .join(format!(".{sha}.{}.tmp", std::process::id()));
        std::fs::copy(source, &tmp).map_err(|source| ArtifactError::Write {
            path: tmp.clone(),
            source,
        })?;
        if sha256_file(&tmp)? != sha {
            let _ = std::fs::remove_file(&tmp);
            return Err(ArtifactError::Invalid {
                path: source.to_owned(),
                reason: "it changed while being stored".into(),
            });
        }
        rename(&tmp, &dest)?;
        Ok(sha)
    }

    /// The compiled component for `sha`, from the cache or compiled now from `wasm` (and then
    /// cached). `on_compile` is told before a compile starts, for progress reporting.
    pub fn compiled(
        &self,
        engine: &Engine,
        sha: &str,
        wasm: &Path,
        on_compile: &dyn Fn(&Path),
    ) -> Result<Component, ArtifactError> {
        let cached = self
            .cache
            .join(format!("{sha}-{}.cwasm", compatibility_key(engine)));
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
            source,
        })?;
        let invalid = |e: wasmtime::Error| ArtifactError::Invalid {
            path: wasm.to_owned(),
            reason: format!("{e:#}"),
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
        source,
    })
}

fn rename(from: &Path, to: &Path) -> Result<(), ArtifactError> {
    std::fs::rename(from, to).map_err(|source| ArtifactError::Write {
        path: to.to_owned(),
        source,
    })
}

fn write_atomic(dir: &Path, dest: &Path, bytes: &[u8]) -> Result<(), ArtifactError> {
    create_dir(dir)?;
    let tmp = dest.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|source| ArtifactError::Write {
        path: tmp.clone(),
        source,
    })?;
    rename(&tmp, dest)
}
