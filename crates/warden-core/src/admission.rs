//! Admission: how many calls run at once (globally and per tool), how much memory they may
//! claim together, and how many calls one run may make.

use crate::message::{ErrorKind, ToolError};
use crate::toolbox::Tool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Limits over a whole run (an agent's session, a `warden run` batch), across batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// Tool calls in the whole run.
    pub max_calls: Option<u32>,
    /// Tool calls of any one tool in the whole run.
    pub max_calls_per_tool: Option<u32>,
}

/// What a dispatcher admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Calls in flight across all tools.
    pub global_concurrency: usize,
    /// Bytes: the memory limits of the calls in flight never add up to more.
    pub memory_budget: u64,
    pub run: RunLimits,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            global_concurrency: 64,
            memory_budget: default_memory_budget(),
            run: RunLimits::default(),
        }
    }
}

/// Half of the machine's memory (4 GiB when it cannot be read).
pub fn default_memory_budget() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    total.map_or(4 << 30, |t| t / 2)
}

/// The shared state behind admission.
pub(crate) struct Gate {
    global: Arc<Semaphore>,
    /// One permit per MiB of budget.
    memory: Arc<Semaphore>,
    memory_mib: u32,
    run: RunLimits,
    counts: Mutex<RunCounts>,
}

#[derive(Default)]
struct RunCounts {
    total: u32,
    per_tool: HashMap<String, u32>,
}

/// Held while a call runs; dropping it frees its place.
pub(crate) struct Permit {
    _tool: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
    _memory: OwnedSemaphorePermit,
}

impl Gate {
    pub(crate) fn new(a: Admission) -> Self {
        let memory_mib = u32::try_from(a.memory_budget >> 20)
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        Self {
            global: Arc::new(Semaphore::new(a.global_concurrency.max(1))),
            memory: Arc::new(Semaphore::new(memory_mib as usize)),
            memory_mib,
            run: a.run,
            counts: Mutex::default(),
        }
    }

    /// Counts one call against the run's limits; over a limit, the call must not run.
    pub(crate) fn count(&self, tool: &str) -> Result<(), ToolError> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(max) = self.run.max_calls
            && c.total >= max
        {
            return Err(ToolError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "this run may make at most {max} tool calls, and has made them; finish with what you have"
                ),
            ));
        }
        let used = c.per_tool.get(tool).copied().unwrap_or(0);
        if let Some(max) = self.run.max_calls_per_tool
            && used >= max
        {
            return Err(ToolError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "this run may call `{tool}` at most {max} times, and has; use what you have or another tool"
                ),
            ));
        }
        c.total += 1;
        c.per_tool.insert(tool.to_owned(), used + 1);
        Ok(())
    }

    /// Waits for room: the tool's own slot first (so a saturated tool never holds global
    /// slots that other tools could use), then a global slot, then its memory.
    pub(crate) async fn admit(&self, tool: &Tool) -> Result<Permit, ToolError> {
        let mib = u32::try_from(tool.limits.memory.div_ceil(1 << 20))
            .unwrap_or(u32::MAX)
            .max(1);
        if mib > self.memory_mib {
            return Err(ToolError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "this tool's memory limit ({mib} MiB) is larger than warden's whole memory budget ({} MiB); the operator must lower it",
                    self.memory_mib
                ),
            ));
        }
        let closed = |_| ToolError::new(ErrorKind::Unavailable, "warden is shutting down");
        let own = tool.permits.clone().acquire_owned().await.map_err(closed)?;
        let global = self.global.clone().acquire_owned().await.map_err(closed)?;
        let memory = self
            .memory
            .clone()
            .acquire_many_owned(mib)
            .await
            .map_err(closed)?;
        Ok(Permit {
            _tool: own,
            _global: global,
            _memory: memory,
        })
    }
}
