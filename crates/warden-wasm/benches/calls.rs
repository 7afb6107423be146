//! What one tool call costs, warden's path beside the plain-wasmtime floor.
//!
//! Run with `cargo bench -p warden-wasm --bench calls` (or `scripts/bench`, which builds the
//! guest components first and prints a summary). Every benchmark calls `add` of
//! `trivial.wasm`, so what is measured is the cost of a call, not the work of a tool:
//!
//! - `raw_wasmtime_fresh_instance/pooling`: the floor. Plain wasmtime, the pooling allocator,
//!   an `InstancePre`; per call a fresh `Store` with a minimal `WasiCtx`, `instantiate_async`,
//!   `Func::call_async` with `Val`s.
//! - `raw_wasmtime_fresh_instance/on_demand`: the same with the default allocator.
//! - `raw_wasmtime_fresh_instance/warden_config`: the floor on warden's engine settings
//!   (`warden_wasm::engine_config`: epoch interruption, the tuned pool) and warden's per-store
//!   setup (memory limiter, epoch deadline callback), to tell engine costs from warden's own.
//! - `raw_wasmtime_fresh_instance/fastest`: warden's tuned pool without epochs or store setup.
//! - `raw_wasmtime_batch_1000/{warden_config,fastest}`: 1,000 of those calls as concurrent
//!   tasks, the floor of a batch.
//! - `warden_executor`: `Dispatcher::call` from outside the runtime (`block_on`), the way the
//!   CLI calls: JSON parsing, argument checking, permits, the deadline, a task in a `JoinSet`.
//! - `warden_executor_in_runtime`: the same loop run inside a runtime task, the way an agent
//!   embedding warden in its own async code calls.
//! - `warden_executor_no_dispatcher`: the tool's `Executor::execute` without the dispatcher.
//! - `warden_batch_1000`: one `Dispatcher::dispatch` of 1,000 calls (throughput in calls/s).
//! - `accounting/*`: the price of usage accounting, one `Dispatcher::dispatch` of 10,000
//!   calls with it (`on`) and without (`off`: `WasmBackend::without_accounting`, no CPU clock
//!   reads per poll, no usage record, no root observation), of `add` and of `read-file` of
//!   `files.wasm` in a granted root (each call opens the root), beside the floor: 10,000 plain
//!   wasmtime calls of `add` under the dispatcher's bound of 64 in flight.
//!
//! Compiled code is cached in `target/warden-bench-cache`, so no compile is measured.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use serde_json::json;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use warden_core::{Dispatcher, Invocation, Protected, ToolCall, ToolMessage, Toolbox};
use warden_wasm::{Artifacts, Binary, WasmBackend, sha256_file};
use wasmtime::component::{ComponentExportIndex, InstancePre, Linker, Val};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// `trivial.wasm`, which `scripts/bench` (or `cargo build --release` in guest-sdk/) builds.
fn trivial() -> PathBuf {
    let path = root().join("target/wasm32-wasip2/release/trivial.wasm");
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --release` in guest-sdk/ (scripts/bench does)",
        path.display()
    );
    path
}

/// The compile cache of the benchmarks, kept across runs so compiles are not measured.
fn artifacts(store: &Path) -> Artifacts {
    Artifacts {
        store: store.to_owned(),
        cache: root().join("target/warden-bench-cache"),
    }
}

// ---- plain wasmtime -------------------------------------------------------------------------

#[path = "floor/mod.rs"]
mod floor;

use floor::{Raw, as_warden_does};

#[derive(Clone, Copy, PartialEq)]
enum RawKind {
    /// Default pooling allocator.
    Pooling,
    /// Default on-demand allocator.
    OnDemand,
    /// warden's engine settings (`engine_config`) and per-store setup (sandbox.rs: memory
    /// limiter, epoch deadline callback, repeated here because they are private).
    WardenConfig,
    /// warden's tuned pool without epoch interruption or per-store setup.
    Fastest,
}

struct RawSetup {
    kind: RawKind,
    engine: Engine,
    pre: InstancePre<Raw>,
    add: ComponentExportIndex,
}

fn raw_config(kind: RawKind) -> Config {
    let mut cfg = Config::new();
    match kind {
        RawKind::Pooling => {
            cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(
                PoolingAllocationConfig::new(),
            ));
        }
        RawKind::OnDemand => {}
        RawKind::WardenConfig => cfg = warden_wasm::engine_config(warden_wasm::Workload::Server),
        RawKind::Fastest => {
            // warden's pool without epoch interruption: what wasmtime costs at best here.
            cfg = warden_wasm::engine_config(warden_wasm::Workload::Server);
            cfg.epoch_interruption(false);
        }
    }
    cfg
}

fn raw_setup(kind: RawKind, store_dir: &Path) -> RawSetup {
    let engine = Engine::new(&raw_config(kind)).expect("engine");
    if kind == RawKind::WardenConfig {
        let ticker = engine.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(warden_wasm::EPOCH_TICK);
                ticker.increment_epoch();
            }
        });
    }
    let path = trivial();
    let sha = sha256_file(&path).expect("hash");
    let component = artifacts(store_dir)
        .compiled(&engine, &sha, &path, Binary::Component, &|_| {})
        .expect("trivial.wasm compiles");
    let mut linker: Linker<Raw> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI links");
    let pre = linker.instantiate_pre(&component).expect("instantiate_pre");
    let add = component
        .get_export_index(None, "add")
        .expect("trivial.wasm exports add");
    RawSetup {
        kind,
        engine,
        pre,
        add,
    }
}

/// One call the plain way: a fresh store and instance, `add(1, 2)`.
async fn raw_call(s: &RawSetup) -> i32 {
    let mut store = Store::new(&s.engine, Raw::new());
    if s.kind == RawKind::WardenConfig {
        as_warden_does(&mut store);
    }
    let instance = s
        .pre
        .instantiate_async(&mut store)
        .await
        .expect("instantiates");
    let func = instance.get_func(&mut store, s.add).expect("add");
    let mut results = [Val::S32(0)];
    func.call_async(&mut store, &[Val::S32(1), Val::S32(2)], &mut results)
        .await
        .expect("add runs");
    match results[0] {
        Val::S32(n) => n,
        ref other => panic!("add answered {other:?}"),
    }
}

// ---- warden -----------------------------------------------------------------------------------

/// A toolbox in a temp dir with one policy for trivial.wasm and one for files.wasm (one
/// root, `/workspace`, holding `note.txt`), loaded as the CLI loads it, with usage accounting
/// or without.
struct WardenSetup {
    _dir: tempfile::TempDir,
    dispatcher: Dispatcher,
}

fn warden_setup(accounting: bool) -> WardenSetup {
    let dir = tempfile::tempdir().expect("temp dir");
    let toolbox = dir.path().join("policies");
    std::fs::create_dir(&toolbox).expect("toolbox folder");
    std::fs::write(
        toolbox.join("trivial.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            trivial().display().to_string()
        ),
    )
    .expect("policy");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).expect("workspace");
    std::fs::write(workspace.join("note.txt"), "hello").expect("note");
    let files = trivial().with_file_name("files.wasm");
    std::fs::write(
        toolbox.join("files.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\nfs = [{{ host = {:?}, \
             guest = \"/workspace\", access = \"read-only\" }}]\n",
            files.display().to_string(),
            workspace.display().to_string()
        ),
    )
    .expect("policy");
    let artifacts = artifacts(&dir.path().join("store"));
    let protected = [
        Protected::new("the toolbox", toolbox.clone()),
        Protected::new("the component store", artifacts.store.clone()),
        Protected::new("the compile cache", artifacts.cache.clone()),
    ];
    let mut backend = WasmBackend::new(artifacts);
    if !accounting {
        backend = backend.without_accounting();
    }
    let toolbox = Toolbox::load(&toolbox, &[&backend], &protected).expect("toolbox loads");
    WardenSetup {
        _dir: dir,
        dispatcher: Dispatcher::new(Arc::new(toolbox)),
    }
}

fn add_call(id: &str) -> ToolCall {
    ToolCall::new(id, "add", &json!({"a": 1, "b": 2}))
}

fn check(m: &ToolMessage) {
    assert!(
        m.error.is_none() && m.content == "3",
        "add(1, 2) did not answer 3: {m:?}"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn calls(c: &mut Criterion) {
    let rt = runtime();
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("calls");
    group.throughput(Throughput::Elements(1));

    let mut raw_batch_setups = Vec::new();
    for (kind, name) in [
        (RawKind::Pooling, "pooling"),
        (RawKind::OnDemand, "on_demand"),
        (RawKind::WardenConfig, "warden_config"),
        (RawKind::Fastest, "fastest"),
    ] {
        let setup = Arc::new(raw_setup(kind, tmp.path()));
        assert_eq!(rt.block_on(raw_call(&setup)), 3);
        group.bench_function(BenchmarkId::new("raw_wasmtime_fresh_instance", name), |b| {
            b.to_async(&rt).iter(|| raw_call(&setup));
        });
        if matches!(kind, RawKind::WardenConfig | RawKind::Fastest) {
            raw_batch_setups.push((setup, name));
        }
    }

    let warden = warden_setup(true);
    let dispatcher = &warden.dispatcher;
    check(&rt.block_on(dispatcher.call(add_call("warm-up"))));
    group.bench_function("warden_executor", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(dispatcher.call(add_call("call-1")).await) });
    });

    group.bench_function("warden_executor_in_runtime", |b| {
        b.iter_custom(|iters| {
            let d = dispatcher.clone();
            rt.block_on(async move {
                tokio::spawn(async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(d.call(add_call("call-1")).await);
                    }
                    start.elapsed()
                })
                .await
                .expect("the bench task runs")
            })
        });
    });

    let tool = dispatcher.toolbox().get("add").expect("the add tool");
    group.bench_function("warden_executor_no_dispatcher", |b| {
        b.to_async(&rt).iter(|| async {
            let inv = Invocation {
                denials: Default::default(),
                call_id: "call-1".into(),
                arguments: json!({"a": 1, "b": 2}),
                limits: tool.limits,
                deadline: Instant::now() + tool.limits.timeout,
                session: warden_core::SessionId::fresh(),
                usage: Default::default(),
                output: None,
                caller_env: Default::default(),
                image: None,
                hold: None,
            };
            black_box(tool.executor.execute(inv).await.expect("add runs"))
        });
    });

    const BATCH: usize = 1000;
    let batch: Vec<ToolCall> = (0..BATCH).map(|i| add_call(&format!("c{i}"))).collect();
    for m in rt.block_on(dispatcher.dispatch(batch.clone())) {
        check(&m);
    }
    group.throughput(Throughput::Elements(BATCH as u64));
    // The batch floor: the same 1,000 fresh instances as tasks on the runtime, nothing else.
    for (setup, name) in &raw_batch_setups {
        group.bench_function(BenchmarkId::new("raw_wasmtime_batch_1000", name), |b| {
            b.to_async(&rt).iter(|| async {
                let mut set = tokio::task::JoinSet::new();
                for _ in 0..BATCH {
                    let setup = setup.clone();
                    set.spawn(async move { raw_call(&setup).await });
                }
                while let Some(n) = set.join_next().await {
                    assert_eq!(n.expect("the raw call's task runs"), 3);
                }
            });
        });
    }
    group.bench_function("warden_batch_1000", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(dispatcher.dispatch(batch.clone()).await) });
    });
    group.finish();
}

/// The price of usage accounting: 10,000 calls with it and without, beside the floor.
fn accounting(c: &mut Criterion) {
    const CALLS: usize = 10_000;
    let rt = runtime();
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("accounting");
    group.throughput(Throughput::Elements(CALLS as u64));
    group.sample_size(10);

    let floor = Arc::new(raw_setup(RawKind::WardenConfig, tmp.path()));
    // As many in flight as the dispatcher lets run at once.
    let permits = Arc::new(tokio::sync::Semaphore::new(64));
    group.bench_function("raw_wasmtime_batch_10000", |b| {
        b.to_async(&rt).iter(|| async {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..CALLS {
                let (setup, permits) = (floor.clone(), permits.clone());
                set.spawn(async move {
                    let _permit = permits.acquire().await.expect("the semaphore is open");
                    raw_call(&setup).await
                });
            }
            while let Some(n) = set.join_next().await {
                assert_eq!(n.expect("the raw call's task runs"), 3);
            }
        });
    });

    let adds: Vec<ToolCall> = (0..CALLS).map(|i| add_call(&format!("c{i}"))).collect();
    let reads: Vec<ToolCall> = (0..CALLS)
        .map(|i| ToolCall::new(format!("r{i}"), "read-file", &json!({"path": "note.txt"})))
        .collect();
    for (accounting, name) in [(true, "on"), (false, "off")] {
        let warden = warden_setup(accounting);
        let dispatcher = &warden.dispatcher;
        let read = rt.block_on(dispatcher.call(reads[0].clone()));
        assert_eq!(read.content, "hello", "{read:?}");
        let opened = read.artifact.as_ref().and_then(|a| a.get("roots_opened"));
        assert_eq!(opened.is_some(), accounting, "{read:?}");
        for (calls, tool) in [(&adds, "add"), (&reads, "read_file")] {
            group.bench_function(BenchmarkId::new(format!("{tool}_10000"), name), |b| {
                b.to_async(&rt)
                    .iter(|| async { black_box(dispatcher.dispatch(calls.clone()).await) });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, calls, accounting);

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or --all-targets) does not, and
    // benchmarks have no place in a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("calls: benchmarks run with `cargo bench` or scripts/bench; skipped");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
