//! `warden/write`: a client's request, never a tool a model can call, that writes a file in
//! its session's sandbox (`warden_core::Dispatcher::write_file`), the twin of `warden/read`:
//! the way a client moves a file into a sandbox in one request, within the policy's
//! `transfer`.
//!
//! `{"tool": NAME, "path": ABSOLUTE, "data": BASE64, "new"?: bool}` answers `{"size": N}`,
//! or `{"error": {"kind", "message", "file"?, "suspect"}}` as `warden/read` does; `file`, when
//! the file itself is the reason, is one of `is_directory`, `exists` (with `"new": true`),
//! `invalid_path` (a parent is no directory), `permission_denied`, `too_large`. Parameters
//! that are not a tool, a path and base64 are refused with `-32602`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::ErrorData;
use rmcp::model::{CustomRequest, CustomResult};
use serde_json::{Value, json};
use warden_core::Dispatcher;

/// The method.
pub(crate) const METHOD: &str = "warden/write";

/// Answers `request`, a `warden/write`, in `dispatcher`'s session.
pub(crate) async fn answer(
    dispatcher: &Dispatcher,
    request: &CustomRequest,
) -> Result<CustomResult, ErrorData> {
    let param = |key| crate::read::text_param(request, key);
    let new = request.params.as_ref().and_then(|p| p.get("new"));
    let data = param("data").map(|d| STANDARD.decode(d));
    let (Some(tool), Some(path), Some(Ok(data)), None | Some(Value::Bool(_))) =
        (param("tool"), param("path"), data, new)
    else {
        return Err(ErrorData::invalid_params(
            format!(
                "{METHOD} takes {{\"tool\": NAME, \"path\": ABSOLUTE_PATH, \"data\": BASE64, \
                 \"new\": BOOL (optional)}}"
            ),
            None,
        ));
    };
    let size = data.len();
    let new = new == Some(&Value::Bool(true));
    let answer = match dispatcher.write_file(tool, path, data, new).await {
        Ok(()) => json!({ "size": size }),
        Err(e) => crate::read::error(&e),
    };
    Ok(CustomResult::new(answer))
}
