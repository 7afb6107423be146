//! Tool calls in, tool messages out.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// One tool call as a model asked for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call; its answer carries it back.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments exactly as the model wrote them: a JSON text, not yet parsed, so that a
    /// malformed one can be answered rather than lost.
    pub arguments: String,
}

impl ToolCall {
    /// A call whose arguments are already a JSON value.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.to_string(),
        }
    }
}

/// The closed set of ways a call can fail. The names are stable: models and people read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    UnknownTool,
    MalformedArguments,
    InvalidArguments,
    Denied,
    Rejected,
    ToolError,
    Timeout,
    OutOfFuel,
    OutOfMemory,
    Trap,
    ExitStatus,
    LimitExceeded,
    /// A call's changes to its read-write roots touched paths another call changed while it
    /// ran (or since, for an undo): not applied.
    Conflict,
    Unavailable,
    Internal,
}

impl ErrorKind {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::MalformedArguments => "malformed_arguments",
            Self::InvalidArguments => "invalid_arguments",
            Self::Denied => "denied",
            Self::Rejected => "rejected",
            Self::ToolError => "tool_error",
            Self::Timeout => "timeout",
            Self::OutOfFuel => "out_of_fuel",
            Self::OutOfMemory => "out_of_memory",
            Self::Trap => "trap",
            Self::ExitStatus => "exit_status",
            Self::LimitExceeded => "limit_exceeded",
            Self::Conflict => "conflict",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing wrong with a call's arguments, at a JSON path such as `/shape/width`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// JSON Pointer to the offending value; empty for the arguments object itself.
    pub path: String,
    /// What is wrong, in words a model can act on.
    pub message: String,
}

impl Violation {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// Why a call failed: a kind, a message for the model, details for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    pub kind: ErrorKind,
    /// Written for the model: what happened and what it can do about it.
    pub message: String,
    /// For people: backtraces, exit codes, partial output, violations.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            details: Value::Null,
        }
    }

    /// Something went wrong on warden's side, not the call's: the model can only retry.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// A call stopped at its time limit `limit`, with the limit in milliseconds as
    /// `timeout_ms`. The one wording of a timeout, whichever part of warden stopped the call
    /// (the dispatcher, a sandbox, a command's executor, which adds what became of the
    /// command and its output so far).
    pub fn timed_out(limit: Duration) -> Self {
        Self::new(
            ErrorKind::Timeout,
            format!(
                "the tool did not finish within its time limit of {limit:?} and was stopped; \
                 try smaller input or a cheaper request"
            ),
        )
        .with_detail(
            "timeout_ms",
            u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        )
    }

    /// Adds one detail field; `details` becomes an object if it was not one.
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.set_detail(key, value);
        self
    }

    /// Sets one detail field in place; `details` becomes an object if it was not one.
    pub fn set_detail(&mut self, key: &str, value: impl Into<Value>) {
        if !self.details.is_object() {
            self.details = Value::Object(Default::default());
        }
        if let Value::Object(map) = &mut self.details {
            map.insert(key.to_owned(), value.into());
        }
    }

    /// The refusal of a call whose `tool_call_id` an earlier call of its batch has: it is not
    /// run, since its answer could not be told from the earlier call's.
    pub fn reused_id(id: &str) -> Self {
        Self::new(
            ErrorKind::InvalidArguments,
            format!(
                "tool_call_id `{id}` is used by an earlier call of this batch; each call needs \
                 its own id, so this one was not run"
            ),
        )
    }

    /// Arguments that do not fit the tool's schema; every violation is listed.
    pub fn invalid_arguments(violations: Vec<Violation>) -> Self {
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        let message = format!(
            "the arguments do not match the tool's schema: {}",
            list.join("; ")
        );
        Self::new(ErrorKind::InvalidArguments, message).with_detail(
            "violations",
            serde_json::to_value(&violations).unwrap_or_default(),
        )
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ToolError {}

/// Whether a call succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Success,
    Error,
}

/// The one answer to one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolMessage {
    pub tool_call_id: String,
    pub name: String,
    pub status: Status,
    /// What the model reads.
    pub content: String,
    /// Set exactly when `status` is `Error`.
    pub error: Option<ToolError>,
    /// Data for the program, not the model: the structured result, captured output.
    pub artifact: Option<Value>,
}

impl ToolMessage {
    /// A successful answer.
    pub fn success(call: &ToolCall, content: String, artifact: Option<Value>) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            status: Status::Success,
            content,
            error: None,
            artifact,
        }
    }

    /// A failed answer; the content is the error's message with its kind, for the model.
    pub fn failure(call: &ToolCall, error: ToolError) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            status: Status::Error,
            content: format!("Error ({}): {}", error.kind, error.message),
            error: Some(error),
            artifact: None,
        }
    }

    /// LangChain's `ToolMessage` as JSON (`type: "tool"`).
    pub fn to_langchain(&self) -> Value {
        to_value(&self.langchain())
    }

    /// OpenAI's chat message with `role: "tool"`.
    pub fn to_openai(&self) -> Value {
        to_value(&self.openai())
    }

    /// [`ToolMessage::to_langchain`]'s JSON, serialized from the message as it stands: a
    /// printer of many answers builds (and frees) no `Value` of each, which cost `warden run`
    /// of 10,000 calls about 30 ms.
    pub fn langchain(&self) -> Rendered<'_> {
        Rendered {
            kind: Some("tool"),
            role: None,
            status: Some(self.status),
            ..self.rendered()
        }
    }

    /// [`ToolMessage::to_openai`]'s JSON, serialized from the message as it stands.
    pub fn openai(&self) -> Rendered<'_> {
        Rendered {
            role: Some("tool"),
            ..self.rendered()
        }
    }

    fn rendered(&self) -> Rendered<'_> {
        Rendered {
            kind: None,
            role: None,
            tool_call_id: &self.tool_call_id,
            name: &self.name,
            status: None,
            content: &self.content,
            error: self.error.as_ref(),
            artifact: self.artifact.as_ref(),
        }
    }
}

/// A [`ToolMessage`] as LangChain or OpenAI reads it ([`ToolMessage::langchain`],
/// [`ToolMessage::openai`]): the fields in the order each ecosystem's JSON has them.
#[derive(Serialize)]
pub struct Rendered<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    tool_call_id: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ToolError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact: Option<&'a Value>,
}

/// Infallible in practice: every map in a message has string keys.
fn to_value(rendered: &Rendered<'_>) -> Value {
    serde_json::to_value(rendered).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_for_both_ecosystems() {
        let call = ToolCall::new("c1", "add", &serde_json::json!({"a": 1}));
        let ok = ToolMessage::success(&call, "3".into(), None);
        let lc = ok.to_langchain();
        assert_eq!(lc["type"], "tool");
        assert_eq!(lc["status"], "success");
        assert_eq!(lc["tool_call_id"], "c1");
        let oa = ok.to_openai();
        assert_eq!(oa["role"], "tool");
        assert_eq!(oa["content"], "3");

        let err = ToolMessage::failure(&call, ToolError::new(ErrorKind::Timeout, "too slow"));
        let lc = err.to_langchain();
        assert_eq!(lc["status"], "error");
        assert_eq!(lc["error"]["kind"], "timeout");
        assert!(lc["content"].as_str().unwrap().contains("timeout"));
    }

    /// Printed straight from the message, the fields keep each ecosystem's order.
    #[test]
    fn renders_fields_in_order() {
        let call = ToolCall::new("c1", "add", &serde_json::json!({"a": 1}));
        let mut err = ToolMessage::failure(&call, ToolError::new(ErrorKind::Timeout, "slow"));
        err.artifact = Some(serde_json::json!({"z": 1, "a": 2}));
        let tail = r#""content":"Error (timeout): slow","error":{"kind":"timeout","message":"slow"},"artifact":{"z":1,"a":2}}"#;
        let lc = serde_json::to_string(&err.langchain()).unwrap();
        let head = r#"{"type":"tool","tool_call_id":"c1","name":"add","status":"error","#;
        assert_eq!(lc, format!("{head}{tail}"));
        assert_eq!(err.to_langchain().to_string(), lc);
        let oa = serde_json::to_string(&err.openai()).unwrap();
        assert_eq!(
            oa,
            format!(r#"{{"role":"tool","tool_call_id":"c1","name":"add",{tail}"#)
        );
        assert_eq!(err.to_openai().to_string(), oa);
    }

    #[test]
    fn invalid_arguments_lists_every_path() {
        let e = ToolError::invalid_arguments(vec![
            Violation::new("/a", "expected an integer"),
            Violation::new("/b/c", "missing"),
        ]);
        assert!(e.message.contains("/a: expected an integer"));
        assert!(e.message.contains("/b/c: missing"));
        assert_eq!(e.details["violations"].as_array().unwrap().len(), 2);
    }
}
