//! warden's agent loop: a model on any OpenAI-compatible Chat Completions endpoint asks for
//! tools; each turn's calls go through the dispatcher as one batch and their ToolMessages go
//! back, until the model answers or a limit stops the run. Every run keeps a JSONL transcript
//! and can be resumed from it.

#![forbid(unsafe_code)]

mod client;
mod error;
mod id;
mod limits;
mod replay;
mod retry;
mod review;
mod run;
mod session;
mod trace;
mod transcript;

pub use client::{AssistantTurn, Attempt, ChatClient, ChatConfig, ChatError};
pub use error::AgentError;
pub use limits::{Limits, StopReason, Totals};
pub use retry::{RetryPolicy, WaitTooLong};
pub use review::{Decisions, DecisionsError, ReviewSource};
pub use run::{Execution, Outcome, Previous, Run};
pub use transcript::{Event, EventSink, Line, Transcript, TranscriptError};
