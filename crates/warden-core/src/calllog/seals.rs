//! Seals of the call log's chain (see `warden_ledger`): a writer seals what it appended after
//! [`SEAL_EVERY`] lines or [`SEAL_AFTER`], and at its end, and exports each seal's head to
//! syslog, where one who can edit warden's home cannot reach it.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Instant;
use warden_ledger::{Link, SEAL_AFTER, SEAL_EVERY, SealKey};

/// How a call log is sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seals {
    /// The signing key, made there at the first seal when there is none (`warden_ledger::SealKey`).
    pub key: PathBuf,
    /// The syslog socket each seal's head is sent to (`/dev/log`); `None` sends it nowhere.
    pub export: Option<PathBuf>,
}

/// A writer's seals.
pub(super) struct Sealing {
    seals: Seals,
    /// Loaded at the first seal; `None` once it failed (said once).
    key: Option<Option<SealKey>>,
    /// Lines this writer appended since its last seal.
    pub(super) unsealed: u64,
    sealed_at: Instant,
}

impl Sealing {
    pub(super) fn new(seals: Seals) -> Self {
        Self {
            seals,
            key: None,
            unsealed: 0,
            sealed_at: Instant::now(),
        }
    }

    /// Whether a seal is due.
    pub(super) fn due(&self) -> bool {
        self.unsealed >= SEAL_EVERY || (self.unsealed > 0 && self.sealed_at.elapsed() >= SEAL_AFTER)
    }

    /// Whether this writer appended lines no seal covers.
    pub(super) fn pending(&self) -> bool {
        self.unsealed > 0
    }

    /// A seal line to follow `last`; `None` when the key cannot be had.
    pub(super) fn line(&mut self, last: &Link) -> Option<String> {
        let path = &self.seals.key;
        let key = self
            .key
            .get_or_insert_with(|| match SealKey::load_or_create(path) {
                Ok(key) => Some(key),
                Err(e) => {
                    tracing::error!("the call log is not sealed: {e}");
                    None
                }
            });
        Some(key.as_ref()?.seal_line(last, super::now_ms()))
    }

    /// A seal was appended.
    pub(super) fn sealed(&mut self) {
        self.unsealed = 0;
        self.sealed_at = Instant::now();
    }

    /// Sends the head `head` of the log at `log` to syslog (authpriv, info); a syslog that is
    /// not there is no error.
    pub(super) fn export(&self, log: &Path, head: &Link) {
        let text = format!(
            "warden[{}]: call log {} sealed, head {}",
            std::process::id(),
            log.display(),
            head.to_text()
        );
        tracing::info!(target: "warden::ledger", "{text}");
        if let Some(socket) = &self.seals.export {
            let sent = UnixDatagram::unbound()
                .and_then(|s| s.send_to(format!("<86>{text}").as_bytes(), socket));
            if let Err(e) = sent {
                tracing::debug!(
                    "the call log's head was not sent to {}: {e}",
                    socket.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calllog::{CallLog, Record, Rotation, test_denial};
    use crate::redact::Secrets;
    use warden_ledger::{PublicKey, verify};

    fn seals(dir: &Path, export: Option<PathBuf>) -> Seals {
        Seals {
            key: dir.join("ledger.key"),
            export,
        }
    }

    /// Two writers of one log (two wardens, as far as the file knows), rotating it as they go:
    /// every record is in the chain once, in one unbroken chain across the files.
    #[test]
    fn two_writers_at_once_keep_one_chain_across_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        let rotation = Rotation {
            max_bytes: 64 << 10,
            keep: 1000,
        };
        std::thread::scope(|s| {
            for w in 0..2 {
                let (path, seals) = (&path, seals(dir.path(), None));
                s.spawn(move || {
                    let log = CallLog::open_rotated(path, rotation).unwrap().sealed(seals);
                    for n in 0..3000 {
                        log.write(
                            Record::Denied(&test_denial(w * 10_000 + n)),
                            &Secrets::default(),
                        )
                        .wait();
                    }
                });
            }
        });
        let files = rotation.files(&path);
        assert!(files.len() > 5, "rotated: {files:?}");
        let public = PublicKey::read(&dir.path().join("ledger.key.pub")).unwrap();
        let v = verify(&files, Some(&public), None).unwrap();
        assert_eq!(v.problem, None);
        assert_eq!(v.records, 6000 + v.seals);
        assert!(
            v.seals >= 2 + 4,
            "each writer's every 1000 lines and its end: {}",
            v.seals
        );
        assert_eq!(v.unsigned, 0);
    }

    /// A log an older warden began is chained from its end on; dropping the log seals it and
    /// sends the head to syslog.
    #[test]
    fn an_older_log_is_chained_on_and_a_seal_is_exported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        std::fs::write(&path, "{\"event\":\"call\",\"call_id\":\"old\"}\n").unwrap();
        let socket = dir.path().join("log.sock");
        let syslog = UnixDatagram::bind(&socket).unwrap();
        syslog.set_nonblocking(true).unwrap();
        let log = CallLog::open(&path)
            .unwrap()
            .sealed(seals(dir.path(), Some(socket)));
        log.write(Record::Denied(&test_denial(1)), &Secrets::default())
            .wait();
        drop(log);
        let v = verify(&[path], None, None).unwrap();
        assert_eq!(v.problem, None);
        assert_eq!((v.unchained, v.records, v.seals, v.unsigned), (1, 2, 1, 0));
        let mut said = [0u8; 512];
        let n = syslog.recv(&mut said).unwrap();
        let said = String::from_utf8_lossy(&said[..n]);
        let head = v.head.unwrap().to_text();
        assert!(
            said.starts_with("<86>warden[") && said.ends_with(&head),
            "{said}"
        );
    }
}
