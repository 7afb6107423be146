//! How long a component takes to compile the first time, and to load from the compile cache
//! afterwards, on warden's engine settings. A plain program printing a markdown table, since
//! a compile is too slow for many samples.
//!
//! Run with `cargo bench -p warden-wasm --bench compile` (or `scripts/bench`, which builds the
//! guest components first). It also writes the figures to `target/warden-bench/compile.json`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use warden_core::{Protected, Toolbox};
use warden_wasm::{Artifacts, Binary, CompileHook, WasmBackend, sha256_file};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// The example tools and the test fixtures.
const COMPONENTS: [&str; 6] = [
    "units",
    "files",
    "wordcount",
    "trivial",
    "hostile",
    "kitchen",
];

/// How many cached loads are timed; the median is reported.
const LOADS: usize = 5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

fn wasm(name: &str) -> PathBuf {
    let path = root().join(format!("target/wasm32-wasip2/release/{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --release` in guest-sdk/ (scripts/bench does)",
        path.display()
    );
    path
}

/// warden's plain engine (crates/warden-wasm/src/engine.rs, which is private), repeated.
/// `check_engine` proves that it compiles what warden's own engine compiles.
fn engine() -> Engine {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(1000)
        .total_core_instances(1000)
        .total_memories(1000)
        .total_tables(1000)
        .total_stacks(1000)
        .max_memory_size(warden_wasm::MAX_MEMORY as usize)
        .max_memories_per_component(32)
        .max_core_instances_per_component(64);
    let mut cfg = Config::new();
    cfg.epoch_interruption(true)
        .consume_fuel(false)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&cfg).expect("engine")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Loads trivial.wasm through warden's backend with a cache that `engine` filled: if warden
/// compiles again, its engine settings differ from the ones repeated here.
fn check_engine(engine: &Engine, dir: &Path) {
    let cache = dir.join("check-cache");
    let artifacts = Artifacts {
        store: dir.join("check-store"),
        cache,
    };
    let path = wasm("trivial");
    let sha = sha256_file(&path).expect("hash");
    artifacts
        .compiled(engine, &sha, &path, Binary::Component, &|_| {})
        .expect("trivial.wasm compiles");
    let toolbox = dir.join("check-policies");
    std::fs::create_dir_all(&toolbox).expect("toolbox folder");
    std::fs::write(
        toolbox.join("trivial.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            path.display().to_string()
        ),
    )
    .expect("policy");
    let compiled = Arc::new(AtomicBool::new(false));
    let flag = compiled.clone();
    let hook: CompileHook = Arc::new(move |_| flag.store(true, Ordering::SeqCst));
    let backend = WasmBackend::new(artifacts).on_compile(hook);
    let protected = [Protected::new("the toolbox", toolbox.clone())];
    Toolbox::load(&toolbox, &[&backend], &protected).expect("toolbox loads");
    if compiled.load(Ordering::SeqCst) {
        eprintln!(
            "WARNING: warden's engine settings differ from the ones in benches/compile.rs; \
             update them, the figures below are not warden's"
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a test run (`cargo test --benches`) does not.
    if !std::env::args().any(|a| a == "--bench") {
        println!("compile: benchmarks run with `cargo bench` or scripts/bench; skipped");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");

    let start = Instant::now();
    let engine = engine();
    let engine_ms = ms(start.elapsed());
    // Also the warm-up: the first compile of a process starts its thread pool.
    check_engine(&engine, dir.path());

    let mut rows = Vec::new();
    println!("| component | size | cold compile ms | cached load ms |");
    println!("|---|---:|---:|---:|");
    for name in COMPONENTS {
        let path = wasm(name);
        let size = std::fs::metadata(&path).expect("metadata").len();
        let sha = sha256_file(&path).expect("hash");
        let artifacts = Artifacts {
            store: dir.path().join("store"),
            cache: dir.path().join(format!("cache-{name}")),
        };
        let start = Instant::now();
        artifacts
            .compiled(&engine, &sha, &path, Binary::Component, &|_| {})
            .expect("compiles");
        let cold = ms(start.elapsed());

        let compiled = Arc::new(AtomicBool::new(false));
        let mut loads: Vec<f64> = (0..LOADS)
            .map(|_| {
                let flag = compiled.clone();
                let start = Instant::now();
                artifacts
                    .compiled(&engine, &sha, &path, Binary::Component, &move |_| {
                        flag.store(true, Ordering::SeqCst)
                    })
                    .expect("loads");
                ms(start.elapsed())
            })
            .collect();
        assert!(
            !compiled.load(Ordering::SeqCst),
            "{name}: the cached load compiled again"
        );
        loads.sort_by(f64::total_cmp);
        let cached = loads[LOADS / 2];
        println!(
            "| {name}.wasm | {:.1} KiB | {cold:.0} | {cached:.2} |",
            size as f64 / 1024.0
        );
        rows.push(json!({
            "component": name,
            "size_bytes": size,
            "cold_compile_ms": cold,
            "cached_load_ms": cached,
        }));
    }
    println!(
        "\nengine creation (warden's pooling config): {engine_ms:.2} ms; cached load is the \
         median of {LOADS}"
    );

    let out = root().join("target/warden-bench");
    std::fs::create_dir_all(&out).expect("output folder");
    let report = json!({"engine_ms": engine_ms, "components": rows});
    std::fs::write(
        out.join("compile.json"),
        serde_json::to_string_pretty(&report).expect("json"),
    )
    .expect("compile.json written");
}
