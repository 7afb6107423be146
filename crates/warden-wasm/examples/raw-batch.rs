//! The floor of `warden run` of a batch, as a whole process, for `scripts/bench-guard`: what
//! criterion's `accounting/raw_wasmtime_batch_10000` measures in process, with the process's
//! start and exit around it. It loads `trivial.wasm` compiled from warden's compile cache (a
//! folder of its own: `Artifacts::compiled`, so the first run compiles and later ones load),
//! then makes N calls of `add(1, 2)` on plain wasmtime under warden's engine settings, each a
//! fresh store and instance with warden's per-store setup (memory limiter, epoch deadline), as
//! tasks on a multi-threaded tokio runtime with at most 64 in flight (the dispatcher's bound).
//! No JSON, no policy, no call log: it prints the number of calls that answered 3.
//!
//!     raw-batch <trivial.wasm> <cache folder> <calls>

use std::path::PathBuf;
use std::sync::Arc;
use warden_wasm::{Artifacts, Binary, sha256_file};
use wasmtime::component::{ComponentExportIndex, InstancePre, Linker, Val};
use wasmtime::{Engine, Store};

// The floor's store data and per-store setup, shared with benches/calls.rs.
#[path = "../benches/floor/mod.rs"]
mod floor;

use floor::{Raw, as_warden_does};

struct Setup {
    engine: Engine,
    pre: InstancePre<Raw>,
    add: ComponentExportIndex,
}

async fn call(s: &Setup) -> wasmtime::Result<i32> {
    let mut store = Store::new(&s.engine, Raw::new());
    as_warden_does(&mut store);
    let instance = s.pre.instantiate_async(&mut store).await?;
    let func = instance
        .get_func(&mut store, s.add)
        .ok_or_else(|| wasmtime::format_err!("no add in the instance"))?;
    let mut results = [Val::S32(0)];
    func.call_async(&mut store, &[Val::S32(1), Val::S32(2)], &mut results)
        .await?;
    match results[0] {
        Val::S32(n) => Ok(n),
        ref other => Err(wasmtime::format_err!("add answered {other:?}")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(wasm), Some(cache), Some(calls)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: raw-batch <trivial.wasm> <cache folder> <calls>".into());
    };
    let (wasm, cache, calls) = (PathBuf::from(wasm), PathBuf::from(cache), calls.parse()?);
    let engine = Engine::new(&warden_wasm::engine_config(warden_wasm::Workload::Server))?;
    let ticker = engine.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(warden_wasm::EPOCH_TICK);
            ticker.increment_epoch();
        }
    });
    let artifacts = Artifacts {
        store: cache.clone(),
        cache,
    };
    let component = artifacts.compiled(
        &engine,
        &sha256_file(&wasm)?,
        &wasm,
        Binary::Component,
        &|_| {},
    )?;
    let mut linker: Linker<Raw> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    let setup = Arc::new(Setup {
        pre: linker.instantiate_pre(&component)?,
        add: component
            .get_export_index(None, "add")
            .ok_or("the component exports no add")?,
        engine,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let answered = runtime.block_on(async {
        let permits = Arc::new(tokio::sync::Semaphore::new(64));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..calls {
            let (setup, permits) = (setup.clone(), permits.clone());
            set.spawn(async move {
                let _permit = permits.acquire().await?;
                call(&setup).await
            });
        }
        let mut answered = 0u32;
        while let Some(n) = set.join_next().await {
            if n?? == 3 {
                answered += 1;
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(answered)
    })?;
    println!("{answered}");
    Ok(())
}
