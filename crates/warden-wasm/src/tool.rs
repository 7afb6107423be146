//! The executors of wasm tools: a function tool and a command tool, each a fresh instance per
//! call (a function's made ahead of its call when the caller has time: [`crate::spare`]).

use crate::exports::Export;
use crate::sandbox::{CallIo, exit_code};
use crate::shared::Shared;
use crate::spare::Spare;
use crate::value::{args_to_vals, val_to_json};
use serde_json::{Value, json};
use std::sync::Arc;
use warden_core::{BoxFuture, ErrorKind, Executor, Invocation, Output, ToolError, Violation};
use warden_tx::View;
use wasmtime::component::{ComponentExportIndex, Val};

/// One exported function as a tool.
pub(crate) struct FunctionTool {
    shared: Arc<Shared>,
    export: Export,
    /// Its next call's sandbox, when made ahead.
    spare: Arc<Spare>,
}

impl FunctionTool {
    pub(crate) fn new(shared: Arc<Shared>, export: Export) -> Self {
        let spare = Arc::new(Spare::new(&shared.grants));
        Self {
            shared,
            export,
            spare,
        }
    }

    async fn run(&self, inv: Invocation) -> Result<Output, ToolError> {
        let mut view = None;
        let answered = self.answer(&inv, &mut view).await;
        match view {
            Some(view) => crate::view::settle(view, &inv, &self.export.tool_name(), answered),
            None => answered,
        }
    }

    /// What the call answers; its view, if it has one, is put in `view`.
    async fn answer(&self, inv: &Invocation, view: &mut Option<View>) -> Result<Output, ToolError> {
        let params = args_to_vals(&inv.arguments, &self.export.params)
            .map_err(ToolError::invalid_arguments)?;
        let deadline = inv.deadline;
        let (mut sandbox, ahead) = match self.spare.claim(&inv.limits) {
            Some(prepared) => {
                let (mut sandbox, instance, cpu) = prepared.into_parts();
                sandbox.stop_at(deadline);
                (sandbox, Some((instance, cpu)))
            }
            None => (
                self.shared.sandbox(&inv.limits, CallIo::NONE, deadline)?,
                None,
            ),
        };
        *view = sandbox.view.take();
        sandbox.bind(inv, deadline);
        self.spare.refill(&self.shared, inv.limits);
        let mut results = vec![Val::Bool(false); usize::from(self.export.result.is_some())];
        if let Err(e) = self
            .shared
            .call(
                &mut sandbox,
                ahead,
                &self.export.index,
                &params,
                &mut results,
                &inv.usage,
            )
            .await
        {
            return Err(sandbox.failure(e, &inv.limits));
        }
        let value = results.pop();
        let mut output = Output {
            stdout: Some(sandbox.stdout.contents()),
            stderr: Some(sandbox.stderr.contents()),
            ..Output::default()
        };
        let value = match value {
            Some(Val::Result(Err(err))) => {
                let detail = err.as_deref().map(val_to_json).unwrap_or(Value::Null);
                let message = match &detail {
                    Value::String(s) => s.clone(),
                    Value::Null => "the tool reported an error".to_owned(),
                    other => other.to_string(),
                };
                return Err(ToolError::new(ErrorKind::ToolError, message)
                    .with_detail("error", detail)
                    .with_detail("stderr", output.stderr.unwrap_or_default()));
            }
            Some(Val::Result(Ok(ok))) => ok.as_deref().map(val_to_json),
            Some(v) => Some(val_to_json(&v)),
            None => None,
        };
        output.fuel_used = sandbox.fuel_used(&inv.limits);
        output.content = match &value {
            None | Some(Value::Null) => "ok".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        output.structured = value;
        sandbox.release();
        Ok(output)
    }
}

impl Executor for FunctionTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.run(invocation))
    }
}

/// A `wasi:cli/run` command as a tool: `{"args": [...], "stdin": "..."}` → stdout.
pub(crate) struct CommandTool {
    shared: Arc<Shared>,
    run: ComponentExportIndex,
    name: String,
}

impl CommandTool {
    pub(crate) fn new(shared: Arc<Shared>, run: ComponentExportIndex, name: String) -> Self {
        Self { shared, run, name }
    }

    /// The arguments every command tool takes.
    pub(crate) fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "args": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Command-line arguments (without the program name)."
                },
                "stdin": {"type": "string", "description": "Text for standard input."}
            },
            "additionalProperties": false
        })
    }

    fn parse(args: &Value) -> Result<(Vec<String>, Option<String>), Vec<Violation>> {
        let mut violations = Vec::new();
        let Some(obj) = args.as_object() else {
            return Err(vec![Violation::new(
                "",
                "expected a JSON object of arguments",
            )]);
        };
        let mut argv = Vec::new();
        let mut stdin = None;
        for (key, value) in obj {
            match key.as_str() {
                "args" => match value.as_array() {
                    Some(items) => {
                        for (i, item) in items.iter().enumerate() {
                            match item.as_str() {
                                Some(s) => argv.push(s.to_owned()),
                                None => violations.push(Violation::new(
                                    format!("/args/{i}"),
                                    "expected a string",
                                )),
                            }
                        }
                    }
                    None => {
                        violations.push(Violation::new("/args", "expected an array of strings"))
                    }
                },
                "stdin" => match value {
                    Value::String(s) => stdin = Some(s.clone()),
                    Value::Null => {}
                    _ => violations.push(Violation::new("/stdin", "expected a string")),
                },
                other => violations.push(Violation::new(
                    format!("/{}", other.replace('~', "~0").replace('/', "~1")),
                    format!("unknown field `{other}`; expected one of: args, stdin"),
                )),
            }
        }
        if violations.is_empty() {
            Ok((argv, stdin))
        } else {
            Err(violations)
        }
    }

    async fn execute_command(&self, inv: Invocation) -> Result<Output, ToolError> {
        let mut view = None;
        let answered = self.answer(&inv, &mut view).await;
        match view {
            Some(view) => crate::view::settle(view, &inv, &self.name, answered),
            None => answered,
        }
    }

    /// What the call answers; its view, if it has one, is put in `view`.
    async fn answer(&self, inv: &Invocation, view: &mut Option<View>) -> Result<Output, ToolError> {
        let (args, stdin) = Self::parse(&inv.arguments).map_err(ToolError::invalid_arguments)?;
        let argv: Vec<String> = std::iter::once(self.name.clone()).chain(args).collect();
        let io = CallIo {
            args: &argv,
            stdin: Some(stdin.as_deref().unwrap_or("")),
        };
        let mut sandbox = self.shared.sandbox(&inv.limits, io, inv.deadline)?;
        *view = sandbox.view.take();
        sandbox.bind(inv, inv.deadline);
        let mut results = [Val::Bool(false)];
        let outcome = self
            .shared
            .call(&mut sandbox, None, &self.run, &[], &mut results, &inv.usage)
            .await;
        let code = match outcome {
            Ok(()) => match &results[0] {
                Val::Result(Ok(_)) => 0,
                _ => 1,
            },
            Err(e) => match exit_code(&e) {
                Some(code) => code,
                None => return Err(sandbox.failure(e, &inv.limits)),
            },
        };
        let stdout = sandbox.stdout.contents();
        let stderr = sandbox.stderr.contents();
        if code != 0 {
            // A refused `memory.grow` makes most guests trap, but a runtime that checks it (Go's)
            // exits with a failing code: either way the memory limit is why the call failed.
            if let Some(oom) = sandbox.out_of_memory(&inv.limits) {
                return Err(oom
                    .with_detail("exit_code", code)
                    .with_detail("stderr", stderr));
            }
            let mut message = format!("the command exited with status {code}");
            if !stderr.trim().is_empty() {
                message.push_str(&format!(": {}", stderr.trim()));
            }
            return Err(ToolError::new(ErrorKind::ExitStatus, message)
                .with_detail("exit_code", code)
                .with_detail("stdout", stdout)
                .with_detail("stderr", stderr));
        }
        let fuel_used = sandbox.fuel_used(&inv.limits);
        sandbox.release();
        Ok(Output {
            content: stdout,
            stderr: Some(stderr),
            fuel_used,
            ..Output::default()
        })
    }
}

impl Executor for CommandTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.execute_command(invocation))
    }
}
