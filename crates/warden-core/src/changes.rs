//! A call's changes to its read-write roots, as its answer tells them, and held for review of
//! its effects (`[review] changes = true`): the executor that saw the writes holds them in the
//! call's [`HeldChanges`] instead of committing them; the dispatcher asks the reviewer, then
//! commits or drops them (dropping discards: the roots never saw the call).

use crate::message::ToolError;
use crate::shown::{escape, escape_lines};
use crate::{ErrorKind, Output};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The detail of an answer whose changes were not kept.
pub const DISCARDED: &str = "Nothing it wrote to its read-write roots was kept.";

/// What a reviewer of a call's effects is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangesToReview {
    /// The change set as the answer lists it (`details.changes`: count, bytes, changes).
    pub changes: Value,
    /// A unified diff of the changed text files, bounded.
    pub diff: String,
}

impl ChangesToReview {
    /// The changes as a person reads them: a line for each change listed, then the diff;
    /// every character a terminal could act on escaped (the diff's line breaks kept).
    pub fn to_text(&self) -> String {
        let count = self.changes["count"].as_u64().unwrap_or(0);
        let listed = self.changes["changes"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let mut out = format!("{count} change(s) to its read-write roots:\n");
        for c in listed {
            let name = Path::new(c["root"].as_str().unwrap_or(""))
                .join(c["path"].as_str().unwrap_or(""))
                .display()
                .to_string();
            let size = c["size"]
                .as_u64()
                .map_or_else(String::new, |s| format!(" ({s} bytes)"));
            let change = c["change"].as_str().unwrap_or("changed");
            let _ = writeln!(out, "  {change} {}{size}", escape(&name));
        }
        if (listed.len() as u64) < count {
            let _ = writeln!(out, "  … and {} more", count - listed.len() as u64);
        }
        out.push_str(&escape_lines(&self.diff));
        out
    }
}

/// A call's changes, made but not yet applied to its roots. Dropped, they are discarded.
pub trait PendingChanges: Send {
    /// What the reviewer is shown.
    fn shown(&self) -> &ChangesToReview;
    /// Applies them to the roots; refused (`conflict`, `limit_exceeded`, …) with nothing
    /// applied.
    fn commit(self: Box<Self>) -> Result<(), ToolError>;
}

/// Where an executor holds a call's changes for the dispatcher, when the call's policy asks
/// for review of its effects (see [`crate::Invocation::hold`]).
#[derive(Clone, Default)]
pub struct HeldChanges(Arc<Mutex<Option<Box<dyn PendingChanges>>>>);

impl std::fmt::Debug for HeldChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldChanges")
    }
}

impl HeldChanges {
    /// Holds `pending` (replacing, so discarding, any held before).
    pub fn put(&self, pending: Box<dyn PendingChanges>) {
        *crate::lock(&self.0) = Some(pending);
    }

    /// What is held, taken out.
    pub fn take(&self) -> Option<Box<dyn PendingChanges>> {
        crate::lock(&self.0).take()
    }
}

/// Whether the call that answered `answered` ended on its own (a command whatever its exit
/// status, a wasm function with an error of its own), so its changes may be kept; warden
/// ended the others.
pub fn ended_on_its_own(answered: &Result<Output, ToolError>) -> bool {
    match answered {
        Ok(_) => true,
        Err(e) => matches!(e.kind, ErrorKind::ExitStatus | ErrorKind::ToolError),
    }
}

/// The answer with its change set (`shown`) in its details.
pub fn with_changes(
    answered: Result<Output, ToolError>,
    shown: Value,
) -> Result<Output, ToolError> {
    match answered {
        Ok(mut output) => {
            output.details.insert("changes".into(), shown);
            Ok(output)
        }
        Err(mut e) => {
            e.set_detail("changes", shown);
            Err(e)
        }
    }
}

/// A warden-ended call's answer, saying its writes were not kept.
pub fn discarded(mut e: ToolError) -> ToolError {
    e.message.push('\n');
    e.message.push_str(DISCARDED);
    e.set_detail("changes", discarded_detail());
    e
}

/// `details.changes` of an answer whose changes were not kept.
pub fn discarded_detail() -> Value {
    serde_json::json!({ "discarded": true })
}

/// The answer of a call whose changes were not applied (`why`, of its own kind), then what
/// the command itself answered.
pub fn refused(why: ToolError, answered: Result<Output, ToolError>) -> ToolError {
    let (said, details) = match answered {
        Ok(output) => (output.content, Value::Object(output.details)),
        Err(err) => (err.message, err.details),
    };
    let mut refused = ToolError::new(
        why.kind,
        format!("{}\n[what the command answered]\n{said}", why.message),
    );
    refused.details = details;
    refused.set_detail("changes", discarded_detail());
    refused
}
