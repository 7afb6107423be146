//! Snapshots of a session's sandbox: requests a client sends, never tools a model can call
//! (see `warden_snapshot`).
//!
//! - `warden/snapshot` `{"tool": NAME}` snapshots the sandbox of the tool in this session and
//!   answers `{"snapshot": SNAPSHOT}`;
//! - `warden/restore` `{"tool": NAME, "snapshot": ID, "fork"?: BOOL, "force"?: BOOL}` puts a
//!   snapshot into this session's sandbox of the tool and answers the same; its read-write
//!   roots are rewound (`force`: over what changed since by no call). With `"fork": true` (a
//!   new sandbox beside the one it was taken of) the session gets copies of the roots as the
//!   snapshot found them, which its sandboxes see in their place from then on (every policy
//!   granting one is loaded again so), until the session ends and the copies go;
//! - `warden/commit` `{"tool": NAME}`, in a fork's session, applies to the real roots what
//!   the fork's calls changed in its copies since they were made or last committed, as one
//!   call of the tool (`warden undo` puts it back), and answers `{"call_id": ID, "changes":
//!   CHANGES}` (`count`, `bytes`, and the changes as a call's answer lists them; `call_id`
//!   null when there was nothing to commit);
//!   a path the roots changed meanwhile is a `conflict`, and nothing is applied. In another
//!   session it is refused (`not_a_fork`);
//! - `warden/snapshots` `{}` answers `{"snapshots": [SNAPSHOT, …]}`, oldest first;
//! - `warden/snapshot/delete` `{"snapshot": ID}` answers `{}`.
//!
//! `SNAPSHOT` is `{id, tool, policy_digest, created_ms, bytes, cwd}`. A refusal is the error
//! code [`REFUSED`] with `data: {"kind": KIND}`, `KIND` one of [`kind`]'s; parameters that
//! are not those above, `-32602`.

use crate::session::Session;
use crate::state::PolicyLoader;
use rmcp::ErrorData;
use rmcp::model::{CustomRequest, CustomResult, ErrorCode};
use serde_json::{Value, json};
use std::sync::Arc;
use warden_core::{Dispatcher, Toolbox};
use warden_snapshot::{Meta, Restore, SnapshotError, Snapshots};

/// The error code of a snapshot request refused.
pub(crate) const REFUSED: ErrorCode = ErrorCode(-32011);

/// The methods.
const METHODS: [&str; 5] = [
    "warden/snapshot",
    "warden/restore",
    "warden/commit",
    "warden/snapshots",
    "warden/snapshot/delete",
];

/// Whether `method` is one of these.
pub(crate) fn handles(method: &str) -> bool {
    METHODS.contains(&method)
}

/// What a snapshot request is answered with.
pub(crate) struct Serving<'a> {
    pub snapshots: Option<&'a Snapshots>,
    /// Loads a fork's policies again.
    pub loader: Option<&'a PolicyLoader>,
    pub session: &'a Session,
    /// The server's dispatcher, which the session's is made from.
    pub base: &'a Dispatcher,
}

/// Answers `request`, one of [`METHODS`].
pub(crate) async fn answer(
    serving: Serving<'_>,
    request: &CustomRequest,
) -> Result<CustomResult, ErrorData> {
    let method = request.method.as_str();
    let Serving {
        snapshots,
        loader,
        session,
        base,
    } = serving;
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
            Some(tool) => one(snapshots.take(&session.dispatcher(base), tool).await),
            None => invalid("{\"tool\": NAME}"),
        },
        "warden/restore" => match (param("tool"), param("snapshot"), how(request)) {
            (Some(tool), Some(id), Some(how)) => {
                if how == Restore::Fork {
                    make_fork(snapshots, loader, session, base, tool, id).await?;
                }
                let dispatcher = session.dispatcher(base);
                one(snapshots.restore(&dispatcher, tool, id, how).await)
            }
            _ => invalid(
                "{\"tool\": NAME, \"snapshot\": ID, \"fork\": BOOL, \"force\": BOOL} (the two \
                 optional, not both true)",
            ),
        },
        "warden/commit" => match (param("tool"), session.fork_roots()) {
            (None, _) => invalid("{\"tool\": NAME}"),
            (Some(_), None) => Err(ErrorData::new(
                REFUSED,
                "this session is no fork's: its sandboxes write the real folders already",
                Some(json!({ "kind": "not_a_fork" })),
            )),
            (Some(tool), Some(roots)) => {
                let dispatcher = session.dispatcher(base);
                let (call_id, changes) = snapshots
                    .commit_fork(&dispatcher, tool, roots)
                    .await
                    .map_err(refused)?;
                let call_id = (!changes.changes.is_empty()).then_some(call_id);
                Ok(CustomResult::new(json!({
                    "call_id": call_id,
                    "changes": changes.to_json(warden_tx::settle::SHOWN),
                })))
            }
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

/// Gives `session` copies of the read-write roots snapshot `id` marks, and the server's
/// toolbox with every policy granting one loaded again over the copies; nothing for a
/// snapshot that marks none. Refused unless `tool`'s sandbox then writes the copies alone
/// (a snapshot of a fork marks the fork's copies, which no policy grants).
async fn make_fork(
    snapshots: &Snapshots,
    loader: Option<&PolicyLoader>,
    session: &Session,
    base: &Dispatcher,
    tool: &str,
    id: &str,
) -> Result<(), ErrorData> {
    let Some(found) = base.toolbox().get(tool) else {
        return Ok(()); // the restore names it
    };
    let meta = snapshots.store().meta(id).map_err(refused)?;
    if meta.policy_digest != found.policy_digest() {
        return Ok(()); // the restore refuses it, naming both policies
    }
    let Some(roots) = snapshots.fork_roots(&meta).await.map_err(refused)? else {
        return Ok(());
    };
    let unforked = |why: String| {
        ErrorData::new(
            REFUSED,
            format!("snapshot {id} marks read-write roots, and {why}"),
            Some(json!({ "kind": "read_write_roots" })),
        )
    };
    let Some(loader) = loader else {
        return Err(unforked(
            "this server cannot load policies again over copies of them".into(),
        ));
    };
    let toolbox = base.toolbox();
    let mut forked: Option<Toolbox> = None;
    for loaded in toolbox.policies() {
        let moved = roots.relocate(&loaded.policy);
        if moved.grants.fs == loaded.policy.grants.fs {
            continue;
        }
        let path = loaded.policy.path.display().to_string();
        let one = loader(moved).map_err(|e| {
            unforked(format!(
                "{path} does not load with them moved to copies: {e}"
            ))
        })?;
        forked = Some(forked.as_ref().unwrap_or(toolbox).with_relocated(&one));
    }
    let forked = forked.unwrap_or_else(|| toolbox.with_relocated(&Toolbox::default()));
    if !forked.get(tool).is_some_and(|t| roots.seen_by(t)) {
        return Err(unforked(format!(
            "{tool:?} does not grant them as read-write roots here (a snapshot of a fork \
             marks the fork's copies): fork the sandbox the fork was made from instead"
        )));
    }
    session.fork(Arc::new(forked), roots).await;
    Ok(())
}

/// How a `warden/restore` asks to be made, from its `fork` and `force`; None for values of
/// another shape, or both.
fn how(request: &CustomRequest) -> Option<Restore> {
    let flag = |key| crate::read::flag_param(request, key);
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

/// A refusal as every snapshot request answers it (`warden/start`'s too).
pub(crate) fn refused(e: SnapshotError) -> ErrorData {
    ErrorData::new(REFUSED, e.to_string(), Some(json!({ "kind": kind(&e) })))
}

/// The kind a refusal names, for a client to act on.
fn kind(e: &SnapshotError) -> &'static str {
    match e {
        SnapshotError::UnknownTool(_) => "unknown_tool",
        SnapshotError::Untracked(_) => "in_place",
        SnapshotError::ForkOfRoots { .. } | SnapshotError::OtherRoots { .. } => "read_write_roots",
        SnapshotError::Roots { source, .. } | SnapshotError::Commit(source) => match source {
            warden_tx::TxError::Conflict { .. } => "conflict",
            warden_tx::TxError::NotUndoable { .. } => "not_undoable",
            warden_tx::TxError::TooLarge { .. } => "limit_exceeded",
            _ => "roots",
        },
        SnapshotError::Session(e) => e.kind.as_str(),
        SnapshotError::TooLarge { .. } | SnapshotError::RootsTooLarge { .. } => "too_large",
        SnapshotError::PolicyChanged { .. } => "policy_changed",
        SnapshotError::Refused(..) => "refused",
        SnapshotError::NotFound(_) => "not_found",
        SnapshotError::Full { .. } => "full",
        SnapshotError::Archive(_)
        | SnapshotError::Copy { .. }
        | SnapshotError::NoState
        | SnapshotError::Unpack(_)
        | SnapshotError::Corrupt { .. }
        | SnapshotError::Store { .. }
        | SnapshotError::Random(_) => "unavailable",
    }
}
