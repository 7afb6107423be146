//! The one path every call takes: resolve, parse, review, admit, run under a deadline (with
//! retries where the tool is idempotent), redact, log, answer.

use crate::admission::{Admission, Gate};
use crate::calllog::CallLog;
use crate::executor::{Denial, Denials, Invocation, Output};
use crate::limits::cap_text;
use crate::message::{ErrorKind, Status, ToolCall, ToolError, ToolMessage};
use crate::redact::Secrets;
use crate::review::{Decision, Reviewer};
use crate::session::Scope;
use crate::toolbox::{Tool, Toolbox};
use futures::FutureExt;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;

/// Attempts of an idempotent call that keeps failing transiently.
const MAX_ATTEMPTS: u32 = 3;
/// The first retry waits this long; each next one twice as long.
const BACKOFF: Duration = Duration::from_millis(100);

/// Hears of each call as it enters its sandbox and as it is answered, so that a transcript can
/// tell, after a crash, which calls were running and which had finished.
pub trait CallObserver: Send + Sync {
    /// The call passed its checks, review and admission and is about to run (once per attempt).
    fn started(&self, call: &ToolCall, arguments: &Value);
    /// The call's final message.
    fn answered(&self, message: &ToolMessage);
}

/// Runs batches of tool calls against a toolbox. Every call gets exactly one message.
///
/// A dispatcher is one run: its run limits count calls across all its batches. Clones share
/// the run and its session; [`Dispatcher::new_session`] starts another session in the same
/// run. A session ends at [`Dispatcher::close`], or when its last clone is dropped.
#[derive(Clone)]
pub struct Dispatcher {
    toolbox: Arc<Toolbox>,
    gate: Arc<Gate>,
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
            session: Arc::new(Scope::new(toolbox.clone())),
            toolbox,
            gate: Arc::new(Gate::new(admission)),
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
        Dispatcher {
            session: Arc::new(Scope::new(self.toolbox.clone())),
            ..self.clone()
        }
    }

    /// The session this dispatcher's calls run in.
    pub fn session(&self) -> crate::SessionId {
        self.session.id
    }

    /// Ends the session now: executors free what they keep for it (a container, a shell) and
    /// this returns when they have. Later calls start the session afresh.
    pub async fn close(&self) {
        self.session.close().await;
    }

    /// Runs one call, in the caller's task: handing a lone call to another worker thread and
    /// back costs more than the sandbox itself. A panic is still caught and answered.
    pub async fn call(&self, call: ToolCall) -> ToolMessage {
        if self.toolbox.get(&call.name).is_some()
            && let Err(e) = self.gate.count(&call.name)
        {
            let message = ToolMessage::failure(&call, e);
            self.record(&call, None, &message, &Facts::default());
            return message;
        }
        match AssertUnwindSafe(self.run(&call)).catch_unwind().await {
            Ok(message) => message,
            Err(_) => {
                tracing::error!(call = %call.id, "the executor panicked");
                ToolMessage::failure(&call, panicked())
            }
        }
    }

    /// Runs a batch concurrently and answers in the order of `calls`, whatever happens to each.
    /// Dropping the future cancels every call still running and frees its sandbox.
    pub async fn dispatch(&self, calls: Vec<ToolCall>) -> Vec<ToolMessage> {
        let mut answers: Vec<Option<ToolMessage>> = vec![None; calls.len()];
        let mut seen = HashSet::new();
        let mut set = JoinSet::new();
        let mut index_of = HashMap::new();
        for (i, call) in calls.iter().enumerate() {
            let early = if !seen.insert(call.id.as_str()) {
                Some(ToolError::new(
                    ErrorKind::InvalidArguments,
                    format!(
                        "tool_call_id `{}` is used by an earlier call of this batch; each call \
                         needs its own id, so this one was not run",
                        call.id
                    ),
                ))
            } else if self.toolbox.get(&call.name).is_some() {
                self.gate.count(&call.name).err()
            } else {
                None
            };
            if let Some(err) = early {
                let message = ToolMessage::failure(call, err);
                self.record(call, None, &message, &Facts::default());
                answers[i] = Some(message);
                continue;
            }
            let this = self.clone();
            let call = call.clone();
            let handle = set.spawn(async move { this.run(&call).await });
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
                        continue;
                    }
                    tracing::error!(call = %calls[i].id, "the executor panicked: {e}");
                    let message = ToolMessage::failure(&calls[i], panicked());
                    if let Some(o) = &self.observer {
                        o.answered(&message);
                    }
                    (i, message)
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
        answers
            .into_iter()
            .zip(&calls)
            .map(|(answer, call)| {
                answer.unwrap_or_else(|| match failed {
                    Some(f) if self.fail_fast => ToolMessage::failure(
                        call,
                        ToolError::new(
                            ErrorKind::Unavailable,
                            format!(
                                "not run: call `{}` of this batch failed first, and fail_fast is on",
                                calls[f].id
                            ),
                        ),
                    ),
                    _ => internal_message(call),
                })
            })
            .collect()
    }

    async fn run(&self, call: &ToolCall) -> ToolMessage {
        let Some(tool) = self.toolbox.get(&call.name) else {
            let message = ToolMessage::failure(call, self.unknown_tool(&call.name));
            self.record(call, None, &message, &Facts::default());
            return message;
        };
        let secrets = Secrets::new(tool.policy.grants.secrets());
        let start = Instant::now();
        let denials = Denials::default();
        let (mut message, fuel, attempts) = self.answer(tool, call, &denials).await;
        let (denied, denied_count) = denials.snapshot();
        attach_denials(&mut message, &denied, denied_count);
        redact_message(&secrets, &mut message);
        let facts = Facts {
            took: start.elapsed(),
            fuel,
            attempts,
            denied,
            denied_count,
        };
        self.record(call, Some((tool, &secrets)), &message, &facts);
        message
    }

    /// The message for a known tool, with the fuel burnt and the attempts made.
    async fn answer(
        &self,
        tool: &Tool,
        call: &ToolCall,
        denials: &Denials,
    ) -> (ToolMessage, Option<u64>, u32) {
        let mut arguments = match parse_arguments(&call.arguments) {
            Ok(v) => v,
            Err(e) => return (ToolMessage::failure(call, e), None, 0),
        };
        if tool.review_required {
            match self.review(tool, call).await {
                Decision::Approve => {}
                Decision::Edit { arguments: edited } => arguments = edited,
                Decision::Reject { reason } => {
                    let err = ToolError::new(
                        ErrorKind::Rejected,
                        format!("a reviewer rejected this call: {reason}"),
                    );
                    return (ToolMessage::failure(call, err), None, 0);
                }
                Decision::Respond { content } => {
                    return (ToolMessage::success(call, content, None), None, 0);
                }
            }
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self
                .execute(tool, call, arguments.clone(), denials.clone())
                .await;
            match result {
                Ok(output) => {
                    let fuel = output.fuel_used;
                    return (success(call, tool, output), fuel, attempt);
                }
                Err(e) if tool.idempotent && attempt < MAX_ATTEMPTS && is_transient(e.kind) => {
                    tracing::info!(call = %call.id, attempt, "retrying after {}", e.kind);
                    tokio::time::sleep(BACKOFF * 2u32.pow(attempt - 1)).await;
                }
                Err(e) => return (ToolMessage::failure(call, e), None, attempt),
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
    ) -> Result<Output, ToolError> {
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
        ToolError::new(
            ErrorKind::UnknownTool,
            format!(
                "there is no tool named `{name}`.{hint} The tools are: {}",
                names.join(", ")
            ),
        )
        .with_detail("valid_names", names)
    }

    fn record(
        &self,
        call: &ToolCall,
        tool: Option<(&Tool, &Secrets)>,
        m: &ToolMessage,
        facts: &Facts,
    ) {
        self.write_log(call, tool, m, facts);
        // After the log: an observer may end the run as soon as it hears.
        if let Some(o) = &self.observer {
            o.answered(m);
        }
    }

    fn write_log(
        &self,
        call: &ToolCall,
        tool: Option<(&Tool, &Secrets)>,
        m: &ToolMessage,
        facts: &Facts,
    ) {
        let Some(log) = &self.log else {
            return;
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for d in &facts.denied {
            log.record(&json!({
                "ts_ms": ts,
                "event": "denied",
                "tool": call.name,
                "call_id": call.id,
                "destination": d.destination,
                "reason": d.reason,
            }));
        }
        let mut entry = json!({
            "ts_ms": ts,
            "event": "call",
            "tool": call.name,
            "call_id": call.id,
            "outcome": m.error.as_ref().map_or("success", |e| e.kind.as_str()),
            "duration_ms": facts.took.as_secs_f64() * 1000.0,
            "attempts": facts.attempts,
            "fuel": facts.fuel,
        });
        if facts.denied_count > 0 {
            entry["denied"] = facts.denied_count.into();
        }
        if let Some((tool, secrets)) = tool {
            entry["executor"] = tool.policy.kind.value.clone().into();
            entry["policy"] = tool.policy.path.display().to_string().into();
            entry["grants"] = tool.policy.grants.describe();
            entry["limits"] = tool.limits.describe();
            if let Some(e) = &m.error {
                entry["message"] = e.message.clone().into();
            }
            secrets.redact_value(&mut entry);
        }
        log.record(&entry);
    }
}

/// What the log says of one call besides its message.
#[derive(Default)]
struct Facts {
    took: Duration,
    fuel: Option<u64>,
    attempts: u32,
    denied: Vec<Denial>,
    denied_count: u64,
}

/// Refusals are news to the model too: it should stop asking for what the policy forbids.
fn attach_denials(m: &mut ToolMessage, denied: &[Denial], count: u64) {
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
                let note = format!(
                    " [warden refused {}: {}{more}]",
                    first.destination, first.reason
                );
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

fn internal_message(call: &ToolCall) -> ToolMessage {
    ToolMessage::failure(
        call,
        ToolError::new(ErrorKind::Internal, "no answer was produced"),
    )
}
