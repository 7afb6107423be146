//! `warden/start`: a client's request, never a tool a model can call, that starts its
//! session's sandbox of a tool ahead of the first command or transfer that would
//! (`warden_core::Dispatcher::start_sandbox`): a client that knows one is coming, and has
//! something else to do meanwhile, saves the sandbox's start. A fork does: its sandbox starts
//! while the snapshot it restores is taken.
//!
//! `{"tool": NAME, "fork"?: BOOL}` answers `{}`; a sandbox that could not start is the error
//! code [`crate::snapshot::REFUSED`] with `data: {"kind": KIND}`, the error kind of a call.
//! With `"fork": true` (the session is to get a fork, `warden/restore` with `fork`), only the
//! session's shell starts (the restore needs no shell beside it); a tool with read-write
//! roots starts nothing: its fork's sandbox starts over copies of them, made at the restore,
//! and one started now would be ended there. Parameters of another shape are
//! refused with `-32602`.

use rmcp::ErrorData;
use rmcp::model::{CustomRequest, CustomResult};
use serde_json::json;
use warden_core::Dispatcher;

/// The method.
pub(crate) const METHOD: &str = "warden/start";

/// Answers `request`, a `warden/start`, in `dispatcher`'s session.
pub(crate) async fn answer(
    dispatcher: &Dispatcher,
    request: &CustomRequest,
) -> Result<CustomResult, ErrorData> {
    let tool = crate::read::text_param(request, "tool");
    let (Some(tool), Some(fork)) = (tool, crate::read::flag_param(request, "fork")) else {
        return Err(ErrorData::invalid_params(
            format!("{METHOD} takes {{\"tool\": NAME, \"fork\": BOOL}} (`fork` optional)"),
            None,
        ));
    };
    let copied = |t: &warden_core::Tool| !warden_snapshot::roots::read_write(t).is_empty();
    if fork && dispatcher.toolbox().get(tool).is_some_and(copied) {
        return Ok(CustomResult::new(json!({})));
    }
    // A fork's restore goes in through the session's own shell where warden can take its
    // descriptors (`warden_snapshot`'s restore): no shell beside it is started for it.
    let started = if fork {
        dispatcher.start_shell(tool).await
    } else {
        dispatcher.start_sandbox(tool).await
    };
    match started {
        Ok(()) => Ok(CustomResult::new(json!({}))),
        Err(e) => Err(crate::snapshot::refused(e.into())),
    }
}
