//! `warden/undo` and `warden/rewind`: requests a client sends, never tools a model can call,
//! that put back what calls committed to their read-write roots (see `warden_tx`).
//!
//! - `warden/undo` `{"call_id": ID}` answers `{"undone": [RECORD]}`;
//! - `warden/rewind` `{"to": ID}` undoes every call committed after ID, newest first, and
//!   answers `{"undone": [RECORD, …]}`.
//!
//! Each record is `{call_id, tool, added, modified, removed}`. A call whose paths changed since
//! is refused with the error code [`CONFLICT`] and `data: {"kind": "conflict", "paths": […]}`;
//! an unknown call, or one that cannot be undone, with `-32602`.

use rmcp::ErrorData;
use rmcp::model::{CustomRequest, CustomResult, ErrorCode};
use serde_json::{Value, json};
use warden_tx::{CallRecord, ChangeKind, Store, TxError};

/// The error code of an undo refused because later calls changed the same paths.
pub(crate) const CONFLICT: ErrorCode = ErrorCode(-32010);

/// Answers `request` when it is one of these methods; `None` for any other method.
pub(crate) fn answer(
    store: Option<&Store>,
    request: &CustomRequest,
) -> Option<Result<CustomResult, ErrorData>> {
    let key = match request.method.as_str() {
        "warden/undo" => "call_id",
        "warden/rewind" => "to",
        _ => return None,
    };
    let Some(store) = store else {
        return Some(Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("{}: this server keeps no transactions", request.method),
            None,
        )));
    };
    let Some(id) = crate::read::text_param(request, key) else {
        return Some(Err(ErrorData::invalid_params(
            format!("{} takes {{\"{key}\": CALL_ID}}", request.method),
            None,
        )));
    };
    let undone = match key {
        "call_id" => store.undo(id).map(|r| vec![r]),
        _ => store.rewind(id),
    };
    Some(
        undone
            .map(|records| {
                let shown: Vec<Value> = records.iter().map(shown).collect();
                CustomResult::new(json!({ "undone": shown }))
            })
            .map_err(refused),
    )
}

fn shown(record: &CallRecord) -> Value {
    let count = |kind| record.count(kind);
    json!({
        "call_id": record.call_id,
        "tool": record.tool,
        "added": count(ChangeKind::Added),
        "modified": count(ChangeKind::Modified),
        "removed": count(ChangeKind::Removed),
    })
}

fn refused(e: TxError) -> ErrorData {
    match &e {
        TxError::Conflict { paths, .. } => ErrorData::new(
            CONFLICT,
            e.to_string(),
            Some(json!({ "kind": "conflict", "paths": paths })),
        ),
        TxError::Unknown(_) | TxError::NotUndoable { .. } => {
            ErrorData::invalid_params(e.to_string(), None)
        }
        _ => ErrorData::internal_error(e.to_string(), None),
    }
}
