//! Snapshots of a session's sandbox: requests a client sends, never tools a model can call
//! (see `warden_snapshot`).
//!
//! - `warden/snapshot` `{"tool": NAME}` snapshots the sandbox of the tool in this session and
//!   answers `{"snapshot": SNAPSHOT}`;
//! - `warden/restore` `{"tool": NAME, "snapshot": ID, "fork"?: BOOL, "force"?: BOOL}` puts a
//!   snapshot into this session's sandbox of the tool and answers the same; its read-write
//!   roots are rewound (`force`: over what changed since by no call), and `"fork": true` (a
//!   new sandbox beside the one it was taken of) is refused for a tool with any;
//! - `warden/snapshots` `{}` answers `{"snapshots": [SNAPSHOT, …]}`, oldest first;
//! - `warden/snapshot/delete` `{"snapshot": ID}` answers `{}`.
//!
//! `SNAPSHOT` is `{id, tool, policy_digest, created_ms, bytes, cwd}`. A refusal is the error
//! code [`REFUSED`] with `data: {"kind": KIND}`, `KIND` one of [`kind`]'s; parameters that
//! are not those above, `-32602`.

use rmcp::ErrorData;
use rmcp::model::{CustomRequest, CustomResult, ErrorCode};
use serde_json::{Value, json};
use warden_core::Dispatcher;
use warden_snapshot::{Meta, Restore, SnapshotError, Snapshots};

/// The error code of a snapshot request refused.
pub(crate) const REFUSED: ErrorCode = ErrorCode(-32011);

/// The methods.
const METHODS: [&str; 4] = [
    "warden/snapshot",
    "warden/restore",
    "warden/snapshots",
    "warden/snapshot/delete",
];

/// Whether `method` is one of these.
pub(crate) fn handles(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Answers `request`, one of [`METHODS`].
pub(crate) async fn answer(
    snapshots: Option<&Snapshots>,
    dispatcher: &Dispatcher,
    request: &CustomRequest,
) -> Result<CustomResult, ErrorData> {
    let method = request.method.as_str();
    let Some(snapshots) = snapshots else {
        return Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("{method}: this server keeps no snapshots"),
            None,
        ));
    };
    let param = |key| crate::read::text_param(request, key);
    let invalid = |takes: &str| {
        Err(ErrorData::invalid_params(
            format!("{method} takes {takes}"),
            None,
        ))
    };
    match method {
        "warden/snapshot" => match param("tool") {
            Some(tool) => one(snapshots.take(dispatcher, tool).await),
            None => invalid("{\"tool\": NAME}"),
        },
        "warden/restore" => match (param("tool"), param("snapshot"), how(request)) {
            (Some(tool), Some(id), Some(how)) => {
                one(snapshots.restore(dispatcher, tool, id, how).await)
            }
            _ => invalid(
                "{\"tool\": NAME, \"snapshot\": ID, \"fork\": BOOL, \"force\": BOOL} (the two \
                 optional, not both true)",
            ),
        },
        "warden/snapshots" => snapshots
            .store()
            .list()
            .map(|all| {
                let shown: Vec<Value> = all.iter().map(shown).collect();
                CustomResult::new(json!({ "snapshots": shown }))
            })
            .map_err(refused),
        _ => match param("snapshot") {
            Some(id) => snapshots
                .store()
                .delete(id)
                .map(|()| CustomResult::new(json!({})))
                .map_err(refused),
            None => invalid("{\"snapshot\": ID}"),
        },
    }
}

/// How a `warden/restore` asks to be made, from its `fork` and `force`; None for values of
/// another shape, or both.
fn how(request: &CustomRequest) -> Option<Restore> {
    let flag = |key| match request.params.as_ref().and_then(|p| p.get(key)) {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => None,
    };
    match (flag("fork")?, flag("force")?) {
        (false, false) => Some(Restore::Rewind),
        (false, true) => Some(Restore::Forced),
        (true, false) => Some(Restore::Fork),
        (true, true) => None,
    }
}

fn one(taken: Result<Meta, SnapshotError>) -> Result<CustomResult, ErrorData> {
    taken
        .map(|meta| CustomResult::new(json!({ "snapshot": shown(&meta) })))
        .map_err(refused)
}

/// What a client is told of a snapshot: not its variables' values.
fn shown(meta: &Meta) -> Value {
    json!({
        "id": meta.id,
        "tool": meta.tool,
        "policy_digest": meta.policy_digest,
        "created_ms": meta.created_ms,
        "bytes": meta.bytes,
        "cwd": meta.shell.cwd,
    })
}

fn refused(e: SnapshotError) -> ErrorData {
    ErrorData::new(REFUSED, e.to_string(), Some(json!({ "kind": kind(&e) })))
}

/// The kind a refusal names, for a client to act on.
fn kind(e: &SnapshotError) -> &'static str {
    match e {
        SnapshotError::UnknownTool(_) => "unknown_tool",
        SnapshotError::ForkOfRoots(_) => "read_write_roots",
        SnapshotError::Roots {
            source: warden_tx::TxError::Conflict { .. },
            ..
        } => "conflict",
        SnapshotError::Roots {
            source: warden_tx::TxError::NotUndoable { .. },
            ..
        } => "not_undoable",
        SnapshotError::Roots { .. } => "roots",
        SnapshotError::Session(e) => e.kind.as_str(),
        SnapshotError::TooLarge { .. } => "too_large",
        SnapshotError::PolicyChanged { .. } => "policy_changed",
        SnapshotError::Refused(..) => "refused",
        SnapshotError::NotFound(_) => "not_found",
        SnapshotError::Full { .. } => "full",
        SnapshotError::Archive(_)
        | SnapshotError::NoState
        | SnapshotError::Unpack(_)
        | SnapshotError::Corrupt { .. }
        | SnapshotError::Store { .. }
        | SnapshotError::Random(_) => "unavailable",
    }
}
