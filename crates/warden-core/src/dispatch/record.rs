//! The early path, for a call answered without its executor's answer, and the record every
//! call leaves: the call log's, telemetry's, and the run's count of what it spent.

use super::message::{attach_usage, redact_message, set_detail};
use super::span::{Answer, CallSpan};
use super::{Dispatcher, Facts, secrets_of};
use crate::calllog::{
    CallOutcome, CallRecord, ChangesRecord, DecisionRecord, DenialRecord, ExecRecord, Logged,
    Record, now_ms,
};
use crate::executor::{Sample, Usage};
use crate::message::{Status, ToolCall, ToolError, ToolMessage};
use crate::redact::Secrets;
use crate::review::Asked;
use crate::toolbox::Tool;
use std::time::Duration;

impl Dispatcher {
    /// The early path, for a call answered without its executor's answer: refused by a check,
    /// panicked, cancelled. Logged and told to the observer like any other answer.
    pub(super) fn answer_early(
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
    pub(super) fn log_early(
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
        self.record_answer(span, call, tool, &secrets, &mut message, &facts)
            .wait();
        message
    }

    /// Called after the log is written: an observer may end the run as soon as it hears.
    pub(super) fn tell_answered(&self, message: &ToolMessage) {
        if let Some(o) = &self.observer {
            o.answered(message);
        }
    }

    /// Writes a reviewer's decision about call `id` to the call log, before it takes effect:
    /// `(decision, reviewer)`, the reason of a rejection, and what `more` adds (an edit's
    /// digest, a change set's).
    pub(super) fn record_decision<'a>(
        &self,
        tool: &'a Tool,
        id: &'a str,
        asked: &'a Asked<'a>,
        (decision, reviewer): (&'a str, &'a str),
        reason: Option<&'a str>,
        more: impl FnOnce(&mut DecisionRecord<'a>),
    ) {
        let Some(log) = &self.log else {
            return;
        };
        let mut record = DecisionRecord {
            ts_ms: now_ms(),
            tool: &asked.call.name,
            call_id: id,
            tool_call_id: &asked.call.id,
            decision,
            reviewer,
            digest: &asked.digest,
            edited_digest: None,
            policy_digest: asked.policy_digest,
            session: self.session.id.get(),
            reason,
            changes: None,
        };
        more(&mut record);
        let secrets = secrets_of(tool);
        log.describe_policy(&tool.facts, &secrets);
        log.write(Record::Decision(&record), &secrets).wait();
    }

    /// Every answered call passes here once: its answer gets warden's own id of the call
    /// (`call_id` in its details, beside the caller's `tool_call_id`), the run counts what it
    /// spent, telemetry hears of it, and the call log gets its records: the answer leaves
    /// once they are written ([`Logged`]).
    pub(super) fn record_answer(
        &self,
        span: &CallSpan,
        call: &ToolCall,
        tool: Option<&Tool>,
        secrets: &Secrets,
        m: &mut ToolMessage,
        facts: &Facts,
    ) -> Logged<'_> {
        let call_id = span.id().to_owned();
        set_detail(m, "call_id", call_id.as_str().into());
        let m = &*m;
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
            return Logged::NOTHING;
        };
        let ts_ms = now_ms();
        for d in &facts.denied.kept {
            let denial = DenialRecord {
                ts_ms,
                tool: call.name.clone(),
                call_id: call_id.clone(),
                tool_call_id: call.id.clone(),
                destination: d.destination.clone(),
                reason: d.reason.clone(),
            };
            // Not waited for: the call record that follows is, and lines keep their order.
            drop(log.write(Record::Denied(&denial), secrets));
        }
        if let Some(t) = tool {
            log.describe_policy(&t.facts, secrets);
        }
        let record = CallRecord {
            ts_ms,
            tool: &call.name,
            call_id: &call_id,
            tool_call_id: &call.id,
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
            changes: ChangesRecord::of(m),
            exec: facts
                .exec
                .as_ref()
                .map(|e| ExecRecord::new(&e.argv, e.exit_status, e.unlimited_time)),
        };
        log.write(Record::Call(&record), secrets)
    }
}

/// The log's count of a sample: absent when there were none.
fn counted<T>(sample: &Sample<T>) -> Option<u64> {
    (sample.total > 0).then_some(sample.total)
}
