//! The call log as a ledger no one edits unseen.
//!
//! Every line ends with its place in a chain, `,"seq":N,"prev":"HEX"}`: its number, and the
//! sha256 of the line before it (the line's bytes without its newline; for the first line of
//! a log, 32 zero bytes). Editing, removing, reordering or inserting a line breaks the chain
//! at that line, and [`verify`] names it. Rewriting the whole chain after an edit is caught by
//! the seals: a `seal` line signs its own place in the chain with an Ed25519 key
//! ([`SealKey`]), which no one without the key can forge. What comes after the last seal is
//! unsigned, and [`Verified::unsigned`] says how much; a log cut short after a seal is caught
//! against a head exported elsewhere ([`verify`]'s `head`).
//!
//! [`ocsf`] maps each line to an OCSF record, for a SIEM.
//!
//! Every default is here: [`SEAL_EVERY`] and [`SEAL_AFTER`].

mod chain;
pub mod ocsf;
mod seal;
mod verify;

pub use chain::{Link, chained, last_link};
pub use seal::{PublicKey, SealKey};
pub use verify::{Problem, Verified, verify};

/// A writer seals the chain after this many lines of its own (and when it closes).
pub const SEAL_EVERY: u64 = 1000;

/// A writer seals the chain at its next line once this long has passed since its last seal.
pub const SEAL_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// What went wrong with a ledger's key or files.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the key file {} is not an Ed25519 key this warden wrote ({why}); point \
         WARDEN_LEDGER_KEY at a key made by warden, or remove the file to have a new one made",
        path.display()
    )]
    BadKey {
        path: std::path::PathBuf,
        why: String,
    },
}

impl LedgerError {
    fn io(what: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.to_owned(),
            source,
        }
    }
}
