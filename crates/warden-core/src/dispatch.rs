//! The one path every call takes: check (the tool exists, the run's limits allow the call, the
//! arguments parse), review, admit, run under a deadline (with retries where the tool is
//! idempotent), redact, log, answer. A call answered without its executor's answer (refused by
//! a check, panicked, cancelled) takes the early path: the same message, record and observer.

use crate::admission::{Admission, Gate};
use crate::calllog::CallLog;
use crate::executor::{Denial, Reached, Sample, Usage};

use crate::message::{ErrorKind, Status, ToolCall, ToolError, ToolMessage};
use crate::output::OutputSink;
use crate::redact::Secrets;
use crate::review::Reviewer;
use crate::run::{RunCounter, RunLimits, RunUsage};
use crate::session::{ClientChoices, Scope};
use crate::toolbox::{Tool, Toolbox};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod batch;
mod exec;
mod message;
mod read;
mod write;
pub use read::{FILE_DETAIL, SUSPECT_DETAIL, base64_lines, clean_command, decode_lines, quoted};
mod record;
mod run;
mod span;

use span::CallSpan;
pub use span::{CallTelemetry, EndedCall, export_calls};

/// Hears of each call as it enters its sandbox and as it is answered, so that a transcript can
/// tell, after a crash, which calls were running and which had finished.
pub trait CallObserver: Send + Sync {
    /// The call passed its checks, review and admission and is about to run (once per attempt).
    fn started(&self, call: &ToolCall, arguments: &Value);
    /// The call's final message, however it came about: the executor's answer, a refusal, a
    /// panic, a cancellation. A call whose id an earlier call of its batch already has is not
    /// reported: the id, and so the call the observer knows by it, is the earlier one's.
    fn answered(&self, message: &ToolMessage);
}

/// Runs batches of tool calls against a toolbox. Every call gets exactly one message.
///
/// A dispatcher is one run: its run limits count calls across all its batches. Clones share
/// the run and its session; [`Dispatcher::new_session`] starts another session in the same
/// run, [`Dispatcher::new_run`] another run in the same session. A session ends at
/// [`Dispatcher::close`], or when its last clone is dropped.
#[derive(Clone)]
pub struct Dispatcher {
    toolbox: Arc<Toolbox>,
    gate: Arc<Gate>,
    run: Arc<RunCounter>,
    session: Arc<Scope>,
    reviewer: Option<Arc<dyn Reviewer>>,
    log: Option<Arc<CallLog>>,
    observer: Option<Arc<dyn CallObserver>>,
    fail_fast: bool,
}

impl Dispatcher {
    pub fn new(toolbox: Arc<Toolbox>) -> Self {
        Self::with_admission(toolbox, Admission::default())
    }

    pub fn with_admission(toolbox: Arc<Toolbox>, admission: Admission) -> Self {
        Self {
            session: Arc::new(Scope::new(toolbox.clone(), ClientChoices::default())),
            toolbox,
            gate: Arc::new(Gate::new(&admission)),
            run: Arc::new(RunCounter::new(admission.run)),
            reviewer: None,
            log: None,
            observer: None,
            fail_fast: false,
        }
    }

    /// Asks `reviewer` about calls whose policy requires review (without one they are rejected).
    pub fn reviewer(mut self, reviewer: Arc<dyn Reviewer>) -> Self {
        self.reviewer = Some(reviewer);
        self
    }

    /// Writes every call to `log`.
    pub fn call_log(mut self, log: Arc<CallLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// Tells `observer` when each call starts and when it is answered.
    pub fn observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// LangGraph's behaviour, opt-in: the first failure cancels the rest of its batch.
    pub fn fail_fast(mut self, on: bool) -> Self {
        self.fail_fast = on;
        self
    }

    pub fn toolbox(&self) -> &Arc<Toolbox> {
        &self.toolbox
    }

    /// The same run (limits, reviewer, log) in a session of its own: one MCP connection, one
    /// agent run.
    pub fn new_session(&self) -> Dispatcher {
        self.new_session_with(ClientChoices::default())
    }

    /// [`Dispatcher::new_session`], its client having made `choices` for its tools: each
    /// call of a tool named there gets them, where the tool's policy allows each (variables
    /// its `env_from_caller` names, an image it lists), and is refused otherwise.
    pub fn new_session_with(&self, choices: ClientChoices) -> Dispatcher {
        Dispatcher {
            session: Arc::new(Scope::new(self.toolbox.clone(), choices)),
            ..self.clone()
        }
    }

    /// [`Dispatcher::new_session_with`] over `toolbox` instead of this dispatcher's (this
    /// one's with some tools relocated: [`Toolbox::with_relocated`]).
    pub fn new_session_over(&self, toolbox: Arc<Toolbox>, choices: ClientChoices) -> Dispatcher {
        Dispatcher {
            session: Arc::new(Scope::new(toolbox.clone(), choices)),
            toolbox,
            ..self.clone()
        }
    }

    /// The same toolbox, admission, session, reviewer, log and observer in a run of its own:
    /// held to `limits`, and counting from zero (see [`Dispatcher::seed_counts`]).
    pub fn new_run(&self, limits: RunLimits) -> Dispatcher {
        Dispatcher {
            run: Arc::new(RunCounter::new(limits)),
            ..self.clone()
        }
    }

    /// Counts calls that an earlier process of this run made, one tool name per call, as if
    /// this dispatcher had made them: a resumed run stays held to its limits. Calls of tools
    /// this toolbox lacks are left out, as they are when made.
    pub fn seed_counts<'a>(&self, tools: impl IntoIterator<Item = &'a str>) {
        let known = tools.into_iter().filter(|t| self.toolbox.get(t).is_some());
        self.run.seed(known);
    }

    /// The calls counted against this run's limits so far: neither a call of an unknown tool,
    /// nor a reused id, nor a call a limit refused counts.
    pub fn calls_counted(&self) -> u32 {
        self.run.total()
    }

    /// What this run's answered calls used so far.
    pub fn usage_so_far(&self) -> RunUsage {
        self.run.spent()
    }

    /// The session this dispatcher's calls run in.
    pub fn session(&self) -> crate::SessionId {
        self.session.id
    }

    /// Ends the session now: executors free what they keep for it (a container, a shell) and
    /// this returns when they have, and the call log holds every record of its calls. Later
    /// calls start the session afresh.
    pub async fn close(&self) {
        self.session.close().await;
        if let Some(log) = &self.log {
            log.flush();
        }
    }

    /// Runs one call, in the caller's task: handing a lone call to another worker thread and
    /// back costs more than the sandbox itself. A panic is still caught and answered.
    pub async fn call(&self, call: ToolCall) -> ToolMessage {
        let span = CallSpan::new(&call, None);
        self.call_in(&call, &span, None).await
    }

    /// [`Dispatcher::call`], handing the call's output to `output` as it is written, where
    /// its executor can (a session command's), redacted as its answer is.
    pub async fn call_streaming(&self, call: ToolCall, output: OutputSink) -> ToolMessage {
        let span = CallSpan::new(&call, None);
        self.call_in(&call, &span, Some(output)).await
    }

    async fn call_in(
        &self,
        call: &ToolCall,
        span: &CallSpan,
        output: Option<OutputSink>,
    ) -> ToolMessage {
        let start = Instant::now();
        let (tool, arguments) = match self.admit_call(call).and_then(|tool| {
            parse_arguments(&call.arguments)
                .map(|a| (tool, a))
                .map_err(|e| (Some(tool), e))
        }) {
            Ok(checked) => checked,
            Err((tool, error)) => {
                return self.answer_early(span, call, tool, error, start.elapsed());
            }
        };
        match AssertUnwindSafe(self.run(span, call, tool, arguments, output))
            .catch_unwind()
            .await
        {
            Ok(message) => message,
            Err(_) => {
                tracing::error!(call = %call.id, "the executor panicked");
                self.answer_early(span, call, Some(tool), panicked(), start.elapsed())
            }
        }
    }

    /// Runs a batch concurrently and answers in the order of `calls`, whatever happens to each.
    /// Dropping the future cancels every call still running and frees its sandbox.
    pub async fn dispatch(&self, calls: Vec<ToolCall>) -> Vec<ToolMessage> {
        // Not entered while the batch runs (entering a span at each of its polls cost more
        // than the span): its calls name it as their parent.
        let batch = span::batch_span(calls.len());
        let answers = self.dispatch_in(calls, &batch).await;
        let failed = answers.iter().filter(|m| m.status == Status::Error);
        batch.record("warden.batch.failed", failed.count() as i64);
        answers
    }

    /// Answers a call whose `call` or `dispatch` future was dropped before it answered (an MCP
    /// client cancelled it, an agent's time budget ran out); `error` says why. Dropping the
    /// future stopped the call and freed its sandbox; this answer is logged and told to the
    /// observer like any other.
    pub fn answer_cancelled(
        &self,
        call: &ToolCall,
        error: ToolError,
        took: Duration,
    ) -> ToolMessage {
        // The call's span ended with its future, saying it was cancelled.
        let tool = self.toolbox.get(&call.name);
        self.answer_early(&CallSpan::none(), call, tool, error, took)
    }

    /// The checks before a call may run, in this order: its tool exists, and the run's
    /// limits allow one more call (only then is it counted). Its arguments are parsed next.
    fn admit_call(&self, call: &ToolCall) -> Result<&Tool, Refusal<'_>> {
        let tool = self.tool_for(call).map_err(|e| (None, e))?;
        self.run.count(&call.name).map_err(|e| (Some(tool), e))?;
        Ok(tool)
    }

    fn tool_for(&self, call: &ToolCall) -> Result<&Tool, ToolError> {
        self.toolbox
            .get(&call.name)
            .ok_or_else(|| self.unknown_tool(&call.name))
    }

    fn unknown_tool(&self, name: &str) -> ToolError {
        let names = self.toolbox.names();
        let hint = match self.toolbox.closest(name) {
            Some(close) => format!(" Did you mean `{close}`?"),
            None => String::new(),
        };
        // The model learns that tools may be missing, not where warden keeps its policies.
        let missing = match self.toolbox.broken().len() {
            0 => String::new(),
            n => format!(
                " ({n} of the toolbox's policies did not load, and their tools are missing: \
                 `warden tools` names them to the operator)"
            ),
        };
        ToolError::new(
            ErrorKind::UnknownTool,
            format!(
                "there is no tool named `{name}`.{hint} The tools are: {}{missing}",
                names.join(", ")
            ),
        )
        .with_detail("valid_names", names)
    }
}

/// What the log says of one call besides its message.
#[derive(Default)]
struct Facts {
    took: Duration,
    fuel: Option<u64>,
    attempts: u32,
    denied: Sample<Denial>,
    usage: Usage,
    reached: Sample<Reached>,
    roots_opened: Sample<String>,
    /// The hosts whose credentials the gate set in the call's requests.
    credentials: Sample<String>,
    /// A program's (`warden exec`), not a call's.
    exec: Option<ExecFacts>,
}

/// What the log says of a program run by `warden exec`.
struct ExecFacts {
    argv: Vec<String>,
    exit_status: Option<i32>,
    unlimited_time: bool,
}

/// The secret values a call of `tool` may see, to keep out of its message and its record.
fn secrets_of(tool: &Tool) -> Secrets {
    Secrets::new(tool.policy.grants.secrets())
}

/// A call refused before it ran: the error, and the tool when there is one.
type Refusal<'a> = (Option<&'a Tool>, ToolError);

/// The answer of a call whose executor panicked.
fn panicked() -> ToolError {
    ToolError::new(
        ErrorKind::Internal,
        "the executor panicked while running this call; it is a bug in warden, not in your call",
    )
}

/// A call's arguments as the model wrote them, parsed.
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
