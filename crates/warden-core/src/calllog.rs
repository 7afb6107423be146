//! The call log: one JSON line per record, appended. Data, not logging: every call's record
//! has the same fields, whichever front end made the call and however it ended.
//!
//! Compact and bounded, so it can run for months: what a policy grants is written once per
//! file (a `policy` record, keyed by its digest) and each call names that digest; past
//! [`Rotation::max_bytes`] the file is renamed `NAME.1` (older ones shifting up to
//! [`Rotation::keep`], the oldest removed) and a new one begun.

#[cfg(doc)]
use crate::executor::Denials;
use crate::executor::{Reached, Usage};
use crate::message::{ErrorKind, ToolMessage};
use crate::redact::Secrets;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use writer::{Kind, Line, Writer, rotated};

mod appends;
mod hold;
mod seals;
mod writer;
pub(crate) use appends::Logged;
pub use seals::Seals;
use std::time::{SystemTime, UNIX_EPOCH};

/// An append-only JSONL file of calls, rotated by size. A record is serialized and redacted
/// outside the log's lock and written by the caller's thread, or by another caller's that holds
/// the file then, with one `write` (page cache, not `fsync`); a call's answer waits until its
/// record is in the file ([`Logged`]), so a process killed right after a call's answer still
/// has that call's record. (A writer thread was tried: waking it for each record cost more
/// than the `write`, and a kill could beat it to the file.)
pub struct CallLog {
    path: PathBuf,
    rotation: Rotation,
    /// Policies whose record has been written: a call of a known policy does not serialize it
    /// again.
    described: Mutex<HashSet<String>>,
    appends: std::sync::Arc<appends::Appends>,
}

/// When the log is rotated, and how many rotated files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The size past which the file is rotated.
    pub max_bytes: u64,
    /// Rotated files kept (`NAME.1` … `NAME.keep`); 0 keeps none.
    pub keep: u32,
}

impl Rotation {
    /// The files of the log at `path`, oldest first: the rotated ones that exist, then
    /// `path` itself. What a reader reads, without opening the log for writing.
    pub fn files(&self, path: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = (1..=self.keep)
            .rev()
            .map(|n| rotated(path, n))
            .filter(|p| p.exists())
            .collect();
        files.push(path.to_owned());
        files
    }
}

impl Default for Rotation {
    /// 64 MiB a file, four kept: about 300,000 calls within 320 MiB.
    fn default() -> Self {
        Self {
            max_bytes: 64 << 20,
            keep: 4,
        }
    }
}

/// One line of the call log; its `event` says which.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Record<'a> {
    /// A call and how it ended: exactly one per call.
    Call(&'a CallRecord<'a>),
    /// A destination the sandbox refused a call, written before that call's own record.
    Denied(&'a DenialRecord),
    /// What a policy gave its tools, once per file before the first call that names it.
    Policy(&'a PolicyRecord),
    /// A reviewer's decision about a call, written before it takes effect.
    Decision(&'a DecisionRecord<'a>),
}

/// A reviewer's decision, bound to what it decided on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DecisionRecord<'a> {
    pub ts_ms: u64,
    pub tool: &'a str,
    /// warden's id of the call (its `call` record has the same).
    pub call_id: &'a str,
    pub tool_call_id: &'a str,
    /// Before it runs: `approve`, `edit`, `reject` or `respond`; of its changes: `keep` or
    /// `discard`.
    pub decision: &'a str,
    /// Who decided (`Reviewer::name`).
    pub reviewer: &'a str,
    /// `call_digest` of the tool and the arguments decided on.
    pub digest: &'a str,
    /// An edit's: `call_digest` of the arguments that run instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited_digest: Option<String>,
    /// The policy in force, as its `policy` record names it.
    pub policy_digest: &'a str,
    /// The dispatcher session the call belongs to.
    pub session: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// A decision on changes: the digest of the change set decided on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<&'a str>,
}

/// What one version of a policy gave its tools, by digest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PolicyRecord {
    pub ts_ms: u64,
    #[serde(flatten)]
    pub facts: PolicyFacts,
}

/// A call and how it ended, borrowing what it names from the call and its tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CallRecord<'a> {
    /// When it was written, in milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The tool as the call named it (it may not exist).
    pub tool: &'a str,
    /// warden's own id of the call: unique across runs and replicas.
    pub call_id: &'a str,
    /// The caller's id of the call (a model's, a batch file's, an MCP server run's).
    pub tool_call_id: &'a str,
    pub outcome: CallOutcome,
    pub duration_ms: f64,
    /// Runs of the tool that came back, retries included.
    pub attempts: u32,
    /// Fuel the last attempt burnt, where the executor measures it.
    pub fuel: Option<u64>,
    /// What the last attempt used, as far as its executor measured it.
    #[serde(skip_serializing_if = "Usage::is_empty")]
    pub usage: Usage,
    /// Refusals of the call by its sandbox, counted, when there were any (the refusals
    /// themselves are `denied` records of their own). Written as `denied_count` and, for one
    /// release, under its old name `denied` too, so that readers of the log can move over.
    #[serde(flatten, serialize_with = "under_both_names")]
    pub denied_count: Option<u64>,
    /// The destinations the call reached, each once: the first [`Denials::KEPT`] of them.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub reached: &'a [Reached],
    /// Every reach, counted, when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached_count: Option<u64>,
    /// The granted filesystem roots the call opened, by the path the tool sees, each once:
    /// the first [`Denials::KEPT`] of them (wasm tools; others do not observe roots).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub roots_opened: &'a [String],
    /// Every use of a root (each path looked up or directory read through it), counted, when
    /// there were any: not a count of roots. Written as `roots_opened_count` before, which
    /// readers of the log pass over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_uses: Option<u64>,
    /// The hosts the gate set a credential for in the call's requests, each once: the first
    /// [`Denials::KEPT`] of them. The credential itself is never written.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub credentials_used: &'a [String],
    /// Every request that carried a credential, counted, when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_used_count: Option<u64>,
    /// The executor kind, when the tool exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<&'a str>,
    /// The digest of the `policy` record that says what the tool was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<&'a str>,
    /// The error's message, when the call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<&'a str>,
    /// What the call committed to its read-write roots (see `warden_tx`): how many changes,
    /// and the digest of the change set its answer lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangesRecord<'a>>,
    /// A whole program's record (`warden exec`) rather than a call's.
    #[serde(flatten)]
    pub exec: Option<ExecRecord<'a>>,
}

/// A committed change set, as the call log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ChangesRecord<'a> {
    pub count: u64,
    pub digest: &'a str,
}

impl<'a> ChangesRecord<'a> {
    /// The change set an answer lists (`changes` in its artifact or its error's details),
    /// when its call committed one.
    pub(crate) fn of(message: &'a ToolMessage) -> Option<Self> {
        let details = match &message.error {
            Some(e) => &e.details,
            None => message.artifact.as_ref()?,
        };
        let changes = details.get("changes")?;
        Some(Self {
            count: changes.get("count")?.as_u64()?,
            digest: changes.get("digest")?.as_str()?,
        })
    }
}

/// What a record of `warden exec` adds: `"exec": true`, the command line and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ExecRecord<'a> {
    exec: ExecMark,
    /// The command line; empty for the policy's own shell.
    pub argv: &'a [String],
    /// The status it ended with (128 + a signal; 124 at its time limit), when it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// It ran with no wall-clock limit (`--timeout none`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unlimited_time: bool,
}

impl<'a> ExecRecord<'a> {
    pub(crate) fn new(argv: &'a [String], exit_status: Option<i32>, unlimited_time: bool) -> Self {
        Self {
            exec: ExecMark,
            argv,
            exit_status,
            unlimited_time,
        }
    }
}

/// Written as `true`: marks a record as a program's.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ExecMark;

impl Serialize for ExecMark {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(true)
    }
}

/// A call's refusal count under `denied_count` and its old name `denied`, or neither when
/// there were none.
fn under_both_names<S: Serializer>(count: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(None)?;
    if let Some(n) = count {
        map.serialize_entry("denied_count", n)?;
        map.serialize_entry("denied", n)?;
    }
    map.end()
}

/// What a tool's policy gave it, as the log's `policy` record tells it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PolicyFacts {
    /// The first 16 hex digits of the sha256 of the rest.
    pub policy_digest: String,
    /// The executor kind: `wasm`, `docker` or `host`.
    pub executor: String,
    /// The policy file.
    pub policy: String,
    pub grants: Value,
    pub limits: Value,
}

impl PolicyFacts {
    pub(crate) fn new(executor: String, policy: String, grants: Value, limits: Value) -> Self {
        use sha2::Digest;
        let text = serde_json::json!([executor, policy, grants, limits]).to_string();
        let digest = hex::encode(&sha2::Sha256::digest(text.as_bytes())[..8]);
        Self {
            policy_digest: digest,
            executor,
            policy,
            grants,
            limits,
        }
    }
}

/// A destination a sandbox refused a call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DenialRecord {
    /// When it was written, in milliseconds since the Unix epoch.
    pub ts_ms: u64,
    pub tool: String,
    /// warden's id of the call refused (its `call` record has the same).
    pub call_id: String,
    pub tool_call_id: String,
    /// What the call tried to reach (`http://host:port`, `tcp 10.0.0.1:22`).
    pub destination: String,
    pub reason: String,
}

/// A refusal record numbered `n` (its `call_id` is `c-{n}-`, no prefix of another's), for
/// the log's tests.
#[cfg(test)]
pub(crate) fn test_denial(n: usize) -> DenialRecord {
    DenialRecord {
        ts_ms: n as u64,
        tool: "fetch".into(),
        call_id: format!("c-{n}-"),
        tool_call_id: format!("t-{n}"),
        destination: "tcp 10.0.0.1:22".into(),
        reason: "not granted".into(),
    }
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
    /// Opens (creating) the log and its folder, rotated as [`Rotation::default`] says.
    pub fn open(path: &Path) -> std::io::Result<CallLog> {
        Self::open_rotated(path, Rotation::default())
    }

    /// Opens (creating) the log and its folder, rotated as `rotation` says.
    pub fn open_rotated(path: &Path, rotation: Rotation) -> std::io::Result<CallLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        Ok(CallLog {
            path: path.to_owned(),
            rotation,
            described: Mutex::default(),
            appends: std::sync::Arc::new(appends::Appends::new(Writer::open(path, rotation)?)),
        })
    }

    /// Seals the log's chain as `seals` says (see `warden_ledger`): after every
    /// [`warden_ledger::SEAL_EVERY`] lines, or [`warden_ledger::SEAL_AFTER`], and when the log
    /// is dropped.
    pub fn sealed(self, seals: Seals) -> Self {
        self.appends
            .with_writer(|w| w.sealing = Some(seals::Sealing::new(seals)));
        self
    }

    /// The files of this log, oldest first: the rotated ones that exist, then the current.
    pub fn files(&self) -> Vec<PathBuf> {
        self.rotation.files(&self.path)
    }

    /// Writes a call's `policy` record, unless this log has it already (after a rotation,
    /// the first call record of the policy in the new file brings it along).
    pub(crate) fn describe_policy(&self, facts: &PolicyFacts, secrets: &Secrets) {
        let new = {
            let mut described = self
                .described
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Every call asks: only the first of a policy pays for its digest's copy.
            !described.contains(&facts.policy_digest)
                && described.insert(facts.policy_digest.clone())
        };
        if new {
            let record = PolicyRecord {
                ts_ms: now_ms(),
                facts: facts.clone(),
            };
            // Not waited for: the call record that follows is, and lines keep their order.
            drop(self.write(Record::Policy(&record), secrets));
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` as one line, every string in it with `secrets` redacted: it is in the
    /// file once the answer is waited for (records are written in the order they were
    /// given). A failure to write is logged, never fatal to the call.
    pub(crate) fn write(&self, record: Record<'_>, secrets: &Secrets) -> Logged<'_> {
        let text = match serialize(record, secrets) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!("cannot write a record to the call log: {e}");
                return Logged::NOTHING;
            }
        };
        let kind = match record {
            Record::Policy(p) => Kind::Policy(p.facts.policy_digest.clone()),
            Record::Call(c) => Kind::Call(c.policy_digest.map(str::to_owned)),
            Record::Decision(d) => Kind::Call(Some(d.policy_digest.to_owned())),
            Record::Denied(_) => Kind::Denied,
        };
        self.appends.push(Line { text, kind })
    }

    /// Waits until every record given so far is in the file.
    pub fn flush(&self) {
        self.appends.flush();
    }
}

impl Drop for CallLog {
    /// Writes what is queued, and seals what this log appended since its last seal.
    fn drop(&mut self) {
        self.appends.close();
    }
}

/// One line of JSON, with `secrets` redacted in every string of it.
fn serialize(record: Record<'_>, secrets: &Secrets) -> serde_json::Result<String> {
    let mut text = if secrets.is_empty() {
        serde_json::to_string(&record)?
    } else {
        // Over the whole record, not chosen fields: a field added later is covered too.
        let mut value = serde_json::to_value(record)?;
        secrets.redact_value(&mut value);
        value.to_string()
    };
    text.push('\n');
    Ok(text)
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

    fn call_record<'a>(
        message: &'a ToolMessage,
        policy: Option<&'a PolicyFacts>,
    ) -> CallRecord<'a> {
        CallRecord {
            ts_ms: 1,
            tool: &message.name,
            call_id: "0123456789ab-1",
            tool_call_id: &message.tool_call_id,
            outcome: CallOutcome::of(message),
            duration_ms: 1.5,
            attempts: 1,
            fuel: None,
            usage: Usage::default(),
            denied_count: None,
            reached: &[],
            reached_count: None,
            roots_opened: &[],
            root_uses: None,
            credentials_used: &[],
            credentials_used_count: None,
            executor: policy.map(|p| p.executor.as_str()),
            policy_digest: policy.map(|p| p.policy_digest.as_str()),
            message: message.error.as_ref().map(|e| e.message.as_str()),
            changes: ChangesRecord::of(message),
            exec: None,
        }
    }

    fn lines(log: &CallLog) -> Vec<Value> {
        log.flush();
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
        let facts = PolicyFacts::new(
            "wasm".into(),
            "p.toml".into(),
            serde_json::json!({"env": {"KEY": "sk-123"}}),
            serde_json::json!({}),
        );
        log.describe_policy(&facts, &secrets);
        log.write(Record::Call(&call_record(&failed, Some(&facts))), &secrets)
            .wait();
        // Once per file: a second call of the same policy names it only.
        log.describe_policy(&facts, &secrets);
        let ok = ToolMessage::success(&call, "fine".into(), None);
        log.write(Record::Call(&call_record(&ok, None)), &Secrets::default())
            .wait();
        let denied = DenialRecord {
            ts_ms: 1,
            tool: "fetch".into(),
            call_id: "0123456789ab-1".into(),
            tool_call_id: "c1".into(),
            destination: "http://x.test/?key=sk-123".into(),
            reason: "not granted".into(),
        };
        log.write(Record::Denied(&denied), &secrets).wait();

        let v = lines(&log);
        assert_eq!(v[0]["event"], "policy");
        assert_eq!(v[0]["grants"]["env"]["KEY"], "[redacted:KEY]");
        assert_eq!(v[0]["policy_digest"], facts.policy_digest);
        assert_eq!(v[1]["event"], "call");
        assert_eq!(v[1]["outcome"], "timeout");
        assert_eq!(v[1]["executor"], "wasm");
        assert_eq!(v[1]["policy_digest"], facts.policy_digest);
        assert!(v[1].get("grants").is_none(), "named, not repeated");
        assert_eq!(v[1]["fuel"], Value::Null, "present, if null");
        assert_eq!(v[1]["message"], "[redacted:KEY] took too long");
        assert!(v[1].get("denied").is_none());
        assert!(v[1].get("denied_count").is_none());
        assert_eq!(v[2]["outcome"], "success");
        assert!(v[2].get("executor").is_none() && v[2].get("message").is_none());
        assert_eq!(v[3]["event"], "denied");
        assert_eq!(v[3]["destination"], "http://x.test/?key=[redacted:KEY]");
        assert_eq!(v.len(), 4);
    }

    #[test]
    fn a_calls_refusals_are_counted_under_both_names_for_one_release() {
        let dir = tempfile::tempdir().unwrap();
        let log = CallLog::open(&dir.path().join("calls.jsonl")).unwrap();
        let call = ToolCall::new("c1", "fetch", &serde_json::json!({}));
        let ok = ToolMessage::success(&call, "fine".into(), None);
        let mut record = call_record(&ok, None);
        record.denied_count = Some(2);
        log.write(Record::Call(&record), &Secrets::default()).wait();
        let v = lines(&log);
        assert_eq!(v[0]["denied_count"], 2);
        assert_eq!(v[0]["denied"], 2);
    }

    #[test]
    fn the_log_rotates_by_size_keeps_its_last_files_and_describes_policies_in_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        let rotation = Rotation {
            max_bytes: 4096,
            keep: 2,
        };
        let log = CallLog::open_rotated(&path, rotation).unwrap();
        let facts = PolicyFacts::new(
            "wasm".into(),
            "p.toml".into(),
            serde_json::json!({}),
            serde_json::json!({}),
        );
        let call = ToolCall::new("c1", "t", &serde_json::json!({}));
        let ok = ToolMessage::success(&call, "fine".into(), None);
        for _ in 0..200 {
            log.describe_policy(&facts, &Secrets::default());
            log.write(
                Record::Call(&call_record(&ok, Some(&facts))),
                &Secrets::default(),
            )
            .wait();
        }
        log.flush();
        let files = log.files();
        assert_eq!(
            files,
            vec![
                dir.path().join("calls.jsonl.2"),
                dir.path().join("calls.jsonl.1"),
                path.clone()
            ]
        );
        assert!(
            !dir.path().join("calls.jsonl.3").exists(),
            "only `keep` are kept"
        );
        for file in &files {
            let len = std::fs::metadata(file).unwrap().len();
            assert!(len <= 4096, "{} is {len} bytes", file.display());
            let text = std::fs::read_to_string(file).unwrap();
            let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
            // Each file can be read alone: it starts by describing the policy it names.
            assert_eq!(first["event"], "policy", "{}", file.display());
        }
        // A reopened log goes on where it was, rotating as before.
        drop(log);
        let log = CallLog::open_rotated(&path, rotation).unwrap();
        log.write(
            Record::Call(&call_record(&ok, Some(&facts))),
            &Secrets::default(),
        )
        .wait();
        drop(log);
        assert!(std::fs::metadata(&path).unwrap().len() <= 4096);
    }

    /// Months of calls in one process: 100,000 records (each reaching a host) through one
    /// log keep every file within its size and only `keep` rotated files, each readable alone.
    #[test]
    fn a_hundred_thousand_calls_stay_within_size_and_retention() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        let rotation = Rotation {
            max_bytes: 256 << 10,
            keep: 3,
        };
        let log = CallLog::open_rotated(&path, rotation).unwrap();
        let facts = PolicyFacts::new(
            "wasm".into(),
            "p.toml".into(),
            serde_json::json!({"net": ["api.test:443"]}),
            serde_json::json!({}),
        );
        let call = ToolCall::new("c1", "t", &serde_json::json!({}));
        let ok = ToolMessage::success(&call, "ok".into(), None);
        let reached = [Reached {
            destination: "https://api.test:443".into(),
            address: None,
        }];
        let mut record = call_record(&ok, Some(&facts));
        record.reached = &reached;
        record.reached_count = Some(1);
        let secrets = Secrets::default();
        for _ in 0..100_000 {
            log.describe_policy(&facts, &secrets);
            log.write(Record::Call(&record), &secrets).wait();
        }
        log.flush();
        let files = log.files();
        assert_eq!(files.len(), 4, "three rotated files and the current one");
        assert!(!dir.path().join("calls.jsonl.4").exists());
        for file in &files {
            let len = std::fs::metadata(file).unwrap().len();
            assert!(
                len <= rotation.max_bytes,
                "{} is {len} bytes",
                file.display()
            );
            let text = std::fs::read_to_string(file).unwrap();
            assert!(
                text.starts_with("{\"event\":\"policy\""),
                "{}",
                file.display()
            );
        }
    }
}
