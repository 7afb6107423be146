//! Reading a model's turn: an OpenAI assistant message, a LangChain AIMessage, or a bare list.

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use warden_core::ToolCall;

/// The tool calls of one model turn, in the model's order.
pub(crate) fn parse(text: &str) -> Result<Vec<ToolCall>> {
    let value: Value = serde_json::from_str(text).context("the batch is not valid JSON")?;
    let list = match &value {
        Value::Array(items) => items,
        Value::Object(obj) => match obj.get("tool_calls") {
            Some(Value::Array(items)) => items,
            Some(_) => bail!("`tool_calls` must be an array"),
            None => bail!("expected an assistant message with `tool_calls`, or a list of calls"),
        },
        _ => bail!("expected an assistant message with `tool_calls`, or a list of calls"),
    };
    list.iter().enumerate().map(|(i, c)| call(i, c)).collect()
}

fn call(i: usize, v: &Value) -> Result<ToolCall> {
    let id = v["id"]
        .as_str()
        .map_or_else(|| format!("call-{}", i + 1), str::to_owned);
    // OpenAI: {"function": {"name", "arguments": "<json text>"}}; LangChain: {"name", "args"}.
    let (name, args) = match v.get("function") {
        Some(f) => (&f["name"], &f["arguments"]),
        None => (&v["name"], v.get("args").unwrap_or(&v["arguments"])),
    };
    let name = name
        .as_str()
        .with_context(|| format!("call {} has no tool name", i + 1))?
        .to_owned();
    let arguments = match args {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_shape() {
        let openai = r#"{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"add","arguments":"{\"a\":1}"}}]}"#;
        let c = parse(openai).unwrap();
        assert_eq!(
            (
                c[0].id.as_str(),
                c[0].name.as_str(),
                c[0].arguments.as_str()
            ),
            ("a", "add", "{\"a\":1}")
        );
        let langchain = r#"{"type":"ai","tool_calls":[{"id":"b","name":"add","args":{"a":2}}]}"#;
        assert_eq!(parse(langchain).unwrap()[0].arguments, "{\"a\":2}");
        let bare = r#"[{"name":"add","arguments":{"a":3}},{"name":"x","arguments":"{bad"}]"#;
        let c = parse(bare).unwrap();
        assert_eq!(c[0].id, "call-1");
        assert_eq!(c[1].arguments, "{bad");
        assert!(parse("{}").is_err());
        assert!(parse(r#"[{"args":{}}]"#).is_err());
    }
}
