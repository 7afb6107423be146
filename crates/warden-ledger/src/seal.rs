//! Seals: a `seal` line signs its own place in the chain (its `seq` and `prev`) with an
//! Ed25519 key. The line before a seal, and through the chain every line before that, cannot
//! be changed without the key.

use crate::{LedgerError, Link};
use ring::rand::SystemRandom;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What a seal signs: the place in the chain the seal line takes.
fn message(seq: u64, prev: &[u8; 32]) -> String {
    format!("warden ledger seal v1 {seq} {}", hex::encode(prev))
}

/// A key that seals the chain.
pub struct SealKey {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealKey({})", self.public().id())
    }
}

impl SealKey {
    /// The key at `path` (the hex of its PKCS#8 document, as warden writes it), made there
    /// first when there is none, readable by its owner alone; its public key is written
    /// beside it as `PATH.pub`.
    pub fn load_or_create(path: &Path) -> Result<SealKey, LedgerError> {
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::parse(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LedgerError::io("reading the ledger key", path, e)),
        }
        let bad = |why: &str| LedgerError::BadKey {
            path: path.to_owned(),
            why: why.to_owned(),
        };
        let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| bad("the system's random source failed"))?;
        let text = format!("{}\n", hex::encode(document.as_ref()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| LedgerError::io("making the folder of", path, e))?;
        }
        // Whole or not at all, and the first of two processes making one wins.
        let tmp = sibling(path, &format!(".new-{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(LedgerError::io("writing the ledger key", path, e)),
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| LedgerError::io("reading the ledger key", path, e))?;
        let key = Self::parse(path, &text)?;
        let public = Self::public_path(path);
        std::fs::write(&public, format!("{}\n", key.public().to_text()))
            .map_err(|e| LedgerError::io("writing the public key", &public, e))?;
        Ok(key)
    }

    /// Where the public half of the key at `key` is written: `KEY.pub`.
    pub fn public_path(key: &Path) -> PathBuf {
        sibling(key, ".pub")
    }

    fn parse(path: &Path, text: &str) -> Result<SealKey, LedgerError> {
        let bad = |why: String| LedgerError::BadKey {
            path: path.to_owned(),
            why,
        };
        let document = hex::decode(text.trim()).map_err(|e| bad(format!("not hex: {e}")))?;
        let pair = Ed25519KeyPair::from_pkcs8(&document).map_err(|e| bad(e.to_string()))?;
        Ok(SealKey { pair })
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        let mut key = [0u8; 32];
        key.copy_from_slice(self.pair.public_key().as_ref());
        PublicKey(key)
    }

    /// A seal line to be chained after `last` (see [`crate::chained`]): a JSON object
    /// without its place in the chain, which it signs.
    pub fn seal_line(&self, last: &Link, ts_ms: u64) -> String {
        let signature = self.pair.sign(message(last.seq + 1, &last.hash).as_bytes());
        let public = self.public();
        format!(
            "{{\"event\":\"seal\",\"ts_ms\":{ts_ms},\"key\":\"{}\",\"public_key\":\"{}\",\"signature\":\"{}\"}}",
            public.id(),
            public.to_text(),
            hex::encode(signature.as_ref())
        )
    }
}

/// The public half of a [`SealKey`]: what a verifier pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// Reads a public key file (`PATH.pub` beside a key: its hex).
    pub fn read(path: &Path) -> Result<PublicKey, LedgerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LedgerError::io("reading the public key", path, e))?;
        Self::parse(&text).ok_or_else(|| LedgerError::BadKey {
            path: path.to_owned(),
            why: "a public key file holds the 64 hex digits of an Ed25519 public key".into(),
        })
    }

    /// The 64 hex digits of a public key.
    pub fn parse(text: &str) -> Option<PublicKey> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key).ok()?;
        Some(PublicKey(key))
    }

    /// Its hex.
    pub fn to_text(&self) -> String {
        hex::encode(self.0)
    }

    /// `ed25519:` and the first 16 hex digits of its sha256: how seals name it.
    pub fn id(&self) -> String {
        format!("ed25519:{}", &hex::encode(Sha256::digest(self.0))[..16])
    }

    /// Whether `signature` (hex) signs the seal at `seq` after `prev` with this key.
    pub(crate) fn signed(&self, seq: u64, prev: &[u8; 32], signature: &str) -> bool {
        let Ok(signature) = hex::decode(signature) else {
            return false;
        };
        UnparsedPublicKey::new(&ED25519, self.0)
            .verify(message(seq, prev).as_bytes(), &signature)
            .is_ok()
    }
}

/// `path` with `suffix` added to its name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
