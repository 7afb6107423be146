//! A run's limits: how many calls one run (an agent's run, a `warden run` batch, an MCP
//! server's life) may make, the counts held to them, and what a call over them is answered.

use crate::message::{ErrorKind, ToolError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;

/// Limits over a whole run (an agent's session, a `warden run` batch), across batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// Tool calls in the whole run.
    pub max_calls: Option<u32>,
    /// Tool calls of any one tool in the whole run.
    pub max_calls_per_tool: Option<u32>,
}

/// The run limit that refused a call. A refused call's error is a `limit_exceeded` whose
/// details are this value: `{"run_limit": "max_calls", "limit": 3}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "run_limit", rename_all = "snake_case")]
pub enum RunLimitHit {
    /// The run had made `limit` calls.
    MaxCalls { limit: u32 },
    /// The run had called `tool` `limit` times.
    MaxCallsPerTool { tool: String, limit: u32 },
}

impl RunLimitHit {
    /// The run limit behind `error`, when a run limit is what refused its call.
    pub fn of(error: &ToolError) -> Option<RunLimitHit> {
        if error.kind != ErrorKind::LimitExceeded {
            return None;
        }
        RunLimitHit::deserialize(&error.details).ok()
    }

    /// What the refused call is answered: words for the model, the limit in the details.
    fn error(&self) -> ToolError {
        let message = match self {
            Self::MaxCalls { limit } => format!(
                "this run may make at most {limit} tool calls, and has made them; finish with \
                 what you have"
            ),
            Self::MaxCallsPerTool { tool, limit } => format!(
                "this run may call `{tool}` at most {limit} times, and has; use what you have or \
                 another tool"
            ),
        };
        ToolError {
            kind: ErrorKind::LimitExceeded,
            message,
            details: serde_json::to_value(self).unwrap_or_default(),
        }
    }
}

/// What a run's answered calls used together: the figures of `warden run`'s and `warden
/// agent`'s summary line and of the agent's `stop` event.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunUsage {
    /// Calls answered, and of those, errors.
    pub calls: u64,
    pub errors: u64,
    /// CPU time their executors measured, summed.
    pub cpu_ms: u64,
    /// The largest peak memory of one call.
    pub peak_memory_bytes: u64,
    /// Bytes through sandboxes' gates, each way.
    pub net_bytes_out: u64,
    pub net_bytes_in: u64,
}

impl std::fmt::Display for RunUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} calls, {} errors, CPU {:.2} s, peak memory {}, gate {} out / {} in",
            self.calls,
            self.errors,
            self.cpu_ms as f64 / 1000.0,
            crate::ByteSize(self.peak_memory_bytes),
            crate::ByteSize(self.net_bytes_out),
            crate::ByteSize(self.net_bytes_in),
        )
    }
}

/// The calls a run has made, held to its limits, and what its answers used. Every clone of
/// a dispatcher shares one.
#[derive(Default)]
pub(crate) struct RunCounter {
    limits: RunLimits,
    counts: Mutex<Counts>,
    spent: Mutex<Spent>,
}

/// [`RunUsage`] as it accumulates: CPU in fractions of a millisecond.
#[derive(Default)]
struct Spent {
    usage: RunUsage,
    cpu_ms: f64,
}

#[derive(Default)]
struct Counts {
    total: u32,
    per_tool: HashMap<String, u32>,
}

impl RunCounter {
    pub(crate) fn new(limits: RunLimits) -> Self {
        Self {
            limits,
            counts: Mutex::default(),
            spent: Mutex::default(),
        }
    }

    /// Adds one answered call.
    pub(crate) fn spend(&self, failed: bool, used: &crate::Usage) {
        let mut s = self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.cpu_ms += used.cpu_ms.unwrap_or(0.0);
        let cpu_ms = s.cpu_ms.round() as u64;
        let u = &mut s.usage;
        u.calls += 1;
        u.errors += u64::from(failed);
        u.cpu_ms = cpu_ms;
        u.peak_memory_bytes = u.peak_memory_bytes.max(used.peak_memory_bytes.unwrap_or(0));
        u.net_bytes_out += used.net_bytes_out.unwrap_or(0);
        u.net_bytes_in += used.net_bytes_in.unwrap_or(0);
    }

    /// What the answered calls used so far.
    pub(crate) fn spent(&self) -> RunUsage {
        self.spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .usage
            .clone()
    }

    /// Counts one call of `tool`; a call over a limit is not counted and must not run.
    pub(crate) fn count(&self, tool: &str) -> Result<(), ToolError> {
        let mut c = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(limit) = self.limits.max_calls
            && c.total >= limit
        {
            return Err(RunLimitHit::MaxCalls { limit }.error());
        }
        let used = c.per_tool.get(tool).copied().unwrap_or(0);
        if let Some(limit) = self.limits.max_calls_per_tool
            && used >= limit
        {
            let tool = tool.to_owned();
            return Err(RunLimitHit::MaxCallsPerTool { tool, limit }.error());
        }
        c.add(tool);
        Ok(())
    }

    /// Counts calls that ran before this counter existed (an earlier process of the run),
    /// whatever the limits say now: they ran.
    pub(crate) fn seed<'a>(&self, tools: impl IntoIterator<Item = &'a str>) {
        let mut c = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for tool in tools {
            c.add(tool);
        }
    }

    /// The calls counted so far.
    pub(crate) fn total(&self) -> u32 {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .total
    }
}

impl Counts {
    fn add(&mut self, tool: &str) {
        self.total = self.total.saturating_add(1);
        // A tool's name is owned once, at its first call.
        match self.per_tool.get_mut(tool) {
            Some(n) => *n = n.saturating_add(1),
            None => {
                self.per_tool.insert(tool.to_owned(), 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(r: Result<(), ToolError>) -> Option<RunLimitHit> {
        RunLimitHit::of(&r.unwrap_err())
    }

    #[test]
    fn counts_per_run_and_per_tool() {
        let c = RunCounter::new(RunLimits {
            max_calls: Some(3),
            max_calls_per_tool: Some(2),
        });
        assert!(c.count("a").is_ok());
        assert!(c.count("a").is_ok());
        assert_eq!(
            hit(c.count("a")),
            Some(RunLimitHit::MaxCallsPerTool {
                tool: "a".into(),
                limit: 2
            })
        );
        assert!(c.count("b").is_ok());
        assert_eq!(hit(c.count("c")), Some(RunLimitHit::MaxCalls { limit: 3 }));
        assert_eq!(c.total(), 3, "refused calls are not counted");
    }

    #[test]
    fn seeded_calls_count_toward_the_limits() {
        let c = RunCounter::new(RunLimits {
            max_calls: Some(3),
            max_calls_per_tool: Some(1),
        });
        c.seed(["a", "b"]);
        assert_eq!(c.total(), 2);
        assert!(c.count("a").is_err(), "`a` was called before");
        assert!(c.count("c").is_ok());
        assert!(c.count("d").is_err(), "three calls in all");
    }

    #[test]
    fn only_run_limit_refusals_are_read_as_such() {
        let e = RunLimitHit::MaxCalls { limit: 3 }.error();
        assert_eq!(
            e.details,
            serde_json::json!({"run_limit": "max_calls", "limit": 3})
        );
        let other = ToolError::new(ErrorKind::LimitExceeded, "the budget ran out")
            .with_detail("budget", true);
        assert_eq!(RunLimitHit::of(&other), None);
        let mut wrong_kind = e;
        wrong_kind.kind = ErrorKind::Timeout;
        assert_eq!(RunLimitHit::of(&wrong_kind), None);
    }
}
