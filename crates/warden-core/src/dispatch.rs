//! The one path every call takes: resolve, parse, admit, run under a deadline, answer.

use crate::executor::{Invocation, Output};
use crate::limits::cap_text;
use crate::message::{ErrorKind, ToolCall, ToolError, ToolMessage};
use crate::toolbox::{Tool, Toolbox};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Calls in flight across all tools when not configured.
pub const DEFAULT_GLOBAL_CONCURRENCY: usize = 64;

/// Runs batches of tool calls against a toolbox. Every call gets exactly one message.
#[derive(Clone)]
pub struct Dispatcher {
    toolbox: Arc<Toolbox>,
    global: Arc<Semaphore>,
}

impl Dispatcher {
    pub fn new(toolbox: Arc<Toolbox>) -> Self {
        Self::with_concurrency(toolbox, DEFAULT_GLOBAL_CONCURRENCY)
    }

    /// A dispatcher that runs at most `global` calls at once, across all tools.
    pub fn with_concurrency(toolbox: Arc<Toolbox>, global: usize) -> Self {
        Self {
            toolbox,
            global: Arc::new(Semaphore::new(global.max(1))),
        }
    }

    pub fn toolbox(&self) -> &Arc<Toolbox> {
        &self.toolbox
    }

    /// Runs one call.
    pub async fn call(&self, call: ToolCall) -> ToolMessage {
        let mut messages = self.dispatch(vec![call]).await;
        messages.pop().unwrap_or_else(unreachable_message)
    }

    /// Runs a batch concurrently and answers in the order of `calls`, whatever happens to each.
    /// Dropping the future cancels every call still running and frees its sandbox.
    pub async fn dispatch(&self, calls: Vec<ToolCall>) -> Vec<ToolMessage> {
        let mut answers: Vec<Option<ToolMessage>> = vec![None; calls.len()];
        let mut seen = HashSet::new();
        let mut set = JoinSet::new();
        let mut index_of = HashMap::new();
        for (i, call) in calls.iter().enumerate() {
            if !seen.insert(call.id.as_str()) {
                let err = ToolError::new(
                    ErrorKind::InvalidArguments,
                    format!(
                        "tool_call_id `{}` is used by an earlier call of this batch; each call \
                         needs its own id, so this one was not run",
                        call.id
                    ),
                );
                answers[i] = Some(ToolMessage::failure(call, err));
                continue;
            }
            let this = self.clone();
            let call = call.clone();
            let handle = set.spawn(async move { this.run(&call).await });
            index_of.insert(handle.id(), i);
        }
        while let Some(joined) = set.join_next_with_id().await {
            match joined {
                Ok((id, message)) => {
                    if let Some(&i) = index_of.get(&id) {
                        answers[i] = Some(message);
                    }
                }
                Err(e) => {
                    if let Some(&i) = index_of.get(&e.id()) {
                        let what = if e.is_panic() {
                            "the executor panicked while running this call"
                        } else {
                            "this call was cancelled"
                        };
                        tracing::error!(call = %calls[i].id, "{what}: {e}");
                        answers[i] = Some(ToolMessage::failure(
                            &calls[i],
                            ToolError::new(
                                ErrorKind::Internal,
                                format!("{what}; it is a bug in warden, not in your call"),
                            ),
                        ));
                    }
                }
            }
        }
        answers
            .into_iter()
            .zip(&calls)
            .map(|(answer, call)| {
                answer.unwrap_or_else(|| {
                    ToolMessage::failure(
                        call,
                        ToolError::new(ErrorKind::Internal, "no answer was produced"),
                    )
                })
            })
            .collect()
    }

    async fn run(&self, call: &ToolCall) -> ToolMessage {
        let Some(tool) = self.toolbox.get(&call.name) else {
            return ToolMessage::failure(call, self.unknown_tool(&call.name));
        };
        let arguments = match parse_arguments(&call.arguments) {
            Ok(v) => v,
            Err(e) => return ToolMessage::failure(call, e),
        };
        match self.execute(tool, call, arguments).await {
            Ok(output) => success(call, tool, output),
            Err(e) => ToolMessage::failure(call, e),
        }
    }

    async fn execute(
        &self,
        tool: &Tool,
        call: &ToolCall,
        arguments: Value,
    ) -> Result<Output, ToolError> {
        let closed = || ToolError::new(ErrorKind::Unavailable, "warden is shutting down");
        let _global = self.global.acquire().await.map_err(|_| closed())?;
        let _own = tool.permits.acquire().await.map_err(|_| closed())?;
        let invocation = Invocation {
            call_id: call.id.clone(),
            arguments,
            limits: tool.limits,
        };
        let deadline = tool.limits.timeout;
        match tokio::time::timeout(deadline, tool.executor.execute(invocation)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(
                ErrorKind::Timeout,
                format!(
                    "the tool did not finish within its time limit of {:?} and was stopped; \
                     try smaller input or a cheaper request",
                    deadline
                ),
            )
            .with_detail("timeout_ms", deadline.as_millis() as u64)),
        }
    }

    fn unknown_tool(&self, name: &str) -> ToolError {
        let names = self.toolbox.names();
        let hint = match self.toolbox.closest(name) {
            Some(close) => format!(" Did you mean `{close}`?"),
            None => String::new(),
        };
        ToolError::new(
            ErrorKind::UnknownTool,
            format!(
                "there is no tool named `{name}`.{hint} The tools are: {}",
                names.join(", ")
            ),
        )
        .with_detail("valid_names", names)
    }
}

fn parse_arguments(text: &str) -> Result<Value, ToolError> {
    // Models often send an empty string for a tool without parameters.
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text).map_err(|e| {
        ToolError::new(
            ErrorKind::MalformedArguments,
            format!("the arguments are not valid JSON ({e}); send a JSON object"),
        )
    })
}

fn success(call: &ToolCall, tool: &Tool, output: Output) -> ToolMessage {
    let cap = tool.limits.output;
    let content = cap_text(&output.content, cap);
    let mut artifact = serde_json::Map::new();
    if let Some(s) = output.structured {
        artifact.insert("result".into(), s);
    }
    if let Some(s) = output.stdout.filter(|s| !s.is_empty()) {
        artifact.insert("stdout".into(), s.into());
    }
    if let Some(s) = output.stderr.filter(|s| !s.is_empty()) {
        artifact.insert("stderr".into(), s.into());
    }
    let artifact = (!artifact.is_empty()).then_some(Value::Object(artifact));
    ToolMessage::success(call, content, artifact)
}

fn unreachable_message() -> ToolMessage {
    let call = ToolCall {
        id: String::new(),
        name: String::new(),
        arguments: String::new(),
    };
    ToolMessage::failure(
        &call,
        ToolError::new(ErrorKind::Internal, "no answer was produced"),
    )
}
