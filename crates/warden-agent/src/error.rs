//! Why a run could not be started or carried on: the words the run and its loop share.

use crate::client::ChatError;
use crate::transcript::TranscriptError;
use std::path::PathBuf;

/// Why a run could not be started or carried on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
    #[error("{0} is not a warden agent transcript (its first line is not a `run` event)")]
    NotARun(PathBuf),
    #[error("run {0} is finished: the model gave its answer; start a new run instead")]
    Finished(String),
    #[error(transparent)]
    Chat(#[from] ChatError),
}
