//! The call log: one JSON line per record, appended. Data, not logging: every call's record
//! has the same fields, whichever front end made the call and however it ended.

use crate::executor::Usage;
use crate::message::{ErrorKind, ToolMessage};
use crate::redact::Secrets;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// An append-only JSONL file of calls.
pub struct CallLog {
    path: PathBuf,
    file: Mutex<File>,
}

/// One line of the call log; its `event` says which.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Record<'a> {
    /// A call and how it ended: exactly one per call.
    Call(&'a CallRecord),
    /// A destination the sandbox refused a call, written before that call's own record.
    Denied(&'a DenialRecord),
}

/// A call and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    /// When it was written, in milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The tool as the call named it (it may not exist).
    pub tool: String,
    pub call_id: String,
    pub outcome: CallOutcome,
    pub duration_ms: f64,
    /// Runs of the tool that came back, retries included.
    pub attempts: u32,
    /// Fuel the last attempt burnt, where the executor measures it.
    pub fuel: Option<u64>,
    /// What the last attempt used, as far as its executor measured it.
    #[serde(skip_serializing_if = "Usage::is_empty")]
    pub usage: Usage,
    /// Refusals of the call by its sandbox, when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<u64>,
    /// What the policy gave the tool, when the tool exists.
    #[serde(flatten)]
    pub policy: Option<PolicyFacts>,
    /// The error's message, when the call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a tool's policy gave it, as a call's record tells it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyFacts {
    /// The executor kind: `wasm`, `docker` or `host`.
    pub executor: String,
    /// The policy file.
    pub policy: String,
    pub grants: Value,
    pub limits: Value,
}

/// A destination a sandbox refused a call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DenialRecord {
    /// When it was written, in milliseconds since the Unix epoch.
    pub ts_ms: u64,
    pub tool: String,
    pub call_id: String,
    /// What the call tried to reach (`http://host:port`, `tcp 10.0.0.1:22`).
    pub destination: String,
    pub reason: String,
}

/// How a call ended: `"success"`, or the kind of its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Success,
    Failed(ErrorKind),
}

impl CallOutcome {
    /// The outcome of the call `message` answers.
    pub fn of(message: &ToolMessage) -> CallOutcome {
        message
            .error
            .as_ref()
            .map_or(CallOutcome::Success, |e| CallOutcome::Failed(e.kind))
    }

    /// The name in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failed(kind) => kind.as_str(),
        }
    }
}

impl Serialize for CallOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
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

    /// Appends `record` as one line, every string in it with `secrets` redacted. A failure to
    /// write is logged, never fatal to the call.
    pub fn write(&self, record: Record<'_>, secrets: &Secrets) {
        let mut value = match serde_json::to_value(record) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!("cannot write a record to the call log: {e}");
                return;
            }
        };
        // Over the whole record, not chosen fields: a field added later is covered too.
        secrets.redact_value(&mut value);
        let mut line = value.to_string();
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::error!("cannot write the call log {}: {e}", self.path.display());
        }
    }
}

/// Now, in milliseconds since the Unix epoch (0 on a clock set before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolCall, ToolError};

    fn call_record(message: &ToolMessage, policy: Option<PolicyFacts>) -> CallRecord {
        CallRecord {
            ts_ms: 1,
            tool: message.name.clone(),
            call_id: message.tool_call_id.clone(),
            outcome: CallOutcome::of(message),
            duration_ms: 1.5,
            attempts: 1,
            fuel: None,
            usage: Usage::default(),
            denied: None,
            policy,
            message: message.error.as_ref().map(|e| e.message.clone()),
        }
    }

    fn lines(log: &CallLog) -> Vec<Value> {
        std::fs::read_to_string(log.path())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn records_are_tagged_lines_with_secrets_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let log = CallLog::open(&dir.path().join("logs/calls.jsonl")).unwrap();
        let call = ToolCall::new("c1", "fetch", &serde_json::json!({}));
        let secrets = Secrets::new(vec![("KEY".into(), "sk-123".into())]);
        let failed = ToolMessage::failure(
            &call,
            ToolError::new(ErrorKind::Timeout, "sk-123 took too long"),
        );
        let facts = PolicyFacts {
            executor: "wasm".into(),
            policy: "p.toml".into(),
            grants: serde_json::json!({"env": {"KEY": "sk-123"}}),
            limits: serde_json::json!({}),
        };
        log.write(Record::Call(&call_record(&failed, Some(facts))), &secrets);
        let ok = ToolMessage::success(&call, "fine".into(), None);
        log.write(Record::Call(&call_record(&ok, None)), &Secrets::default());
        let denied = DenialRecord {
            ts_ms: 1,
            tool: "fetch".into(),
            call_id: "c1".into(),
            destination: "http://x.test/?key=sk-123".into(),
            reason: "not granted".into(),
        };
        log.write(Record::Denied(&denied), &secrets);

        let v = lines(&log);
        assert_eq!(v[0]["event"], "call");
        assert_eq!(v[0]["outcome"], "timeout");
        assert_eq!(v[0]["executor"], "wasm");
        assert_eq!(v[0]["fuel"], Value::Null, "present, if null");
        assert_eq!(v[0]["message"], "[redacted:KEY] took too long");
        assert_eq!(v[0]["grants"]["env"]["KEY"], "[redacted:KEY]");
        assert!(v[0].get("denied").is_none());
        assert_eq!(v[1]["outcome"], "success");
        assert!(v[1].get("executor").is_none() && v[1].get("message").is_none());
        assert_eq!(v[2]["event"], "denied");
        assert_eq!(v[2]["destination"], "http://x.test/?key=[redacted:KEY]");
    }
}
