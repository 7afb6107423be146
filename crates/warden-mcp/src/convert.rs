//! warden's tools and messages in MCP's shapes.

use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, MetaObject, RequestId, ToolAnnotations,
};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};
use std::sync::Arc;
use warden_core::{SHELL_DETAIL, Tool, ToolMessage, ToolSpec};

/// The `_meta` key under which a failed call carries its error kind and message.
pub(crate) const ERROR_META: &str = "warden/error";
/// Where a result carries what the call used (wall time, CPU, memory, bytes through the gate).
pub(crate) const USAGE_META: &str = "warden/usage";
/// Where a command tool's result carries its exit code, streams, truncation and notes as data
/// ([`warden_core::SHELL_DETAIL`]).
pub(crate) const SHELL_META: &str = "warden/shell";

/// Whether results travel as `{"result": value}` (the result schema is not an object's), when
/// the tool's result type is known: what a call's answer needs, without building the schema.
fn wrapped(spec: &ToolSpec) -> Option<bool> {
    let schema = spec.output_schema.as_ref()?;
    Some(schema.get("type").and_then(Value::as_str) != Some("object"))
}

/// The `outputSchema` to advertise, when the tool's result type is known: always an object
/// schema, as MCP requires.
pub(crate) fn output_schema(spec: &ToolSpec) -> Option<JsonObject> {
    let schema = spec.output_schema.as_ref()?;
    match schema {
        Value::Object(map) if wrapped(spec) == Some(false) => Some(map.clone()),
        other => {
            let wrapped = json!({
                "type": "object",
                "properties": { "result": other },
                "required": ["result"],
            });
            let Value::Object(schema) = wrapped else {
                return None;
            };
            Some(schema)
        }
    }
}

/// A tool as `tools/list` shows it.
pub(crate) fn tool(tool: &Tool) -> rmcp::model::Tool {
    let input = match &tool.spec.input_schema {
        Value::Object(map) => map.clone(),
        _ => {
            let mut map = JsonObject::new();
            map.insert("type".into(), "object".into());
            map
        }
    };
    let mut out = rmcp::model::Tool::new(
        tool.spec.name.clone(),
        tool.spec.description.clone(),
        Arc::new(input),
    )
    .with_annotations(annotations(tool));
    if let Some(output) = output_schema(&tool.spec) {
        out = out.with_raw_output_schema(Arc::new(output));
    }
    out
}

/// Hints from the grants: a tool with no network and no writable root can change nothing
/// outside its own sandbox; a tool with network (granted hosts, or a docker or host tool's
/// opt-in to unrestricted network) reaches an open world.
fn annotations(tool: &Tool) -> ToolAnnotations {
    let grants = &tool.policy.grants;
    let open = tool.report.network.is_open(grants);
    let mut hints = ToolAnnotations::new().open_world(open);
    hints = if grants.writes_nothing() && !open {
        hints.read_only(true).destructive(false)
    } else {
        hints.read_only(false)
    };
    if tool.idempotent {
        hints = hints.idempotent(true);
    }
    hints
}

/// A call's message as a `tools/call` result: what it shows is decided once, in
/// [`Answered::view`], and rendered two ways: as rmcp's [`CallToolResult`]
/// ([`Answered::result`]), and written straight into a JSON-RPC response
/// ([`Answered::write_response`]) where the stdio transport answers a call itself.
///
/// Success: the content as text, plus `structuredContent` when the tool advertises an output
/// schema. Failure: `isError` with the message for the model as text; the error's kind and
/// message in `_meta["warden/error"]`, and in `structuredContent` too when the tool has no
/// output schema (clients such as the TypeScript SDK check any `structuredContent` against
/// the output schema, even on errors, so a tool with one gets none on failure). A structured
/// result cut by the output limit is a `limit_exceeded` failure carrying the cut text, and a
/// reviewer's answer to a call of a tool with an output schema a `rejected` failure carrying
/// the answer. What the call used goes in `_meta["warden/usage"]`, and a command's result as data in
/// `_meta["warden/shell"]`.
pub(crate) struct Answered {
    message: ToolMessage,
    /// The tool's results travel as `{"result": value}` (`Some(true)`), as they are
    /// (`Some(false)`), or unstructured (`None`: no output schema, or no such tool).
    wrapped: Option<bool>,
}

/// A reviewer's answer to a call of a tool with a typed result.
const RESPONDED: &str = "a reviewer answered this call in the tool's place, in words that are \
                         not the tool's typed result; the text is their answer";

/// The cut result's failure, for the model.
const CUT: &str = "the result was larger than the tool's output limit and was cut; the text \
                   shows its beginning; ask for less";

impl Answered {
    /// `message`, answered for the tool of `spec` (none when there is no such tool).
    pub(crate) fn new(message: ToolMessage, spec: Option<&ToolSpec>) -> Self {
        let wrapped = spec.and_then(wrapped);
        Self { message, wrapped }
    }

    /// The answer is an error result (`isError`): the call failed, or its result was cut.
    pub(crate) fn is_error(&self) -> bool {
        self.view().error.is_some()
    }

    fn view(&self) -> View<'_> {
        let m = &self.message;
        let detail = |key| match &m.error {
            Some(e) => e.details.get(key),
            None => m.artifact.as_ref().and_then(|a| a.get(key)),
        };
        let (usage, shell) = (detail("usage"), detail(SHELL_DETAIL));
        let failed = |kind, message| View {
            text: &m.content,
            structured: self
                .wrapped
                .is_none()
                .then_some(Structured::Error(ErrorMeta { kind, message })),
            error: Some(ErrorMeta { kind, message }),
            usage,
            shell,
        };
        let Some(error) = &m.error else {
            let result = m.artifact.as_ref().and_then(|a| a.get("result"));
            let structured = match (self.wrapped, result) {
                (None, _) => None,
                (Some(true), Some(v)) => Some(Structured::Wrapped(v)),
                (Some(false), Some(v)) => Some(Structured::Plain(v)),
                // The output limit cut the result, and the dispatcher dropped its structured
                // copy: a success without `structuredContent` would break clients that check
                // it against the output schema, so the cut text goes out as an error they do
                // not check.
                (Some(_), None)
                    if m.artifact.as_ref().and_then(|a| a.get("truncated"))
                        == Some(&Value::Bool(true)) =>
                {
                    return failed("limit_exceeded", CUT);
                }
                // A reviewer answered in the tool's place (`respond`): a person's text is not
                // the typed result the output schema promises, so it goes out as an error
                // result, which clients do not check against the schema, the text as it is.
                (Some(_), None) => return failed("rejected", RESPONDED),
            };
            return View {
                text: &m.content,
                structured,
                error: None,
                usage,
                shell,
            };
        };
        failed(error.kind.as_str(), &error.message)
    }

    /// The result as rmcp's type, for its service loop.
    pub(crate) fn result(&self) -> CallToolResult {
        let view = self.view();
        let text = vec![ContentBlock::text(view.text)];
        let mut result = if view.error.is_some() {
            CallToolResult::error(text)
        } else {
            CallToolResult::success(text)
        };
        result.structured_content = view.structured.as_ref().map(Structured::to_value);
        let mut meta = JsonObject::new();
        if let Some(e) = &view.error {
            meta.insert(ERROR_META.into(), e.to_value());
        }
        if let Some(usage) = view.usage {
            meta.insert(USAGE_META.into(), usage.clone());
        }
        if let Some(shell) = view.shell {
            meta.insert(SHELL_META.into(), shell.clone());
        }
        result.meta = (!meta.is_empty()).then_some(MetaObject(meta));
        result
    }

    /// Appends the JSON-RPC response to request `id` with this result, in the shape of a
    /// session before 2026-07-28 (no `resultType`), as rmcp would write it; none when that
    /// shape would move the result (a structured result that is not an object goes into the
    /// content), which only rmcp's conversion does, or when it cannot be written: the caller
    /// then takes rmcp's way, which says why.
    pub(crate) fn write_response(&self, id: &RequestId, out: &mut Vec<u8>) -> Option<()> {
        let view = self.view();
        if matches!(view.structured, Some(Structured::Plain(v)) if !v.is_object()) {
            return None;
        }
        let response = Response {
            jsonrpc: "2.0",
            id,
            result: view,
        };
        serde_json::to_writer(out, &response).ok()
    }
}

/// What a result shows, borrowed from its message; serialized as rmcp serializes a
/// [`CallToolResult`] without `resultType`.
struct View<'a> {
    text: &'a str,
    structured: Option<Structured<'a>>,
    error: Option<ErrorMeta<'a>>,
    usage: Option<&'a Value>,
    shell: Option<&'a Value>,
}

#[derive(Serialize)]
struct ErrorMeta<'a> {
    kind: &'a str,
    message: &'a str,
}

impl ErrorMeta<'_> {
    fn to_value(&self) -> Value {
        json!({ "kind": self.kind, "message": self.message })
    }
}

enum Structured<'a> {
    /// `{"result": value}`.
    Wrapped(&'a Value),
    Plain(&'a Value),
    Error(ErrorMeta<'a>),
}

impl Structured<'_> {
    fn to_value(&self) -> Value {
        match self {
            Structured::Wrapped(v) => json!({ "result": v }),
            Structured::Plain(v) => (*v).clone(),
            Structured::Error(e) => e.to_value(),
        }
    }
}

impl Serialize for Structured<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Structured::Wrapped(v) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("result", v)?;
                map.end()
            }
            Structured::Plain(v) => v.serialize(s),
            Structured::Error(e) => e.serialize(s),
        }
    }
}

impl Serialize for View<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Text<'a> {
            r#type: &'static str,
            text: &'a str,
        }
        struct Meta<'a>(&'a View<'a>);
        impl Serialize for Meta<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                if let Some(e) = &self.0.error {
                    map.serialize_entry(ERROR_META, e)?;
                }
                if let Some(usage) = self.0.usage {
                    map.serialize_entry(USAGE_META, usage)?;
                }
                if let Some(shell) = self.0.shell {
                    map.serialize_entry(SHELL_META, shell)?;
                }
                map.end()
            }
        }
        let mut map = s.serialize_map(None)?;
        let text = Text {
            r#type: "text",
            text: self.text,
        };
        map.serialize_entry("content", &[text])?;
        if let Some(structured) = &self.structured {
            map.serialize_entry("structuredContent", structured)?;
        }
        map.serialize_entry("isError", &self.error.is_some())?;
        if self.error.is_some() || self.usage.is_some() || self.shell.is_some() {
            map.serialize_entry("_meta", &Meta(self))?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: View<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(output: Option<Value>) -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            output_schema: output,
        }
    }

    #[test]
    fn scalars_are_wrapped_objects_are_not() {
        let integer = spec(Some(json!({"type": "integer"})));
        assert_eq!(wrapped(&integer), Some(true));
        let schema = output_schema(&integer).unwrap();
        assert_eq!(schema["properties"]["result"]["type"], "integer");
        assert_eq!(schema["required"], json!(["result"]));
        let object = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(wrapped(&spec(Some(object.clone()))), Some(false));
        let plain = output_schema(&spec(Some(object.clone()))).unwrap();
        assert_eq!(Value::Object(plain), object);
        let nullable = spec(Some(json!({"type": ["object", "null"]})));
        assert_eq!(wrapped(&nullable), Some(true));
        assert!(output_schema(&nullable).unwrap()["properties"]["result"].is_object());
        assert!(output_schema(&spec(None)).is_none());
        assert_eq!(wrapped(&spec(None)), None);
    }

    #[test]
    fn failures_carry_their_kind() {
        let call = warden_core::ToolCall::new("c", "ad", &json!({}));
        let error = warden_core::ToolError::new(warden_core::ErrorKind::UnknownTool, "no `ad`");
        let failed = Answered::new(ToolMessage::failure(&call, error), None).result();
        assert_eq!(failed.is_error, Some(true));
        let detail = json!({"kind": "unknown_tool", "message": "no `ad`"});
        assert_eq!(failed.structured_content, Some(detail.clone()));
        assert_eq!(failed.meta.unwrap().0[ERROR_META], detail);
        let ok = Answered::new(ToolMessage::success(&call, "fine".into(), None), None).result();
        assert_eq!(ok.is_error, Some(false));
        assert!(ok.structured_content.is_none() && ok.meta.is_none());
    }

    #[test]
    fn a_reviewers_answer_for_a_typed_tool_is_an_error_result_with_its_text() {
        let call = warden_core::ToolCall::new("c", "add", &json!({}));
        let said = ToolMessage::success(&call, "later, please".into(), None);
        let typed = spec(Some(json!({"type": "integer"})));
        let answered = Answered::new(said.clone(), Some(&typed)).result();
        assert_eq!(
            answered.is_error,
            Some(true),
            "no result a client checks by the schema"
        );
        assert!(answered.structured_content.is_none());
        assert_eq!(answered.meta.unwrap().0[ERROR_META]["kind"], "rejected");
        let text = serde_json::to_value(&answered.content).unwrap();
        assert_eq!(text[0]["text"], "later, please");
        let untyped = Answered::new(said, Some(&spec(None))).result();
        assert_eq!(
            untyped.is_error,
            Some(false),
            "a tool without a schema answers it"
        );
    }

    /// The response the stdio transport writes itself is, byte for byte, the one rmcp writes
    /// for a session before 2026-07-28; a result rmcp would move is left to rmcp.
    #[test]
    fn written_responses_are_rmcps() {
        use rmcp::model::{ServerJsonRpcMessage, ServerResult};
        let call = warden_core::ToolCall::new("c", "t", &json!({}));
        let usage = json!({"wall_ms": 0.125, "cpu_ms": 0.05, "peak_memory_bytes": 65536});
        let ok = |content: &str, artifact| ToolMessage::success(&call, content.into(), artifact);
        let error = warden_core::ToolError::new(warden_core::ErrorKind::Trap, "crashed \"x\"")
            .with_detail("usage", usage.clone());
        let integer = spec(Some(json!({"type": "integer"})));
        let object = spec(Some(json!({"type": "object"})));
        let cases = [
            (
                ok("3", Some(json!({"result": 3, "usage": usage}))),
                Some(&integer),
            ),
            (ok("3", Some(json!({"result": 3}))), None),
            (
                ok("{\"a\":\"é\\n\"}", Some(json!({"result": {"a": "é\n"}}))),
                Some(&object),
            ),
            (ok("cut…", Some(json!({"truncated": true}))), Some(&integer)),
            (ok("no result", None), Some(&integer)),
            (ToolMessage::failure(&call, error.clone()), None),
            (ToolMessage::failure(&call, error), Some(&integer)),
        ];
        for id in [RequestId::Number(7), RequestId::String("a\"b".into())] {
            for (message, spec) in &cases {
                let answered = Answered::new(message.clone(), *spec);
                let mut ours = Vec::new();
                answered.write_response(&id, &mut ours).expect("written");
                let mut result = ServerResult::CallToolResult(answered.result());
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                let rmcp = ServerJsonRpcMessage::response(result, id.clone());
                let rmcp = serde_json::to_vec(&rmcp).unwrap();
                assert_eq!(
                    String::from_utf8(ours).unwrap(),
                    String::from_utf8(rmcp).unwrap()
                );
            }
        }
        let scalar = ok("3", Some(json!({"result": 3})));
        let moved = Answered::new(scalar, Some(&object));
        assert!(
            moved
                .write_response(&RequestId::Number(1), &mut Vec::new())
                .is_none()
        );
    }
}
