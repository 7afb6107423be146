//! The normal path of a call of a known tool: review, admission, the executor under the
//! call's deadline (retried where the tool is idempotent and the failure transient), and the
//! message made whole, logged and told.

use super::message::{
    CREDENTIALS_USED, REACHED, ROOTS_OPENED, attach_denials, attach_exercised, attach_usage,
    redact_message, success,
};
use super::span::CallSpan;
use super::{Dispatcher, Facts, secrets_of};
use crate::changes::{self, HeldChanges};
use crate::executor::{Denials, Invocation, Meter, Output, Usage};
use crate::grants::{CallerEnv, NO_CALLER_ENV};
use crate::message::{ErrorKind, ToolCall, ToolError, ToolMessage};
use crate::output::OutputSink;
use crate::redact::RedactedSink;
use crate::review::{Asked, Decision, Verdict, call_digest};
use crate::toolbox::Tool;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A call with warden's own id of it (the caller's is `call.id`), and where its executor holds
/// its changes when a person reviews them.
#[derive(Clone, Copy)]
struct Numbered<'a> {
    call: &'a ToolCall,
    id: &'a str,
    held: Option<&'a HeldChanges>,
}

/// Why a call that needs a person's review is rejected where no one can review.
const NO_REVIEWER: &str = "this tool needs a person to review each call, and no reviewer is \
                           available here; ask the user to run it with a reviewer";

/// Attempts of an idempotent call that keeps failing transiently.
const MAX_ATTEMPTS: u32 = 3;
/// The first retry waits this long; each next one twice as long.
const BACKOFF: Duration = Duration::from_millis(100);

impl Dispatcher {
    /// The normal path: review, admission, the executor under its deadline, retries.
    pub(super) async fn run(
        &self,
        span: &CallSpan,
        call: &ToolCall,
        tool: &Tool,
        arguments: Value,
        output: Option<OutputSink>,
    ) -> ToolMessage {
        let secrets = secrets_of(tool);
        let held = tool.review_changes.then(HeldChanges::default);
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
            .answer(
                tool,
                Numbered {
                    call,
                    id: span.id(),
                    held: held.as_ref(),
                },
                arguments,
                &denials,
                &meter,
                output.as_ref(),
            )
            .await;
        if let Some(output) = &output {
            output.finish();
        }
        let denied = denials.snapshot();
        attach_denials(&mut message, &denied);
        let reached = meter.reached();
        attach_exercised(&mut message, &REACHED, &reached);
        let roots_opened = meter.roots_opened();
        attach_exercised(&mut message, &ROOTS_OPENED, &roots_opened);
        let credentials = meter.credentials_used();
        attach_exercised(&mut message, &CREDENTIALS_USED, &credentials);
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
        self.record_answer(span, call, Some(tool), &secrets, &mut message, &facts)
            .settled()
            .await;
        self.tell_answered(&message);
        message
    }

    /// The message for a known tool, with the fuel burnt, the attempts made and what the
    /// last attempt used; what every attempt reached goes to `meter`.
    async fn answer(
        &self,
        tool: &Tool,
        call: Numbered<'_>,
        mut arguments: Value,
        denials: &Denials,
        meter: &Meter,
        output: Option<&RedactedSink>,
    ) -> Answered {
        if tool.review_required {
            match self.review(tool, call.call, call.id).await {
                Decision::Approve => {}
                Decision::Edit { arguments: edited } => arguments = edited,
                Decision::Reject { reason } => {
                    let err = ToolError::new(
                        ErrorKind::Rejected,
                        format!("a reviewer rejected this call: {reason}"),
                    );
                    return Answered::before_running(ToolMessage::failure(call.call, err));
                }
                Decision::Respond { content } => {
                    let m = ToolMessage::success(call.call, content, None);
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
            let result = match call.held {
                Some(held) => self.settle_held(tool, call, held, result).await,
                None => result,
            };
            match result {
                Ok(output) => {
                    return Answered {
                        fuel: output.fuel_used,
                        message: success(call.call, tool, output),
                        attempts: attempt,
                        usage: meter.get(),
                    };
                }
                Err(e) if retry && is_transient(e.kind) => {
                    tracing::info!(call = %call.call.id, attempt, "retrying after {}", e.kind);
                    tokio::time::sleep(BACKOFF * 2u32.pow(attempt - 1)).await;
                }
                Err(e) => {
                    return Answered {
                        message: ToolMessage::failure(call.call, e),
                        fuel: None,
                        attempts: attempt,
                        usage: meter.get(),
                    };
                }
            }
        }
    }

    /// Asks the reviewer whether `call` (warden's `id` of it) may run, and writes the decision
    /// to the call log, bound to the call's digest, before it takes effect.
    pub(super) async fn review(&self, tool: &Tool, call: &ToolCall, id: &str) -> Decision {
        let asked = self.asked(tool, call);
        let (decision, reviewer) = match &self.reviewer {
            Some(r) => (r.review(&asked).await, r.name()),
            None => (
                Decision::Reject {
                    reason: NO_REVIEWER.into(),
                },
                "none",
            ),
        };
        let (name, reason, edited) = match &decision {
            Decision::Approve => ("approve", None, None),
            Decision::Edit { arguments } => {
                let edited = call_digest(&call.name, &arguments.to_string());
                ("edit", None, Some(edited))
            }
            Decision::Reject { reason } => ("reject", Some(reason.as_str()), None),
            Decision::Respond { .. } => ("respond", None, None),
        };
        self.record_decision(tool, id, &asked, (name, reviewer), reason, |r| {
            r.edited_digest = edited;
        });
        decision
    }

    /// `call` as a reviewer is asked about it.
    fn asked<'a>(&self, tool: &'a Tool, call: &'a ToolCall) -> Asked<'a> {
        Asked {
            call,
            spec: &tool.spec,
            digest: call_digest(&call.name, &call.arguments),
            policy_digest: &tool.facts.policy_digest,
        }
    }

    /// The answer of a call whose changes a person reviews, once its executor has held them
    /// in `held` (an executor holds nothing for a call without changes): kept when the
    /// reviewer approves, discarded otherwise, and the answer says which.
    async fn settle_held(
        &self,
        tool: &Tool,
        call: Numbered<'_>,
        held: &HeldChanges,
        answered: Result<Output, ToolError>,
    ) -> Result<Output, ToolError> {
        let Some(pending) = held.take() else {
            return answered;
        };
        if !changes::ended_on_its_own(&answered) {
            drop(pending);
            return answered.map_err(changes::discarded);
        }
        let secrets = secrets_of(tool);
        let mut shown = pending.shown().clone();
        shown.diff = secrets.redact(&shown.diff);
        secrets.redact_value(&mut shown.changes);
        let asked = self.asked(tool, call.call);
        let (verdict, reviewer) = match &self.reviewer {
            Some(r) => (r.review_changes(&asked, &shown).await, r.name()),
            None => (
                Verdict::Reject {
                    reason: NO_REVIEWER.into(),
                },
                "none",
            ),
        };
        let (name, reason) = match &verdict {
            Verdict::Approve => ("keep", None),
            Verdict::Reject { reason } => ("discard", Some(reason.as_str())),
        };
        let changes = shown.changes["digest"].as_str();
        self.record_decision(tool, call.id, &asked, (name, reviewer), reason, |r| {
            r.changes = changes;
        });
        let why = match verdict {
            Verdict::Approve => match pending.commit() {
                Ok(()) => return answered,
                Err(why) => why,
            },
            Verdict::Reject { reason } => ToolError::new(
                ErrorKind::Rejected,
                format!(
                    "a reviewer rejected the changes this call made: {reason}\n{}",
                    changes::DISCARDED
                ),
            ),
        };
        Err(changes::refused(why, answered))
    }

    /// One attempt: the client's variables checked, admission, then the executor under the
    /// call's deadline.
    async fn execute(
        &self,
        tool: &Tool,
        call: Numbered<'_>,
        arguments: Value,
        denials: Denials,
        usage: Meter,
        output: Option<OutputSink>,
    ) -> Result<Output, ToolError> {
        let (caller_env, image) = self.chosen(tool)?;
        let _permit = self.gate.admit(tool).await?;
        if let Some(o) = &self.observer {
            o.started(call.call, &arguments);
        }
        // The call's one deadline: the dispatcher stops waiting for it then, and an executor
        // that stops the call itself does so by it (see `Invocation::answer_by`).
        let deadline = Instant::now() + tool.limits.timeout;
        let invocation = Invocation {
            call_id: call.id.to_owned(),
            arguments,
            limits: tool.limits,
            deadline,
            denials,
            session: self.session.id,
            usage,
            output,
            caller_env,
            image,
            hold: call.held.cloned(),
        };
        self.session.touch();
        let executed = tool.executor.execute(invocation);
        match tokio::time::timeout_at(deadline.into(), executed).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::timed_out(tool.limits.timeout)),
        }
    }

    /// What the session's client chose for `tool` (its variables and image), checked against
    /// its policy as it is now (the toolbox may have been reloaded since the client chose).
    pub(super) fn chosen(&self, tool: &Tool) -> Result<(CallerEnv, Option<Arc<str>>), ToolError> {
        let choices = &self.session.choices;
        let name = &tool.spec.name;
        let caller_env = choices.env.get(name).unwrap_or(&NO_CALLER_ENV).clone();
        tool.policy.grants.check_caller_env(&caller_env)?;
        let image = choices.images.get(name).cloned();
        if let Some(image) = &image {
            tool.executor
                .check_image(image)
                .map_err(|why| ToolError::new(ErrorKind::Denied, why))?;
        }
        Ok((caller_env, image))
    }
}

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

/// A failure worth another attempt of an idempotent tool.
fn is_transient(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Timeout | ErrorKind::Unavailable)
}
