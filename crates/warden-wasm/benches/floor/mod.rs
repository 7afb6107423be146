//! Plain wasmtime's per-call state with warden's per-store setup (a limiter summing linear
//! memories against 256 MiB, an epoch deadline that yields): the floor of `benches/calls.rs`
//! and of the `raw-batch` example, in one place. Repeated from `src/sandbox.rs` because the
//! sandbox's own are private.

use std::time::{Duration, Instant};
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// A fresh call's store data: WASI with nothing granted, and the memory limiter.
pub(crate) struct Raw {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
}

impl Raw {
    pub(crate) fn new() -> Self {
        Self {
            wasi: WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            limiter: Limiter { used: 0 },
        }
    }
}

impl WasiView for Raw {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Sets up `store` as warden's sandbox does: the limiter, and a 30 s epoch deadline that
/// yields to the runtime at every tick before it.
pub(crate) fn as_warden_does(store: &mut Store<Raw>) {
    store.limiter(|s| &mut s.limiter);
    let deadline = Instant::now() + Duration::from_secs(30);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if Instant::now() >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
        })
    });
}

/// As warden's: sums linear memories against 256 MiB.
struct Limiter {
    used: usize,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.used - current.min(self.used) + desired;
        if after > 256 << 20 {
            return Ok(false);
        }
        self.used = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}
