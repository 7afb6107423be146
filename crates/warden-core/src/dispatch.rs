//! The one path every call takes: check (the tool exists, the run's limits allow the call, the
//! arguments parse), review, admit, run under a deadline (with retries where the tool is
//! idempotent), redact, log, answer. A call answered without its executor's answer (refused by
//! a check, panicked, cancelled) takes the early path: the same message, record and observer.

use crate::admission::{Admission, Gate};
use crate::calllog::{CallLog, CallOutcome, CallRecord, DenialRecord, ExecRecord, Record, now_ms};
use crate::executor::{Denial, Denials, Invocation, Meter, Output, Reached, Sample, Usage};
use crate::grants::{CallerEnv, NO_CALLER_ENV};
use crate::limits::cap_text;
use crate::message::{ErrorKind, Status, ToolCall, ToolError, ToolMessage};
use crate::output::OutputSink;
use crate::redact::{RedactedSink, Secrets};
use crate::review::{Decision, Reviewer};
use crate::run::{RunCounter, RunLimits, RunUsage};
use crate::session::Scope;
use crate::toolbox::{Tool, Toolbox};
use futures::FutureExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

mod exec;
mod span;

use span::{Answer, CallSpan};
pub use span::{CallTelemetry, EndedCall, export_calls};

/// Attempts of an idempotent call that keeps failing transiently.
const MAX_ATTEMPTS: u32 = 3;
/// The first retry waits this long; each next one twice as long.
const BACKOFF: Duration = Duration::from_millis(100);

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
            session: Arc::new(Scope::new(toolbox.clone(), BTreeMap::new())),
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
        self.new_session_with(BTreeMap::new())
    }

    /// [`Dispatcher::new_session`], its client having set `caller_env`, variables by tool:
    /// each call of a tool named there gets them, where the tool's policy allows each name
    /// (`env_from_caller`), and is refused otherwise.
    pub fn new_session_with(&self, caller_env: BTreeMap<String, CallerEnv>) -> Dispatcher {
        Dispatcher {
            session: Arc::new(Scope::new(self.toolbox.clone(), caller_env)),
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

    async fn dispatch_in(&self, calls: Vec<ToolCall>, batch: &tracing::Span) -> Vec<ToolMessage> {
        let start = Instant::now();
        let mut answers: Vec<Option<ToolMessage>> = vec![None; calls.len()];
        let mut seen = HashSet::new();
        let mut set = JoinSet::new();
        let mut index_of = HashMap::new();
        for (i, call) in calls.iter().enumerate() {
            let span = CallSpan::new(call, Some(batch));
            if !seen.insert(call.id.as_str()) {
                // Logged but not told to the observer: it knows calls by id, and this id is
                // the earlier call's, which may still be running.
                let tool = self.toolbox.get(&call.name);
                answers[i] = Some(self.log_early(
                    &span,
                    call,
                    tool,
                    ToolError::reused_id(&call.id),
                    start.elapsed(),
                ));
                continue;
            }
            if let Err((tool, error)) = self.admit_call(call) {
                answers[i] = Some(self.answer_early(&span, call, tool, error, start.elapsed()));
                continue;
            }
            let this = self.clone();
            let call = call.clone();
            // Arguments are parsed in the call's own task, so a batch's parsing spreads over
            // the runtime's threads like the rest of its work.
            let task = async move {
                let checked = this
                    .tool_for(&call)
                    .map_err(|e| (None, e))
                    .and_then(|tool| {
                        parse_arguments(&call.arguments)
                            .map(|a| (tool, a))
                            .map_err(|e| (Some(tool), e))
                    });
                match checked {
                    Ok((tool, arguments)) => this.run(&span, &call, tool, arguments, None).await,
                    Err((tool, error)) => {
                        this.answer_early(&span, &call, tool, error, start.elapsed())
                    }
                }
            };
            let handle = set.spawn(task);
            index_of.insert(handle.id(), i);
        }
        let mut failed: Option<usize> = answers
            .iter()
            .position(|a| a.as_ref().is_some_and(|m| m.status == Status::Error));
        if self.fail_fast && failed.is_some() {
            set.abort_all();
        }
        while let Some(joined) = set.join_next_with_id().await {
            let (i, message) = match joined {
                Ok((id, message)) => match index_of.get(&id) {
                    Some(&i) => (i, message),
                    None => continue,
                },
                Err(e) => {
                    let Some(&i) = index_of.get(&e.id()) else {
                        continue;
                    };
                    if e.is_cancelled() {
                        // Aborted by fail_fast; answered below.
                        continue;
                    }
                    let call = &calls[i];
                    tracing::error!(call = %call.id, "the executor panicked: {e}");
                    let tool = self.toolbox.get(&call.name);
                    // The call's span ended with the task, saying it failed.
                    let none = CallSpan::none();
                    let took = start.elapsed();
                    (i, self.answer_early(&none, call, tool, panicked(), took))
                }
            };
            if message.status == Status::Error && failed.is_none() {
                failed = Some(i);
                if self.fail_fast {
                    set.abort_all();
                }
            }
            answers[i] = Some(message);
        }
        let took = start.elapsed();
        answers
            .into_iter()
            .zip(&calls)
            .map(|(answer, call)| {
                answer.unwrap_or_else(|| {
                    let error = match failed {
                        Some(f) if self.fail_fast => ToolError::new(
                            ErrorKind::Unavailable,
                            format!(
                                "not run: call `{}` of this batch failed first, and fail_fast is on",
                                calls[f].id
                            ),
                        ),
                        _ => ToolError::new(ErrorKind::Internal, "no answer was produced"),
                    };
                    // An aborted task's span ended with it.
                    let tool = self.toolbox.get(&call.name);
                    self.answer_early(&CallSpan::none(), call, tool, error, took)
                })
            })
            .collect()
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

    /// The early path, for a call answered without its executor's answer: refused by a check,
    /// panicked, cancelled. Logged and told to the observer like any other answer.
    fn answer_early(
        &self,
        span: &CallSpan,
        call: &ToolCall,
        tool: Option<&Tool>,
        error: ToolError,
        took: Duration,
    ) -> ToolMessage {
        let message = self.log_early(span, call, tool, error, took);
        self.tell_answered(&message);
        message
    }

    /// The early path's message, redacted and logged (the observer is not told).
    fn log_early(
        &self,
        span: &CallSpan,
        call: &ToolCall,
        tool: Option<&Tool>,
        error: ToolError,
        took: Duration,
    ) -> ToolMessage {
        let secrets = tool.map(secrets_of).unwrap_or_default();
        let mut message = ToolMessage::failure(call, error);
        attach_usage(&mut message, took, Usage::default(), None);
        redact_message(&secrets, &mut message);
        let facts = Facts {
            took,
            ..Facts::default()
        };
        self.write_log(span, call, tool, &secrets, &message, &facts);
        message
    }

    /// The normal path: review, admission, the executor under its deadline, retries.
    async fn run(
        &self,
        span: &CallSpan,
        call: &ToolCall,
        tool: &Tool,
        arguments: Value,
        output: Option<OutputSink>,
    ) -> ToolMessage {
        let secrets = secrets_of(tool);
        let start = Instant::now();
        let denials = Denials::default();
        let meter = Meter::default();
        let output = output.map(|sink| RedactedSink::new(sink, &secrets));
        let Answered {
            mut message,
            fuel,
            attempts,
            usage,
        } = self
            .answer(tool, call, arguments, &denials, &meter, output.as_ref())
            .await;
        if let Some(output) = &output {
            output.finish();
        }
        let denied = denials.snapshot();
        attach_denials(&mut message, &denied);
        let reached = meter.reached();
        attach_exercised(&mut message, ("reached", "reached_count"), &reached);
        let roots_opened = meter.roots_opened();
        attach_exercised(&mut message, ("roots_opened", "root_uses"), &roots_opened);
        let credentials = meter.credentials_used();
        attach_exercised(
            &mut message,
            ("credentials_used", "credentials_used_count"),
            &credentials,
        );
        let took = start.elapsed();
        attach_usage(&mut message, took, usage, fuel);
        redact_message(&secrets, &mut message);
        let facts = Facts {
            took,
            fuel,
            attempts,
            denied,
            usage,
            reached,
            roots_opened,
            credentials,
            exec: None,
        };
        self.write_log(span, call, Some(tool), &secrets, &message, &facts);
        self.tell_answered(&message);
        message
    }

    /// The message for a known tool, with the fuel burnt, the attempts made and what the
    /// last attempt used; what every attempt reached goes to `meter`.
    async fn answer(
        &self,
        tool: &Tool,
        call: &ToolCall,
        mut arguments: Value,
        denials: &Denials,
        meter: &Meter,
        output: Option<&RedactedSink>,
    ) -> Answered {
        if tool.review_required {
            match self.review(tool, call).await {
                Decision::Approve => {}
                Decision::Edit { arguments: edited } => arguments = edited,
                Decision::Reject { reason } => {
                    let err = ToolError::new(
                        ErrorKind::Rejected,
                        format!("a reviewer rejected this call: {reason}"),
                    );
                    return Answered::before_running(ToolMessage::failure(call, err));
                }
                Decision::Respond { content } => {
                    let m = ToolMessage::success(call, content, None);
                    return Answered::before_running(m);
                }
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // A retry counts its own figures; the first attempt uses the call's meter.
            let meter = if attempt == 1 {
                meter.clone()
            } else {
                meter.attempt()
            };
            // Only an attempt that may be retried needs the arguments kept.
            let retry = tool.idempotent && attempt < MAX_ATTEMPTS;
            let attempt_arguments = if retry {
                arguments.clone()
            } else {
                std::mem::take(&mut arguments)
            };
            let result = self
                .execute(
                    tool,
                    call,
                    attempt_arguments,
                    denials.clone(),
                    meter.clone(),
                    output.map(RedactedSink::sink),
                )
                .await;
            match result {
                Ok(output) => {
                    return Answered {
                        fuel: output.fuel_used,
                        message: success(call, tool, output),
                        attempts: attempt,
                        usage: meter.get(),
                    };
                }
                Err(e) if retry && is_transient(e.kind) => {
                    tracing::info!(call = %call.id, attempt, "retrying after {}", e.kind);
                    tokio::time::sleep(BACKOFF * 2u32.pow(attempt - 1)).await;
                }
                Err(e) => {
                    return Answered {
                        message: ToolMessage::failure(call, e),
                        fuel: None,
                        attempts: attempt,
                        usage: meter.get(),
                    };
                }
            }
        }
    }

    async fn review(&self, tool: &Tool, call: &ToolCall) -> Decision {
        match &self.reviewer {
            Some(r) => r.review(call, &tool.spec).await,
            None => Decision::Reject {
                reason: "this tool needs a person to review each call, and no reviewer is \
                         available here; ask the user to run it with a reviewer"
                    .into(),
            },
        }
    }

    async fn execute(
        &self,
        tool: &Tool,
        call: &ToolCall,
        arguments: Value,
        denials: Denials,
        usage: Meter,
        output: Option<OutputSink>,
    ) -> Result<Output, ToolError> {
        let caller_env = self
            .session
            .caller_env
            .get(&call.name)
            .unwrap_or(&NO_CALLER_ENV)
            .clone();
        tool.policy.grants.check_caller_env(&caller_env)?;
        let _permit = self.gate.admit(tool).await?;
        if let Some(o) = &self.observer {
            o.started(call, &arguments);
        }
        let invocation = Invocation {
            call_id: call.id.clone(),
            arguments,
            limits: tool.limits,
            denials,
            session: self.session.id,
            usage,
            output,
            caller_env,
        };
        self.session.touch();
        let deadline = tool.limits.timeout;
        match tokio::time::timeout(deadline, tool.executor.execute(invocation)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(
                ErrorKind::Timeout,
                format!(
                    "the tool did not finish within its time limit of {deadline:?} and was \
                     stopped; try smaller input or a cheaper request"
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

    /// Called after the log is written: an observer may end the run as soon as it hears.
    fn tell_answered(&self, message: &ToolMessage) {
        if let Some(o) = &self.observer {
            o.answered(message);
        }
    }

    fn write_log(
        &self,
        span: &CallSpan,
        call: &ToolCall,
        tool: Option<&Tool>,
        secrets: &Secrets,
        m: &ToolMessage,
        facts: &Facts,
    ) {
        self.run.spend(m.status == Status::Error, &facts.usage);
        span.answered(Answer {
            call,
            tool,
            secrets,
            message: m,
            facts,
            session: self.session.id.get(),
        });
        let Some(log) = &self.log else {
            return;
        };
        let ts_ms = now_ms();
        for d in &facts.denied.kept {
            let denial = DenialRecord {
                ts_ms,
                tool: call.name.clone(),
                call_id: call.id.clone(),
                destination: d.destination.clone(),
                reason: d.reason.clone(),
            };
            log.write(Record::Denied(&denial), secrets);
        }
        if let Some(t) = tool {
            log.describe_policy(&t.facts, secrets);
        }
        let record = CallRecord {
            ts_ms,
            tool: &call.name,
            call_id: &call.id,
            outcome: CallOutcome::of(m),
            duration_ms: crate::units::millis(facts.took),
            attempts: facts.attempts,
            fuel: facts.fuel,
            usage: facts.usage,
            denied_count: counted(&facts.denied),
            reached: &facts.reached.kept,
            reached_count: counted(&facts.reached),
            roots_opened: &facts.roots_opened.kept,
            root_uses: counted(&facts.roots_opened),
            credentials_used: &facts.credentials.kept,
            credentials_used_count: counted(&facts.credentials),
            executor: tool.map(|t| t.facts.executor.as_str()),
            policy_digest: tool.map(|t| t.facts.policy_digest.as_str()),
            message: m.error.as_ref().map(|e| e.message.as_str()),
            exec: facts
                .exec
                .as_ref()
                .map(|e| ExecRecord::new(&e.argv, e.exit_status, e.unlimited_time)),
        };
        log.write(Record::Call(&record), secrets);
    }
}

/// A call refused before it ran: the error, and the tool when there is one.
type Refusal<'a> = (Option<&'a Tool>, ToolError);

/// A known tool's message, with the fuel burnt, the attempts made and what the last
/// attempt used.
struct Answered {
    message: ToolMessage,
    fuel: Option<u64>,
    attempts: u32,
    usage: Usage,
}

impl Answered {
    /// Answered without running the tool (a reviewer's rejection or response).
    fn before_running(message: ToolMessage) -> Self {
        Self {
            message,
            fuel: None,
            attempts: 0,
            usage: Usage::default(),
        }
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

/// The log's count of a sample: absent when there were none.
fn counted<T>(sample: &Sample<T>) -> Option<u64> {
    (sample.total > 0).then_some(sample.total)
}

/// What the call cost goes with every answer: `usage` in the artifact, or in an error's
/// details: wall time, what the executor measured, and fuel when metered.
fn attach_usage(m: &mut ToolMessage, took: Duration, usage: Usage, fuel: Option<u64>) {
    let mut value = serde_json::to_value(usage).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut value {
        map.insert("wall_ms".into(), json!(crate::units::millis(took)));
        if let Some(fuel) = fuel {
            map.insert("fuel".into(), fuel.into());
        }
    }
    set_detail(m, "usage", value);
}

/// What the call exercised goes with its answer too, when it did any: the list under the
/// first key (`reached`, `roots_opened`), every occurrence counted under the second
/// (`reached_count`, `root_uses`: one root opened five times is one root and five uses).
fn attach_exercised<T: serde::Serialize>(
    m: &mut ToolMessage,
    (key, count_key): (&str, &str),
    sample: &Sample<T>,
) {
    if sample.total == 0 {
        return;
    }
    set_detail(
        m,
        key,
        serde_json::to_value(&sample.kept).unwrap_or_default(),
    );
    set_detail(m, count_key, sample.total.into());
}

/// Sets `key` in an error's details, or in a success's artifact.
fn set_detail(m: &mut ToolMessage, key: &str, value: Value) {
    match &mut m.error {
        Some(e) => *e = e.clone().with_detail(key, value),
        None => {
            if let Value::Object(map) = m.artifact.get_or_insert_with(|| json!({})) {
                map.insert(key.into(), value);
            }
        }
    }
}

/// Refusals are news to the model too: it should stop asking for what the policy forbids.
fn attach_denials(m: &mut ToolMessage, denied: &Sample<Denial>) {
    let (count, denied) = (denied.total, &denied.kept);
    if count == 0 {
        return;
    }
    let list = serde_json::to_value(denied).unwrap_or_default();
    match &mut m.error {
        Some(e) => {
            // The tool's own words may not say what was refused; warden's do.
            if let Some(first) = denied.first() {
                let more = match count {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                let note = format!(" [warden refused {}{more}]", refusal(first));
                e.message.push_str(&note);
                m.content.push_str(&note);
            }
            *e = e
                .clone()
                .with_detail("denied", list)
                .with_detail("denied_count", count);
        }
        None => {
            let artifact = m.artifact.get_or_insert_with(|| json!({}));
            if let Value::Object(map) = artifact {
                map.insert("denied".into(), list);
                map.insert("denied_count".into(), count.into());
            }
        }
    }
}

/// A refusal as the note on an error says it: the destination and why, naming the
/// destination once where the reason begins with it (`http://10.0.0.1:80: not granted…`,
/// not `http://10.0.0.1:80: 10.0.0.1:80 is not granted…`).
fn refusal(d: &Denial) -> String {
    // `http://host:port`, `connect host:port`, `tcp 10.0.0.1:22`: the address is the last part.
    let address = d.destination.rsplit(['/', ' ']).next().unwrap_or_default();
    let why = d
        .reason
        .strip_prefix(address)
        .and_then(|rest| rest.strip_prefix(" is "))
        .filter(|_| !address.is_empty())
        .unwrap_or(&d.reason);
    format!("{}: {why}", d.destination)
}

/// The secret values a call of `tool` may see, to keep out of its message and its record.
fn secrets_of(tool: &Tool) -> Secrets {
    Secrets::new(tool.policy.grants.secrets())
}

fn panicked() -> ToolError {
    ToolError::new(
        ErrorKind::Internal,
        "the executor panicked while running this call; it is a bug in warden, not in your call",
    )
}

fn is_transient(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Timeout | ErrorKind::Unavailable)
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
    let content = cap_text(&output.content, tool.limits.output);
    let truncated = content.len() != output.content.len();
    let mut artifact = serde_json::Map::new();
    match output.structured {
        // The structured copy would carry everything the cap just cut.
        Some(_) if truncated => {
            artifact.insert("truncated".into(), true.into());
        }
        Some(s) => {
            artifact.insert("result".into(), s);
        }
        None => {}
    }
    if let Some(s) = output.stdout.filter(|s| !s.is_empty()) {
        artifact.insert("stdout".into(), s.into());
    }
    if let Some(s) = output.stderr.filter(|s| !s.is_empty()) {
        artifact.insert("stderr".into(), s.into());
    }
    artifact.extend(output.details);
    let artifact = (!artifact.is_empty()).then_some(Value::Object(artifact));
    ToolMessage::success(call, content, artifact)
}

fn redact_message(secrets: &Secrets, m: &mut ToolMessage) {
    if secrets.is_empty() {
        return;
    }
    m.content = secrets.redact(&m.content);
    if let Some(e) = &mut m.error {
        e.message = secrets.redact(&e.message);
        secrets.redact_value(&mut e.details);
    }
    if let Some(a) = &mut m.artifact {
        secrets.redact_value(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_destination_once() {
        let said = |destination: &str, reason: &str| {
            refusal(&Denial {
                destination: destination.into(),
                reason: reason.into(),
            })
        };
        assert_eq!(
            said(
                "http://127.0.0.1:8080",
                "127.0.0.1:8080 is not granted by the tool's policy"
            ),
            "http://127.0.0.1:8080: not granted by the tool's policy"
        );
        assert_eq!(
            said("connect a.test:443", "a.test:443 is not granted"),
            "connect a.test:443: not granted"
        );
        // A reason that does not begin with the address is kept whole.
        let other = "a.test resolves to 10.0.0.1, a private address";
        assert_eq!(
            said("http://a.test:80", other),
            format!("http://a.test:80: {other}")
        );
    }
}
