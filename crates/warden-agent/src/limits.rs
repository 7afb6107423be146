//! What ends a run: the model's answer, or a limit. The dispatcher counts the tool calls.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use warden_core::{RunLimitHit, RunLimits, RunUsage};

/// The limits of one run. A resumed run counts what it did before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Model turns.
    pub max_steps: u32,
    /// Requests to the model, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_calls: Option<u32>,
    /// Tool calls in the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    /// Calls of any one tool in the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls_per_tool: Option<u32>,
    /// Wall-clock time of one process's part of the run.
    #[serde(
        default,
        rename = "budget_ms",
        with = "millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub budget: Option<Duration>,
}

impl Limits {
    /// Model turns when nothing says otherwise.
    pub const DEFAULT_MAX_STEPS: u32 = 50;

    /// The limits on tool calls, which the dispatcher holds the run to.
    pub(crate) fn tool_calls(&self) -> RunLimits {
        RunLimits {
            max_calls: self.max_tool_calls,
            max_calls_per_tool: self.max_calls_per_tool,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: Self::DEFAULT_MAX_STEPS,
            max_model_calls: None,
            max_tool_calls: None,
            max_calls_per_tool: None,
            budget: None,
        }
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without asking for tools.
    Answered,
    MaxSteps {
        limit: u32,
    },
    MaxModelCalls {
        limit: u32,
    },
    MaxToolCalls {
        limit: u32,
    },
    MaxCallsPerTool {
        tool: String,
        limit: u32,
    },
    /// The wall-clock budget ran out.
    Budget {
        limit_ms: u64,
    },
    /// Calls wait for decisions that the decisions file does not hold yet.
    AwaitingReview {
        calls: Vec<String>,
    },
    /// The provider refused a request: a bad key, a context too long.
    ProviderError {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        message: String,
    },
    /// The provider kept failing transiently until the retries ran out.
    ModelUnavailable {
        message: String,
    },
}

impl StopReason {
    /// True when the run is over for good: the model gave its answer.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Answered)
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Answered => write!(f, "the model answered"),
            Self::MaxSteps { limit } => write!(f, "the step limit ({limit}) was reached"),
            Self::MaxModelCalls { limit } => {
                write!(f, "the model-call limit ({limit}) was reached")
            }
            Self::MaxToolCalls { limit } => {
                write!(f, "the tool-call limit of the run ({limit}) was reached")
            }
            Self::MaxCallsPerTool { tool, limit } => {
                write!(f, "the limit of {limit} calls of `{tool}` was reached")
            }
            Self::Budget { limit_ms } => write!(
                f,
                "the time budget ({:.1} s) ran out",
                *limit_ms as f64 / 1000.0
            ),
            Self::AwaitingReview { calls } => write!(
                f,
                "paused: {} call(s) await a decision ({})",
                calls.len(),
                calls.join(", ")
            ),
            Self::ProviderError { message, .. } => write!(f, "{message}"),
            Self::ModelUnavailable { message } => write!(f, "{message}"),
        }
    }
}

/// What a run has used so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub steps: u32,
    pub model_calls: u32,
    pub tool_calls: u32,
    /// Wall-clock time of this process's part of the run.
    pub elapsed_ms: u64,
    /// What this process's tool calls used.
    #[serde(default)]
    pub usage: RunUsage,
}

impl From<RunLimitHit> for StopReason {
    fn from(hit: RunLimitHit) -> Self {
        match hit {
            RunLimitHit::MaxCalls { limit } => Self::MaxToolCalls { limit },
            RunLimitHit::MaxCallsPerTool { tool, limit } => Self::MaxCallsPerTool { tool, limit },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_trip() {
        let l = Limits {
            budget: Some(Duration::from_millis(1500)),
            ..Limits::default()
        };
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["budget_ms"], 1500);
        assert_eq!(serde_json::from_value::<Limits>(v).unwrap(), l);
    }
}
