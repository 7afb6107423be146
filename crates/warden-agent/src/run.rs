//! A run: created or resumed from its transcript, then driven by the loop.

use crate::client::{ChatClient, ChatConfig};
use crate::error::AgentError;
use crate::limits::{Limits, StopReason, Totals};
use crate::replay::Replay;
use crate::review::{Ledger, ReviewGate, ReviewSource};
use crate::transcript::{Event, EventSink, Transcript};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::Instrument as _;
use warden_core::Dispatcher;

/// How this process carries a run on: the model, the limits, the reviewer.
#[derive(Clone)]
pub struct Execution {
    pub chat: ChatConfig,
    pub limits: Limits,
    pub review: ReviewSource,
}

/// How a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub run_id: String,
    pub reason: StopReason,
    /// The model's final text, when it answered.
    pub answer: Option<String>,
    pub totals: Totals,
}

/// What a resumed run was started with, for settings the resuming command leaves out.
#[derive(Debug, Clone)]
pub struct Previous {
    pub model: String,
    pub base_url: String,
    pub limits: Limits,
}

enum Start {
    New {
        task: String,
        system: Option<String>,
    },
    Resumed(Box<Replay>),
}

/// One agent run, its transcript open and locked.
pub struct Run {
    id: String,
    transcript: Arc<Transcript>,
    start: Start,
}

impl Run {
    /// A new run with a fresh id, its transcript in `runs_dir`.
    pub fn create(runs_dir: &Path, task: &str, system: Option<String>) -> Result<Run, AgentError> {
        let id = crate::id::new_run_id();
        let transcript = Transcript::create(&runs_dir.join(format!("{id}.jsonl")))?;
        Ok(Run {
            id,
            transcript: Arc::new(transcript),
            start: Start::New {
                task: task.to_owned(),
                system,
            },
        })
    }

    /// A run to carry on from its transcript. A run the model finished is refused.
    pub fn resume(path: &Path) -> Result<Run, AgentError> {
        let (transcript, lines) = Transcript::open(path)?;
        let replay = Replay::read(&lines).ok_or_else(|| AgentError::NotARun(path.to_owned()))?;
        if replay.stopped.as_ref().is_some_and(StopReason::is_final) {
            return Err(AgentError::Finished(replay.run_id));
        }
        Ok(Run {
            id: replay.run_id.clone(),
            transcript: Arc::new(transcript),
            start: Start::Resumed(Box::new(replay)),
        })
    }

    /// The run's id: its transcript's file name.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The transcript's path.
    pub fn path(&self) -> &Path {
        self.transcript.path()
    }

    /// What the run was asked to do.
    pub fn task(&self) -> &str {
        match &self.start {
            Start::New { task, .. } => task,
            Start::Resumed(r) => &r.task,
        }
    }

    /// The settings of the process that last carried the run, when it is resumed.
    pub fn previous(&self) -> Option<Previous> {
        match &self.start {
            Start::New { .. } => None,
            Start::Resumed(r) => Some(Previous {
                model: r.model.clone(),
                base_url: r.base_url.clone(),
                limits: r.limits.clone(),
            }),
        }
    }

    /// Sends every event of the run to `sink` as it is written.
    pub fn on_event(&self, sink: EventSink) {
        self.transcript.set_sink(Some(sink));
    }

    /// Runs the loop until the model answers or a limit stops it. Every tool call goes
    /// through `dispatcher`, in a run of its own: the run sets its reviewer, its observer and
    /// its limits on tool calls (those of `exec`), and counts the calls an earlier process of
    /// the run made.
    pub async fn execute(
        self,
        exec: Execution,
        dispatcher: Dispatcher,
    ) -> Result<Outcome, AgentError> {
        let transcript = self.transcript.clone();
        let result = self.carry_on(exec, dispatcher).await;
        transcript.close();
        result
    }

    async fn carry_on(
        self,
        exec: Execution,
        dispatcher: Dispatcher,
    ) -> Result<Outcome, AgentError> {
        let ledger = Ledger::new(self.transcript.clone());
        let tools = crate::client::function_schemas(dispatcher.toolbox().tools().map(|t| &t.spec));
        let client = ChatClient::new(exec.chat.clone())?;
        let (done, open) = match self.start {
            Start::New { task, system } => {
                self.transcript.write(Event::Run {
                    run_id: self.id.clone(),
                    task: task.clone(),
                    system: system.clone(),
                    model: exec.chat.model.clone(),
                    base_url: exec.chat.base_url.clone(),
                    tools: dispatcher
                        .toolbox()
                        .names()
                        .iter()
                        .map(std::string::ToString::to_string)
                        .collect(),
                    limits: exec.limits.clone(),
                    warden: env!("CARGO_PKG_VERSION").into(),
                })?;
                let mut messages = Vec::new();
                if let Some(s) = system {
                    messages.push(json!({"role": "system", "content": s}));
                }
                messages.push(json!({"role": "user", "content": task}));
                for m in &messages {
                    self.transcript
                        .write(Event::Message { message: m.clone() })?;
                }
                let fresh = Progress {
                    messages,
                    ..Progress::default()
                };
                (fresh, None)
            }
            Start::Resumed(r) => {
                self.transcript.write(Event::Resume {
                    model: exec.chat.model.clone(),
                    base_url: exec.chat.base_url.clone(),
                    limits: exec.limits.clone(),
                })?;
                let r = *r;
                let progress = Progress {
                    messages: r.messages,
                    steps: r.steps,
                    model_calls: r.model_calls,
                    counted: r.counted,
                };
                (progress, r.open)
            }
        };
        let earlier = open
            .as_ref()
            .map(|o| o.decisions.clone())
            .unwrap_or_default();
        let gate = Arc::new(ReviewGate {
            source: exec.review.clone(),
            ledger: ledger.clone(),
            earlier: Mutex::new(earlier),
        });
        let dispatcher = dispatcher
            .new_run(exec.limits.tool_calls())
            .reviewer(gate)
            .observer(ledger.clone());
        dispatcher.seed_counts(done.counted.iter().map(String::as_str));
        let mut session = crate::session::Session {
            transcript: self.transcript.clone(),
            client,
            dispatcher,
            ledger,
            limits: exec.limits,
            tools,
            started: Instant::now(),
            messages: done.messages,
            steps: done.steps,
            model_calls: done.model_calls,
        };
        let span = crate::trace::run_span(&session.client.config().model);
        let (reason, answer) = session.drive(open).instrument(span.clone()).await?;
        crate::trace::stopped(&span, &reason);
        let totals = session.totals();
        self.transcript.write(Event::Stop {
            reason: reason.clone(),
            answer: answer.clone(),
            totals: totals.clone(),
        })?;
        Ok(Outcome {
            run_id: self.id,
            reason,
            answer,
            totals,
        })
    }
}

/// What a run has done so far.
#[derive(Default)]
struct Progress {
    messages: Vec<Value>,
    steps: u32,
    model_calls: u32,
    /// The tool of each call counted against the run's limits.
    counted: Vec<String>,
}
