//! Admission: how many calls run at once (globally and per tool) and how much memory they may
//! claim together; with the run's limits ([`RunLimits`]), what a dispatcher admits.

use crate::message::{ErrorKind, ToolError};
use crate::run::RunLimits;
use crate::toolbox::Tool;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
fn default_memory_budget() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    total.map_or(4 << 30, |t| t / 2)
}

/// The shared state behind admission: the slots and the memory that calls in flight hold.
pub(crate) struct Gate {
    global: Arc<Semaphore>,
    /// One permit per MiB of budget.
    memory: Arc<Semaphore>,
    memory_mib: u32,
}

/// Held while a call runs; dropping it frees its place.
pub(crate) struct Permit {
    _tool: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
    _memory: OwnedSemaphorePermit,
}

impl Gate {
    pub(crate) fn new(a: &Admission) -> Self {
        let memory_mib = u32::try_from(a.memory_budget >> 20)
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        Self {
            global: Arc::new(Semaphore::new(a.global_concurrency.max(1))),
            memory: Arc::new(Semaphore::new(memory_mib as usize)),
            memory_mib,
        }
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
