//! The wasmtime engines: one without fuel (the fast default), one with fuel for policies that
//! ask for it, both with epoch interruption driven by one ticker thread; each sized for its
//! [`Workload`].
//!
//! Every allocation setting is here, with why:
//! - **Server** (`warden serve`, `run`, `agent`, a library's dispatcher): the pooling
//!   allocator, so a call's instance takes a warm slot (~6 µs) instead of fresh mappings
//!   (~15 µs). Returning a slot resets its memory; by default wasmtime does that with one
//!   `madvise` per slot, and each `madvise` that unmaps pages interrupts every core to flush
//!   its TLB — measured, 41 % of a 10,000-call batch's CPU. Slots now keep their first pages
//!   resident and are reset in place ([`KEEP_RESIDENT`], found dirty by the `PAGEMAP_SCAN`
//!   ioctl of Linux 6.7+, so only written pages are cleared): a tool that writes no more than
//!   that needs no `madvise` at all. The price is resident memory: up to [`KEEP_RESIDENT`] per
//!   warm slot (wasmtime keeps at most 100 warm slots unused, so ≤ 400 MiB in the worst case,
//!   a few MiB in practice since only touched pages stay). Without `PAGEMAP_SCAN` a kept page
//!   is cleared by `memset` whether written or not, so slots keep only
//!   [`KEEP_RESIDENT_WITHOUT_SCAN`].
//!   What a slot used beyond that is given back as its call ends (wasmtime's default batch of
//!   one decommit): batching decommits, as warden once did (32 slots a flush), saved nothing
//!   measurable once small tools needed none, and kept up to 31 freed slots resident — after 50
//!   calls of 256 MiB, 2.2 GB stayed resident, now 130 MB within 5 s.
//! - **One-shot** (`warden call`): one call, so no pool to set up: instances are allocated on
//!   demand.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::OnceLock;
use std::time::Duration;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; a looping guest yields to the runtime this often.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Instances alive at once across the pool. A Python component uses 14 core instances, so
/// this also bounds how many of those run together; the dispatcher's global limit stays below.
pub(crate) const POOL_CORE_INSTANCES: u32 = 1000;

/// Async stacks in the pool: one is held by each call while it runs (a call that waits on
/// I/O keeps its stack), so this bounds the wasm calls in flight at once, well above a
/// dispatcher's default global concurrency (64). wasmtime protects each stack's guard page
/// with its own `mprotect` when the pool is made, ~3.4 µs apiece here: 1,000 stacks took
/// ~3.4 ms of a `warden serve`'s start, 256 take ~0.9 ms. A call past them answers
/// `unavailable` (see `Sandbox::failure`).
pub(crate) const POOL_STACKS: u32 = 256;

/// The largest linear memory a pool slot holds; a policy may not ask for more.
pub const MAX_MEMORY: u64 = 4 << 30;

/// Bytes of each linear memory a free pool slot keeps resident where `PAGEMAP_SCAN` finds the
/// written pages: a small tool's whole memory, so its slot is reused without page faults.
const KEEP_RESIDENT: usize = 4 << 20;

/// The same where every kept byte is cleared by `memset`: one page's worth of clearing
/// costs less than the fault that would refill it.
const KEEP_RESIDENT_WITHOUT_SCAN: usize = 64 << 10;

/// Bytes of each table a free slot keeps resident (a small tool's tables fit).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// What the engine is sized for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Many calls over the process's life: a warm pool.
    #[default]
    Server,
    /// A call or two, then exit: nothing set up ahead.
    OneShot,
}

/// Which engine a tool runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Flavor {
    Plain,
    Fuel,
}

/// Why an engine could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot start the WebAssembly engine: {0}")]
// wasmtime's message, kept as text: the error is made once and handed to every caller, and
// wasmtime's own error cannot be cloned.
pub(crate) struct EngineError(String);

fn pool() -> PoolingAllocationConfig {
    let scan = PoolingAllocationConfig::is_pagemap_scan_available();
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_CORE_INSTANCES)
        .total_core_instances(POOL_CORE_INSTANCES)
        .total_memories(POOL_CORE_INSTANCES)
        .total_tables(POOL_CORE_INSTANCES)
        .total_stacks(POOL_STACKS)
        .max_memory_size(MAX_MEMORY as usize)
        .max_memories_per_component(32)
        .max_core_instances_per_component(64)
        .pagemap_scan(if scan { Enabled::Yes } else { Enabled::No })
        .linear_memory_keep_resident(if scan {
            KEEP_RESIDENT
        } else {
            KEEP_RESIDENT_WITHOUT_SCAN
        })
        .table_keep_resident(TABLE_KEEP_RESIDENT);
    pool
}

fn config(flavor: Flavor, workload: Workload) -> Config {
    let mut cfg = Config::new();
    cfg.epoch_interruption(true)
        .consume_fuel(flavor == Flavor::Fuel)
        .allocation_strategy(match workload {
            Workload::Server => InstanceAllocationStrategy::Pooling(pool()),
            Workload::OneShot => InstanceAllocationStrategy::OnDemand,
        });
    cfg
}

/// warden's engine settings for `workload` (without fuel): for benchmarks that run plain
/// wasmtime on the same footing.
pub fn engine_config(workload: Workload) -> Config {
    config(Flavor::Plain, workload)
}

/// The engine of a flavor for a workload, made once per process.
pub(crate) fn engine(flavor: Flavor, workload: Workload) -> Result<&'static Engine, EngineError> {
    static ENGINES: [OnceLock<Result<Engine, EngineError>>; 4] = [const { OnceLock::new() }; 4];
    let cell = &ENGINES[match (flavor, workload) {
        (Flavor::Plain, Workload::Server) => 0,
        (Flavor::Fuel, Workload::Server) => 1,
        (Flavor::Plain, Workload::OneShot) => 2,
        (Flavor::Fuel, Workload::OneShot) => 3,
    }];
    cell.get_or_init(|| {
        let engine =
            Engine::new(&config(flavor, workload)).map_err(|e| EngineError(format!("{e:#}")))?;
        start_ticker(engine.clone());
        Ok(engine)
    })
    .as_ref()
    .map_err(EngineError::clone)
}

/// A short stable name for what compiled code depends on: code compiled by one engine setting
/// is never loaded by another.
pub(crate) fn compatibility_key(engine: &Engine) -> String {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

fn start_ticker(engine: Engine) {
    let spawned = std::thread::Builder::new()
        .name("warden-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
    if let Err(e) = spawned {
        // Without a ticker, deadlines still hold through the dispatcher's timeout.
        tracing::error!("cannot start the epoch ticker: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_workloads_load_the_same_compiled_code() {
        // A one-shot `warden call` must find what `warden serve` compiled, and the reverse.
        for flavor in [Flavor::Plain, Flavor::Fuel] {
            let server = engine(flavor, Workload::Server).unwrap();
            let one_shot = engine(flavor, Workload::OneShot).unwrap();
            assert_eq!(compatibility_key(server), compatibility_key(one_shot));
        }
    }
}
