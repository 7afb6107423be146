//! warden's tools and messages in MCP's shapes.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, ToolAnnotations};
use serde_json::{Value, json};
use std::sync::Arc;
use warden_core::{Tool, ToolMessage, ToolSpec};

/// The `_meta` key under which a failed call carries its error kind and message.
pub(crate) const ERROR_META: &str = "warden/error";
/// Where a result carries what the call used (wall time, CPU, memory, bytes through the gate).
pub(crate) const USAGE_META: &str = "warden/usage";

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

/// A ToolMessage as a `tools/call` result.
///
/// Success: the content as text, plus `structuredContent` when the tool advertises an output
/// schema. Failure: `isError` with the message for the model as text; the error's kind and
/// message in `_meta["warden/error"]`, and in `structuredContent` too when the tool has no
/// output schema (clients such as the TypeScript SDK check any `structuredContent` against
/// the output schema, even on errors, so a tool with one gets none on failure). A structured
/// result cut by the output limit is a `limit_exceeded` failure carrying the cut text.
pub(crate) fn call_result(message: &ToolMessage, tool: Option<&Tool>) -> CallToolResult {
    let mut result = result_of(message, tool);
    let usage = match &message.error {
        Some(e) => e.details.get("usage"),
        None => message.artifact.as_ref().and_then(|a| a.get("usage")),
    };
    if let Some(usage) = usage {
        result
            .meta
            .get_or_insert_with(|| MetaObject(JsonObject::new()))
            .0
            .insert(USAGE_META.into(), usage.clone());
    }
    result
}

fn result_of(message: &ToolMessage, tool: Option<&Tool>) -> CallToolResult {
    let output = tool.and_then(|t| wrapped(&t.spec));
    let text = vec![ContentBlock::text(message.content.clone())];
    let Some(error) = &message.error else {
        let Some(output) = output else {
            return CallToolResult::success(text);
        };
        let artifact = message.artifact.as_ref();
        return match artifact.and_then(|a| a.get("result")) {
            Some(v) => {
                let mut result = CallToolResult::success(text);
                result.structured_content = Some(if output {
                    json!({"result": v})
                } else {
                    v.clone()
                });
                result
            }
            // The output limit cut the result, and the dispatcher dropped its structured copy:
            // a success without `structuredContent` would break clients that check it against
            // the output schema, so the cut text goes out as an error they do not check.
            None if artifact.is_some_and(|a| a.get("truncated") == Some(&Value::Bool(true))) => {
                let message = "the result was larger than the tool's output limit and was cut;                     the text shows its beginning; ask for less";
                failure(text, "limit_exceeded", message, false)
            }
            None => {
                tracing::warn!(
                    tool = %message.name,
                    "the tool has an output schema but answered without a structured result"
                );
                CallToolResult::success(text)
            }
        };
    };
    failure(text, error.kind.as_str(), &error.message, output.is_none())
}

/// A failed call: `isError`, the text for the model, the kind and message in `_meta`, and in
/// `structuredContent` too when no output schema constrains it.
fn failure(text: Vec<ContentBlock>, kind: &str, message: &str, structured: bool) -> CallToolResult {
    let detail = json!({ "kind": kind, "message": message });
    let mut result = CallToolResult::error(text);
    if structured {
        result.structured_content = Some(detail.clone());
    }
    let mut meta = JsonObject::new();
    meta.insert(ERROR_META.into(), detail);
    result.meta = Some(MetaObject(meta));
    result
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
        let failed = call_result(&ToolMessage::failure(&call, error), None);
        assert_eq!(failed.is_error, Some(true));
        let detail = json!({"kind": "unknown_tool", "message": "no `ad`"});
        assert_eq!(failed.structured_content, Some(detail.clone()));
        assert_eq!(failed.meta.unwrap().0[ERROR_META], detail);
        let ok = call_result(&ToolMessage::success(&call, "fine".into(), None), None);
        assert_eq!(ok.is_error, Some(false));
        assert!(ok.structured_content.is_none() && ok.meta.is_none());
    }
}
