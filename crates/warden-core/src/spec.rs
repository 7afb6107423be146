//! What a model is told about a tool.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool as offered to a model: a name, a description and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Matches `^[a-zA-Z0-9_-]{1,64}$`, as OpenAI and MCP require.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// JSON Schema of a successful result, when the tool's result type is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// True for names OpenAI and MCP accept: 1 to 64 of `[a-zA-Z0-9_-]`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_valid_tool_name("read-file"));
        assert!(is_valid_tool_name("files_v2"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("a.b"));
        assert!(!is_valid_tool_name(&"x".repeat(65)));
    }
}
