//! The loop: ask the model, run its calls as one batch, send the answers back, until it
//! answers or a limit stops it.

use crate::client::{Attempt, ChatClient, ChatError};
use crate::error::AgentError;
use crate::limits::{Limits, StopReason, Totals};
use crate::replay::OpenTurn;
use crate::review::{Ledger, full_message};
use crate::trace;
use crate::transcript::{Event, Transcript};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument as _;
use warden_core::millis;
use warden_core::{Dispatcher, ErrorKind, RunLimitHit, ToolCall, ToolError, ToolMessage};

/// The state of one process's part of a run.
pub(crate) struct Session {
    pub transcript: Arc<Transcript>,
    pub client: ChatClient,
    pub dispatcher: Dispatcher,
    pub ledger: Arc<Ledger>,
    pub limits: Limits,
    pub tools: Vec<Value>,
    pub started: Instant,
    pub messages: Vec<Value>,
    pub steps: u32,
    pub model_calls: u32,
}

type Stop = (StopReason, Option<String>);

impl Session {
    pub(crate) fn totals(&self) -> Totals {
        Totals {
            steps: self.steps,
            model_calls: self.model_calls,
            tool_calls: self.dispatcher.calls_counted(),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
            usage: self.dispatcher.usage_so_far(),
        }
    }

    /// Runs until a stop; `open` is a turn a previous process left unanswered.
    pub(crate) async fn drive(&mut self, open: Option<OpenTurn>) -> Result<Stop, AgentError> {
        if let Some(open) = open
            && let Some(stop) = self.finish_open_turn(open).await?
        {
            return Ok((stop, None));
        }
        loop {
            if self.steps >= self.limits.max_steps {
                let limit = self.limits.max_steps;
                return Ok((StopReason::MaxSteps { limit }, None));
            }
            let calls_left = match self.limits.max_model_calls {
                Some(limit) if self.model_calls >= limit => {
                    return Ok((StopReason::MaxModelCalls { limit }, None));
                }
                Some(limit) => limit - self.model_calls,
                None => u32::MAX,
            };
            let Some(time_left) = self.time_left() else {
                return Ok((self.out_of_time(), None));
            };
            let step = trace::step_span(self.steps + 1);
            let asked = self.ask_model(calls_left, time_left);
            let turn = match asked.instrument(step.clone()).await? {
                Ok(turn) => turn,
                Err(stop) => return Ok((stop, None)),
            };
            if turn.tool_calls.is_empty() {
                return Ok((StopReason::Answered, Some(turn.content.unwrap_or_default())));
            }
            if let Some(stop) = self.run_turn(turn.tool_calls).instrument(step).await? {
                return Ok((stop, None));
            }
        }
    }

    /// `None` when the budget is spent.
    fn time_left(&self) -> Option<Duration> {
        match self.limits.budget {
            None => Some(Duration::MAX),
            Some(b) => b
                .checked_sub(self.started.elapsed())
                .filter(|d| !d.is_zero()),
        }
    }

    fn out_of_time(&self) -> StopReason {
        let limit_ms = self.limits.budget.map_or(0, |b| b.as_millis() as u64);
        StopReason::Budget { limit_ms }
    }

    /// One model call (with its retries); the assistant's turn is in the transcript when this
    /// returns it.
    async fn ask_model(
        &mut self,
        calls_left: u32,
        time_left: Duration,
    ) -> Result<Result<crate::client::AssistantTurn, StopReason>, AgentError> {
        // A step is a turn the model gave; a failed request is not one.
        let step = self.steps + 1;
        let made = Mutex::new(0u32);
        let succeeded: Mutex<Option<Attempt>> = Mutex::new(None);
        let transcript = self.transcript.clone();
        let on_attempt = |a: &Attempt| {
            *made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
            if a.error.is_none() {
                // Written with the reply's usage below.
                *succeeded
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(a.clone());
                return;
            }
            transcript.record(Event::ModelCall {
                step,
                attempt: a.number,
                status: a.status,
                ms: millis(a.took),
                error: a.error.clone(),
                retry_in_ms: a.retry_in.map(|d| d.as_millis() as u64),
                usage: None,
            });
        };
        let attempts = calls_left.min(self.client.config().retry.max_retries.saturating_add(1));
        let asked = self
            .client
            .complete(&self.messages, &self.tools, attempts, &on_attempt);
        let result = tokio::time::timeout(time_left, asked).await;
        self.model_calls += *made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut turn = match result {
            Err(_) => return Ok(Err(self.out_of_time())),
            Ok(Ok(turn)) => turn,
            Ok(Err(e)) => return Ok(Err(self.model_failure(e))),
        };
        if let Some(a) = succeeded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            self.transcript.write(Event::ModelCall {
                step,
                attempt: a.number,
                status: a.status,
                ms: millis(a.took),
                error: None,
                retry_in_ms: None,
                usage: turn.usage.clone(),
            })?;
        }
        self.steps = step;
        // Answers must name their call; a model that sent no id gets one made up.
        for (i, call) in turn.tool_calls.iter_mut().enumerate() {
            if call.id.is_empty() {
                call.id = format!("call_{step}_{}", i + 1);
            }
        }
        let message = turn.to_message();
        self.transcript.write(Event::Message {
            message: message.clone(),
        })?;
        self.messages.push(message);
        Ok(Ok(turn))
    }

    fn model_failure(&self, e: ChatError) -> StopReason {
        match e {
            ChatError::Provider { status, .. } => StopReason::ProviderError {
                status: Some(status),
                message: e.to_string(),
            },
            ChatError::BadReply(_) | ChatError::Setup(_) => StopReason::ProviderError {
                status: None,
                message: e.to_string(),
            },
            ChatError::Exhausted { .. } => match self.limits.max_model_calls {
                Some(limit) if self.model_calls >= limit => StopReason::MaxModelCalls { limit },
                _ => StopReason::ModelUnavailable {
                    message: e.to_string(),
                },
            },
        }
    }

    /// A new turn's calls, as one batch through the dispatcher.
    async fn run_turn(&mut self, calls: Vec<ToolCall>) -> Result<Option<StopReason>, AgentError> {
        let answers = vec![None; calls.len()];
        self.finish_turn(&calls, answers, &HashSet::new()).await
    }

    /// The calls of a turn an earlier process left: answered ones keep their answer, running
    /// ones are answered as interrupted (never run again), the others run now.
    async fn finish_open_turn(&mut self, open: OpenTurn) -> Result<Option<StopReason>, AgentError> {
        let mut answers: Vec<Option<ToolMessage>> = vec![None; open.calls.len()];
        let mut seen = HashSet::new();
        for (i, call) in open.calls.iter().enumerate() {
            if !seen.insert(call.id.as_str()) {
                // The dispatcher refused it when the turn first ran; it gets the same answer.
                answers[i] = Some(ToolMessage::failure(call, ToolError::reused_id(&call.id)));
            } else if open.in_conversation.contains(&call.id) {
                // Sent already; only held so that the call is not run again.
                answers[i] = Some(ToolMessage::success(call, String::new(), None));
            } else if let Some(m) = open.answered.get(&call.id) {
                answers[i] = Some(from_transcript(call, m));
            } else if open.started.contains(&call.id) {
                let m = ToolMessage::failure(call, interrupted());
                self.transcript.write(Event::Answered {
                    message: full_message(&m),
                })?;
                answers[i] = Some(m);
            }
        }
        self.finish_turn(&open.calls, answers, &open.in_conversation)
            .await
    }

    /// Runs the calls without an answer as one batch, then sends every answer back in the
    /// model's order, but those in `skip` (the conversation holds them already). Pauses instead
    /// when a call awaits a decision; stops when the budget ran out or a run limit refused a
    /// call of the batch.
    async fn finish_turn(
        &mut self,
        calls: &[ToolCall],
        mut answers: Vec<Option<ToolMessage>>,
        skip: &HashSet<String>,
    ) -> Result<Option<StopReason>, AgentError> {
        let todo: Vec<usize> = (0..calls.len()).filter(|&i| answers[i].is_none()).collect();
        let mut stop = None;
        if !todo.is_empty() {
            let ids: Vec<String> = todo.iter().map(|&i| calls[i].id.clone()).collect();
            let batch = todo.iter().map(|&i| calls[i].clone()).collect();
            let began = Instant::now();
            let (messages, out_of_time) = self.await_batch(batch, &ids).await;
            match messages {
                Some(messages) => {
                    for (&i, m) in todo.iter().zip(messages) {
                        answers[i] = Some(m);
                    }
                }
                // Dropping the batch stopped its calls; those that finished keep their answer.
                None => {
                    let mut got = self.ledger.take_answered();
                    for &i in &todo {
                        answers[i] = got.remove(&calls[i].id);
                    }
                }
            }
            // The first refusal in the model's order says which limit stops the run.
            stop = todo
                .iter()
                .filter_map(|&i| answers[i].as_ref()?.error.as_ref())
                .find_map(RunLimitHit::of)
                .map(StopReason::from);
            if out_of_time {
                // Held calls never ran; the budget, not a person, ends them now.
                self.ledger.take_pending();
                let took = began.elapsed();
                for (call, answer) in calls.iter().zip(answers.iter_mut()) {
                    if answer.is_none() {
                        let m = self.dispatcher.answer_cancelled(call, budget_spent(), took);
                        *answer = Some(m);
                    }
                }
                stop = Some(self.out_of_time());
            }
        }
        self.ledger.take_answered();
        let mut pending = self.ledger.take_pending();
        if !pending.is_empty() {
            let order: HashMap<&str, usize> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| (c.id.as_str(), i))
                .collect();
            pending.sort_by_key(|id| order.get(id.as_str()).copied());
            return Ok(Some(StopReason::AwaitingReview { calls: pending }));
        }
        for (call, answer) in calls.iter().zip(answers) {
            if skip.contains(&call.id) {
                continue;
            }
            let m = answer.unwrap_or_else(|| {
                ToolMessage::failure(call, ToolError::new(ErrorKind::Internal, "no answer"))
            });
            let message = for_model(&m);
            self.transcript.write(Event::Message {
                message: message.clone(),
            })?;
            self.messages.push(message);
        }
        Ok(stop)
    }
}

impl Session {
    /// Runs a batch until it is answered, the budget runs out, or only calls held for a
    /// decision are left. The messages come back only when the batch ran to its end; the bool
    /// says the budget ran out.
    async fn await_batch(
        &self,
        batch: Vec<ToolCall>,
        ids: &[String],
    ) -> (Option<Vec<ToolMessage>>, bool) {
        let Some(time_left) = self.time_left() else {
            return (None, true);
        };
        let dispatch = self.dispatcher.dispatch(batch);
        let deadline = tokio::time::sleep(time_left);
        tokio::pin!(dispatch, deadline);
        loop {
            tokio::select! {
                messages = &mut dispatch => return (Some(messages), false),
                () = &mut deadline => return (None, true),
                () = self.ledger.changed.notified() => {
                    if self.ledger.only_held_left(ids) {
                        return (None, false);
                    }
                }
            }
        }
    }
}

/// The tool message as the model is sent it: what Chat Completions defines, nothing more.
fn for_model(m: &ToolMessage) -> Value {
    json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
}

/// A message the transcript kept, back as a ToolMessage.
fn from_transcript(call: &ToolCall, v: &Value) -> ToolMessage {
    let content = v["content"].as_str().unwrap_or_default().to_owned();
    match serde_json::from_value::<ToolError>(v["error"].clone()) {
        Ok(e) => {
            let mut m = ToolMessage::failure(call, e);
            m.content = content;
            m
        }
        Err(_) => ToolMessage::success(call, content, v.get("artifact").cloned()),
    }
}

fn interrupted() -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        "warden stopped while this call was running (its process ended), so its result is \
         unknown and it may or may not have taken effect. It was not run again: check its effect, \
         or call it again if that is safe",
    )
    .with_detail("interrupted", true)
}

fn budget_spent() -> ToolError {
    ToolError::new(
        ErrorKind::LimitExceeded,
        "the run's time budget ran out before this call finished; it was stopped",
    )
    .with_detail("budget", true)
}
