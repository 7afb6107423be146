//! Reading one JSON-RPC message, as stdio reads a line and HTTP a body: what rmcp reads, or
//! the JSON-RPC error to answer instead. rmcp would drop a line that is not a message, answer
//! a body that is not one with a plain-text 415, and a known method whose params do not fit
//! it with "method not found"; each gets the error JSON-RPC 2.0 names, with the request's id
//! whenever it can be read (`-32700 Parse error`, `-32600 Invalid Request`, `-32602 Invalid
//! params`).

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, ErrorCode, RequestId,
};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

/// A message as rmcp reads it, or the answer to send instead (`None`: JSON-RPC says to stay
/// silent, as for a malformed notification).
pub(crate) fn read(text: &[u8]) -> Result<ClientJsonRpcMessage, Option<Value>> {
    match serde_json::from_slice::<ClientJsonRpcMessage>(text) {
        Ok(ClientJsonRpcMessage::Request(request)) if is_misshapen(&request.request) => {
            Err(Some(misshapen_reply(&request.request, request.id)))
        }
        Ok(message) => Ok(message),
        Err(e) => Err(refusal(text, &e)),
    }
}

/// Methods of MCP that rmcp reads as a custom request when their params do not fit.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
];

/// A request of a known method whose params do not fit it: rmcp would answer "method not
/// found", which misleads; it is "invalid params".
fn is_misshapen(request: &ClientRequest) -> bool {
    matches!(request, ClientRequest::CustomRequest(c) if KNOWN_METHODS.contains(&c.method.as_str()))
}

fn misshapen_reply(request: &ClientRequest, id: RequestId) -> Value {
    let ClientRequest::CustomRequest(custom) = request else {
        return error_reply(
            ErrorCode::INVALID_PARAMS,
            "Invalid params",
            id.into_json_value(),
        );
    };
    let params = custom.params.clone().unwrap_or(Value::Null);
    let why = match custom.method.as_str() {
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params)
            .err()
            .map(|e| format!(": {e}")),
        _ => None,
    };
    let message = format!(
        "Invalid params for `{}`{}",
        custom.method,
        why.unwrap_or_default()
    );
    error_reply(ErrorCode::INVALID_PARAMS, &message, id.into_json_value())
}

/// An error response.
pub(crate) fn error_reply(code: ErrorCode, message: &str, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}})
}

/// The members of a message that say what to answer it, each `None` when it is absent (a
/// member that is `null` is `Some(Value::Null)`).
#[derive(Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<IgnoredAny>,
}

/// A member that is present, whatever it holds.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl Envelope {
    fn of(object: &Map<String, Value>) -> Self {
        Self {
            jsonrpc: object.get("jsonrpc").cloned(),
            id: object.get("id").cloned(),
            method: object.get("method").cloned(),
            result: object.contains_key("result").then_some(IgnoredAny),
            error: object.contains_key("error").then_some(IgnoredAny),
        }
    }
}

/// The answer to text that is not a message warden understands; `None` when JSON-RPC says
/// to stay silent (a notification, or a response to a request of ours).
fn refusal(text: &[u8], e: &serde_json::Error) -> Option<Value> {
    let envelope = match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(object)) => Envelope::of(&object),
        Ok(_) => {
            let message = "Invalid Request: a message is one JSON-RPC 2.0 object";
            return Some(error_reply(
                ErrorCode::INVALID_REQUEST,
                message,
                Value::Null,
            ));
        }
        // Nested deeper than serde_json reads into a value (128 levels), or not JSON: the
        // members are read without descending into what they hold, which finds the id of a
        // request whose params are too deep.
        Err(_) => match serde_json::from_slice::<Envelope>(text) {
            Ok(envelope) => envelope,
            Err(_) => {
                tracing::debug!("a message that is not JSON: {e}");
                return Some(error_reply(
                    ErrorCode::PARSE_ERROR,
                    &format!("Parse error: {e}"),
                    Value::Null,
                ));
            }
        },
    };
    let id = envelope
        .id
        .as_ref()
        .filter(|id| id.is_string() || id.is_i64())
        .cloned();
    let version_ok = envelope.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0");
    match (envelope.method.as_ref().and_then(Value::as_str), id) {
        (Some(method), Some(id)) if version_ok => Some(error_reply(
            ErrorCode::INVALID_PARAMS,
            &format!("Invalid params for `{method}`: {e}"),
            id,
        )),
        (Some(_), None) if envelope.id.is_none() => {
            tracing::debug!("ignoring a malformed notification: {e}");
            None
        }
        (None, _) if envelope.result.is_some() || envelope.error.is_some() => {
            tracing::debug!("ignoring a malformed response: {e}");
            None
        }
        (_, id) => Some(error_reply(
            ErrorCode::INVALID_REQUEST,
            &format!("Invalid Request: not a JSON-RPC 2.0 request ({e})"),
            id.unwrap_or(Value::Null),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose params nest deeper than serde_json reads (100,000 levels in `_meta`)
    /// is answered with its id, so the client waiting on it is not left hanging.
    #[test]
    fn a_request_nested_too_deep_is_answered_with_its_id() {
        let depth = 100_000;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{{"name":"add","_meta":{{"x":{}1{}}}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let answer = read(line.as_bytes()).map(drop).unwrap_err().unwrap();
        assert_eq!(answer["id"], 17, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        // Cut short, it is not JSON: no id can be trusted.
        let cut = &line[..line.len() - 3];
        let answer = read(cut.as_bytes()).map(drop).unwrap_err().unwrap();
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
        assert_eq!(answer["id"], Value::Null);
        // A notification that deep is not answered.
        let note = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"x":{}1{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(matches!(read(note.as_bytes()), Err(None)));
    }
}
