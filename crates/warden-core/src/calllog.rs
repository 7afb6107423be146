//! The call log: one JSON line per call, appended. Data, not logging.

use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// An append-only JSONL file of calls.
pub struct CallLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl CallLog {
    /// Opens (creating) the log and its folder.
    pub fn open(path: &Path) -> std::io::Result<CallLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(CallLog {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one line; a failure to write is logged, never fatal to the call.
    pub fn record(&self, entry: &Value) {
        let mut line = entry.to_string();
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::error!("cannot write the call log {}: {e}", self.path.display());
        }
    }
}
