//! The wasmtime engines: one without fuel (the fast default), one with fuel for policies that
//! ask for it, both with epoch interruption driven by one ticker thread.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::OnceLock;
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; a looping guest yields to the runtime this often.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Instances alive at once across the pool. A Python component uses 14 core instances, so
/// this also bounds how many of those run together; the dispatcher's global limit stays below.
pub(crate) const POOL_CORE_INSTANCES: u32 = 1000;

/// The largest linear memory a pool slot holds; a policy may not ask for more.
pub const MAX_MEMORY: u64 = 4 << 30;

/// Which engine a tool runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Flavor {
    Plain,
    Fuel,
}

/// Why an engine could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the WebAssembly engine: {0}")]
pub(crate) struct EngineError(String);

fn config(flavor: Flavor) -> Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_CORE_INSTANCES)
        .total_core_instances(POOL_CORE_INSTANCES)
        .total_memories(POOL_CORE_INSTANCES)
        .total_tables(POOL_CORE_INSTANCES)
        .total_stacks(POOL_CORE_INSTANCES)
        .max_memory_size(MAX_MEMORY as usize)
        .max_memories_per_component(32)
        .max_core_instances_per_component(64);
    let mut cfg = Config::new();
    cfg.epoch_interruption(true)
        .consume_fuel(flavor == Flavor::Fuel)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    cfg
}

/// The engine of a flavor, made once per process.
pub(crate) fn engine(flavor: Flavor) -> Result<&'static Engine, EngineError> {
    static PLAIN: OnceLock<Result<Engine, String>> = OnceLock::new();
    static FUEL: OnceLock<Result<Engine, String>> = OnceLock::new();
    let cell = match flavor {
        Flavor::Plain => &PLAIN,
        Flavor::Fuel => &FUEL,
    };
    cell.get_or_init(|| {
        let engine = Engine::new(&config(flavor)).map_err(|e| format!("{e:#}"))?;
        start_ticker(engine.clone());
        Ok(engine)
    })
    .as_ref()
    .map_err(|e| EngineError(e.clone()))
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
