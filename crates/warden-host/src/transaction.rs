//! A call's changes to its writable roots, settled once its command has ended (see
//! `warden_tx`): committed when the command ended on its own, whatever its exit status;
//! discarded when warden ended it (timeout, a limit, a failed sandbox, a cancel: the view is
//! dropped with the call's future), so such a call leaves nothing behind.

use serde_json::Value;
use warden_core::{ErrorKind, Output, ToolError};
use warden_tx::{ChangeSet, TxError, View};

/// The changes an answer lists; the rest are counted (`count`) and in the record.
const SHOWN: usize = 100;

/// What a call with a view answers, once its changes are committed or discarded. `gone`:
/// every process of the call has ended, so what the view holds is final.
pub(crate) fn settle(
    view: Option<View>,
    gone: bool,
    names: (&str, &str),
    answered: Result<Output, ToolError>,
) -> Result<Output, ToolError> {
    let Some(view) = view else {
        return answered;
    };
    let on_its_own = match &answered {
        Ok(_) => true,
        Err(e) => e.kind == ErrorKind::ExitStatus,
    };
    if !on_its_own {
        drop(view);
        return answered.map_err(discarded);
    }
    if !gone {
        drop(view);
        let e = ToolError::internal(
            "the call's processes did not end when its command did; its changes were discarded",
        );
        return Err(e.with_detail("changes", discarded_detail()));
    }
    let (call_id, tool) = names;
    let committed = view
        .changes()
        .and_then(|changes| view.commit(call_id, tool, &changes).map(|()| changes));
    match committed {
        Ok(changes) => with_changes(answered, &changes),
        Err(e) => Err(refused(&e, answered)),
    }
}

/// The answer with its change set in its details.
fn with_changes(
    answered: Result<Output, ToolError>,
    changes: &ChangeSet,
) -> Result<Output, ToolError> {
    let mut shown = changes.to_json(SHOWN);
    shown["digest"] = changes.digest().into();
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
fn discarded(mut e: ToolError) -> ToolError {
    e.message
        .push_str("\nNothing it wrote to its read-write roots was kept.");
    e.set_detail("changes", discarded_detail());
    e
}

fn discarded_detail() -> Value {
    serde_json::json!({ "discarded": true })
}

/// The answer of a call whose changes could not be applied: the reason, then what the
/// command itself answered.
fn refused(e: &TxError, answered: Result<Output, ToolError>) -> ToolError {
    let kind = match e {
        TxError::Conflict { .. } => ErrorKind::Conflict,
        TxError::TooLarge { .. } => ErrorKind::LimitExceeded,
        TxError::Special(_) => ErrorKind::Denied,
        _ => ErrorKind::Internal,
    };
    let (said, details) = match answered {
        Ok(output) => (output.content, Value::Object(output.details)),
        Err(err) => (err.message, err.details),
    };
    let mut refused = ToolError::new(kind, format!("{e}\n[what the command answered]\n{said}"));
    refused.details = details;
    refused.set_detail("changes", discarded_detail());
    refused
}
