//! The transcript: one JSON line per event of a run, appended as it happens, so that a run can
//! be read afterwards and resumed after a crash.

use crate::limits::{Limits, StopReason, Totals};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use warden_core::{Decision, Verdict};

/// One event of a run. Every line also carries `ts_ms`, milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The first line: what the run is and how it was started.
    Run {
        run_id: String,
        task: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system: Option<String>,
        model: String,
        base_url: String,
        tools: Vec<String>,
        limits: Limits,
        warden: String,
    },
    /// A later process took the run up again, with these settings.
    Resume {
        model: String,
        base_url: String,
        limits: Limits,
    },
    /// A message of the conversation, exactly as the model is sent it.
    Message { message: Value },
    /// One request to the model.
    ModelCall {
        step: u32,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Value>,
    },
    /// A person's decision about a call that needs review.
    Decision {
        call_id: String,
        tool: String,
        #[serde(flatten)]
        decision: Decision,
        /// `terminal`, `file`, `none` (no reviewer) or `transcript` (decided before a resume).
        source: String,
    },
    /// A person's decision about the changes a call made (`[review] changes = true`).
    ChangesDecision {
        call_id: String,
        tool: String,
        #[serde(flatten)]
        verdict: Verdict,
        /// `terminal`, `file` or `none` (no reviewer).
        source: String,
    },
    /// A call that waits for a decision the decisions file does not hold yet.
    Pending {
        call_id: String,
        tool: String,
        arguments: String,
    },
    /// A call is about to run in its sandbox (written before it runs).
    Started {
        call_id: String,
        tool: String,
        arguments: Value,
    },
    /// A call's ToolMessage, in full (OpenAI's shape with `status`, `error`, `artifact`).
    Answered { message: Value },
    /// The run stopped; `answer` is the model's final text when it gave one.
    Stop {
        reason: StopReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        totals: Totals,
    },
}

/// A transcript line: an event and when it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub ts_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// Hears every event as it is written (progress on a terminal, `--json`).
pub type EventSink = Arc<dyn Fn(&Line) + Send + Sync>;

/// Why a transcript cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error("cannot use the transcript {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error(
        "the transcript {0} is in use by another warden process; wait for it, or stop it first"
    )]
    Locked(PathBuf),
    #[error("the transcript {path} is damaged at line {line}: {message}")]
    Damaged {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// An open transcript, locked against a second process until it is closed or dropped.
pub struct Transcript {
    path: PathBuf,
    /// `None` once closed.
    file: Mutex<Option<File>>,
    sink: Mutex<Option<EventSink>>,
}

impl Transcript {
    /// Creates a new transcript file (and its folder); it must not exist yet.
    pub fn create(path: &Path) -> Result<Self, TranscriptError> {
        let io = |e| TranscriptError::Io(path.to_owned(), e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        Self::locked(path, file)
    }

    /// Opens an existing transcript for appending and reads its events.
    pub fn open(path: &Path) -> Result<(Self, Vec<Line>), TranscriptError> {
        let io = |e| TranscriptError::Io(path.to_owned(), e);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let this = Self::locked(path, file.try_clone().map_err(io)?)?;
        let mut text = String::new();
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.read_to_string(&mut text).map_err(io)?;
        // A process killed mid-write leaves half a line, which described nothing that finished:
        // cut it off, so the next line stands alone.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        let lines = parse(path, &text[..whole])?;
        if whole < text.len() {
            tracing::warn!("cutting off the unfinished last line of {}", path.display());
            file.set_len(whole as u64).map_err(io)?;
        }
        Ok((this, lines))
    }

    fn locked(path: &Path, file: File) -> Result<Self, TranscriptError> {
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(TranscriptError::Locked(path.to_owned()));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(TranscriptError::Io(path.to_owned(), e));
            }
        }
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(Some(file)),
            sink: Mutex::new(None),
        })
    }

    /// Where the transcript is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends every event written from now on to `sink` too.
    pub fn set_sink(&self, sink: Option<EventSink>) {
        *self.sink.lock().unwrap_or_else(|p| p.into_inner()) = sink;
    }

    /// Appends one event as one line, before anything that depends on it happens.
    pub fn write(&self, event: Event) -> Result<(), TranscriptError> {
        let line = Line {
            ts_ms: now_ms(),
            event,
        };
        let mut text = serde_json::to_string(&line).map_err(|e| {
            TranscriptError::Io(self.path.clone(), std::io::Error::other(e.to_string()))
        })?;
        text.push('\n');
        {
            let mut file = self
                .file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(file) = file.as_mut() else {
                // A call stopped with its batch may still report; the run is over.
                tracing::debug!("transcript closed; dropping a late event");
                return Ok(());
            };
            file.write_all(text.as_bytes())
                .map_err(|e| TranscriptError::Io(self.path.clone(), e))?;
        }
        let sink = self.sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(sink) = sink {
            sink(&line);
        }
        Ok(())
    }

    /// Closes the file and releases the lock, so the run can be resumed at once, even while
    /// stopped calls still hold this transcript.
    pub fn close(&self) {
        self.file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    /// Appends an event where a failure cannot be returned: it is logged.
    pub fn record(&self, event: Event) {
        if let Err(e) = self.write(event) {
            tracing::error!("{e}");
        }
    }
}

fn parse(path: &Path, text: &str) -> Result<Vec<Line>, TranscriptError> {
    let mut lines = Vec::new();
    for (i, row) in text.lines().enumerate() {
        if row.trim().is_empty() {
            continue;
        }
        let line = serde_json::from_str::<Line>(row).map_err(|e| TranscriptError::Damaged {
            path: path.to_owned(),
            line: i + 1,
            message: e.to_string(),
        })?;
        lines.push(line);
    }
    Ok(lines)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_survives_a_cut_short_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs/r.jsonl");
        let t = Transcript::create(&path).unwrap();
        t.write(Event::Message {
            message: json!({"role": "user", "content": "hi"}),
        })
        .unwrap();
        t.write(Event::Decision {
            call_id: "c1".into(),
            tool: "add".into(),
            decision: Decision::Edit {
                arguments: json!({"a": 1}),
            },
            source: "file".into(),
        })
        .unwrap();
        assert!(
            matches!(Transcript::open(&path), Err(TranscriptError::Locked(_))),
            "a second process may not write the same run"
        );
        drop(t);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""type":"decision""#), "{text}");
        assert!(text.contains(r#""decision":"edit""#), "{text}");
        std::fs::write(&path, format!("{text}{{\"ts_ms\":1,\"type\":\"sta")).unwrap();
        let (t, lines) = Transcript::open(&path).unwrap();
        assert_eq!(lines.len(), 2);
        t.write(Event::Message {
            message: json!({"role": "user", "content": "again"}),
        })
        .unwrap();
        drop(t);
        let (_, lines) = Transcript::open(&path).unwrap();
        assert_eq!(lines.len(), 3);
    }
}
