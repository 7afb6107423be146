//! The dispatcher's promises that hold for any executor: here one that panics mid-call.

use serde_json::{Value, json};
use std::sync::Arc;
use warden_core::{BoxFuture, Executor, Invocation, Output, ToolCall, ToolError};
use warden_test_support::TestBackend;

/// Answers `{"n": N}` with N, and panics when N is 13.
struct Superstitious;

impl Executor for Superstitious {
    fn execute(&self, inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            let n = inv.arguments["n"].as_i64().unwrap_or_default();
            assert!(n != 13, "unlucky number");
            Ok(Output {
                content: n.to_string(),
                ..Output::default()
            })
        })
    }
}

#[tokio::test]
async fn a_panicking_executor_fails_only_its_own_call() {
    let dir = tempfile::tempdir().unwrap();
    let toolbox = TestBackend::new()
        .tool("count", Arc::new(Superstitious))
        .toolbox(dir.path(), "")
        .unwrap();
    let d = warden_core::Dispatcher::new(Arc::new(toolbox));
    let calls: Vec<ToolCall> = [12, 13, 14]
        .iter()
        .map(|n| ToolCall::new(format!("c{n}"), "count", &json!({"n": n})))
        .collect();
    let messages = d.dispatch(calls).await;
    let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents[0], "12");
    assert_eq!(contents[2], "14");
    let e = messages[1].error.as_ref().unwrap();
    assert_eq!(e.kind.as_str(), "internal");
    assert!(e.message.contains("panicked"));
    assert_eq!(messages[1].tool_call_id, "c13");
    let _: Value = messages[1].to_openai();

    // A lone call runs in the caller's task; its panic is caught all the same.
    let alone = d
        .call(ToolCall::new("solo", "count", &json!({"n": 13})))
        .await;
    assert_eq!(alone.error.unwrap().kind.as_str(), "internal");
    let next = d
        .call(ToolCall::new("after", "count", &json!({"n": 1})))
        .await;
    assert_eq!(next.content, "1");
}
