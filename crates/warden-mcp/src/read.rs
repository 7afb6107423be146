//! `warden/read`: a client's request, never a tool a model can call, for the bytes of a file
//! in its session's sandbox (`warden_core::Dispatcher::read_file`): the way a client moves a
//! file out of a sandbox whatever the policy's `output` limit, within the policy's
//! `transfer`.
//!
//! `{"tool": NAME, "path": ABSOLUTE}` answers `{"size": N, "data": BASE64}`, or
//! `{"error": {"kind", "message", "file"?, "suspect"}}` when it cannot be read: an answer,
//! as a file that is not there is an everyday outcome. `kind` is the error kind of a call
//! (`unavailable`: the tool's policy allows no reads); `file`, when the file itself is the
//! reason, one of `file_not_found`, `is_directory`, `permission_denied`, `invalid_path`,
//! `too_large`; `suspect` is true when the sandbox's answers did not add up. Parameters that
//! are not a tool and a path are refused with `-32602`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::ErrorData;
use rmcp::model::{CustomRequest, CustomResult};
use serde_json::{Value, json};
use warden_core::{Dispatcher, FILE_DETAIL, SUSPECT_DETAIL, ToolError};

/// The method.
pub(crate) const METHOD: &str = "warden/read";

/// The text parameter `key` of a request of warden's own.
pub(crate) fn text_param<'a>(request: &'a CustomRequest, key: &str) -> Option<&'a str> {
    request
        .params
        .as_ref()
        .and_then(|p| p.get(key))
        .and_then(Value::as_str)
}

/// The optional flag `key` of a request of warden's own: false when absent, None when it is
/// not a boolean.
pub(crate) fn flag_param(request: &CustomRequest, key: &str) -> Option<bool> {
    match request.params.as_ref().and_then(|p| p.get(key)) {
        None => Some(false),
        Some(value) => value.as_bool(),
    }
}

/// Answers `request`, a `warden/read`, in `dispatcher`'s session.
pub(crate) async fn answer(
    dispatcher: &Dispatcher,
    request: &CustomRequest,
) -> Result<CustomResult, ErrorData> {
    let param = |key| text_param(request, key);
    let (Some(tool), Some(path)) = (param("tool"), param("path")) else {
        return Err(ErrorData::invalid_params(
            format!("{METHOD} takes {{\"tool\": NAME, \"path\": ABSOLUTE_PATH}}"),
            None,
        ));
    };
    let answer = match dispatcher.read_file(tool, path).await {
        Ok(bytes) => json!({ "size": bytes.len(), "data": STANDARD.encode(&bytes) }),
        Err(e) => error(&e),
    };
    Ok(CustomResult::new(answer))
}

/// A read's or a write's failure as its answer says it.
pub(crate) fn error(e: &ToolError) -> Value {
    json!({ "error": {
        "kind": e.kind.as_str(),
        "message": e.message,
        "file": e.details.get(FILE_DETAIL),
        "suspect": e.details.get(SUSPECT_DETAIL).is_some(),
    } })
}
