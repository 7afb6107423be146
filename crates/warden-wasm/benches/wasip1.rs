//! A WASI 0.1 module beside a component: the Go `gowordcount` (Go's own toolchain, wrapped with
//! the preview-1 adapter when compiled) and the Rust `wordcount` command component, the same
//! tool. For each: the first call with an empty compile cache (for the module: wrap, compile,
//! call), a new toolbox's load from the cache and its first call (what a new process pays), and
//! later calls through the dispatcher. Prints a markdown table.
//!
//! Run with `cargo bench -p warden-wasm --bench wasip1` after `scripts/build-polyglot` and the
//! guest-sdk build (scripts/bench does both when Go is installed).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Dispatcher, Protected, ToolCall, Toolbox};
use warden_wasm::{Artifacts, WasmBackend};

/// Later calls timed per tool.
const CALLS: usize = 200;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("wasip1: benchmarks run with `cargo bench` or scripts/bench; skipped");
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    // ~4 KB of text on stdin: the tool reads it all and counts.
    let text = "the quick brown fox jumps over the lazy dog\n".repeat(100);
    let cases = [
        (
            "gowordcount",
            "Go, WASI 0.1 module",
            "target/polyglot/gowordcount.wasm",
        ),
        (
            "wordcount",
            "Rust, WASI 0.2 component",
            "target/wasm32-wasip2/release/wordcount.wasm",
        ),
    ];
    println!(
        "| tool | size | first call, cache empty (compile + call) | new toolbox from the cache + first call | later calls p50 / p90 |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, what, path) in cases {
        let path = root().join(path);
        if !path.is_file() {
            println!(
                "| {name} ({what}) | missing: build it (scripts/build-polyglot, guest-sdk) | | | |"
            );
            continue;
        }
        let size = std::fs::metadata(&path).expect("metadata").len();
        let toolbox = dir.path().join(format!("policies-{name}"));
        std::fs::create_dir(&toolbox).expect("toolbox");
        std::fs::write(
            toolbox.join(format!("{name}.toml")),
            format!(
                "[executor]\nkind = \"wasm\"\ncomponent = {:?}\nname = \"{name}\"\n",
                path.display().to_string()
            ),
        )
        .expect("policy");
        let artifacts = Artifacts {
            store: dir.path().join("store"),
            cache: dir.path().join(format!("cache-{name}")),
        };
        let protected = [Protected::new("the toolbox", toolbox.clone())];
        let call = ToolCall::new("b", name, &json!({"args": ["-w"], "stdin": text}));
        let first_call = || {
            let backend = WasmBackend::new(artifacts.clone());
            let loaded = Toolbox::load(&toolbox, &[&backend], &protected).expect("toolbox loads");
            let d = Dispatcher::new(Arc::new(loaded));
            let m = rt.block_on(d.call(call.clone()));
            assert_eq!(m.content, "900\n", "{m:?}");
            d
        };
        let start = Instant::now();
        first_call();
        let compiled = start.elapsed();
        let start = Instant::now();
        let d = first_call();
        let cached = start.elapsed();
        let mut times: Vec<Duration> = (0..CALLS)
            .map(|_| {
                let start = Instant::now();
                let m = rt.block_on(d.call(call.clone()));
                assert!(m.error.is_none(), "{m:?}");
                start.elapsed()
            })
            .collect();
        times.sort();
        println!(
            "| {name} ({what}) | {:.2} MB | {:.0} ms | {:.1} ms | {:.2} ms / {:.2} ms |",
            size as f64 / 1e6,
            ms(compiled),
            ms(cached),
            ms(times[CALLS / 2]),
            ms(times[CALLS * 9 / 10]),
        );
    }
}
