//! What a wasm call's transaction costs, on a 10 MB read-write root of 1,000 files: `write` of
//! `hostile.wasm` replacing one file, with its transaction (a view mounted by the host
//! backend's fork server, committed at the end) beside the same call writing the root in
//! place, interleaved; and `add` of `trivial.wasm`, which has no root, under both backends (a
//! call without a read-write root pays nothing). Not a test and not in CI:
//! `cargo bench -p warden-wasm --bench transactions` (after `cargo build --release` in
//! guest-sdk/). Prints one markdown table. This program is its own host helper.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use warden_core::{Dispatcher, Protected, Status, ToolCall, Toolbox};
use warden_host::{Helper, HostBackend};
use warden_tx::Store;
use warden_wasm::{Artifacts, WasmBackend};

const RUNS: usize = 200;
const FILES: usize = 1000;
const FILE_BYTES: usize = 10 * 1024;
const HELPER_ARG: &str = "__bench-host-helper";

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm32-wasip2/release")
        .join(format!("{name}.wasm"))
}

/// `hostile` over the read-write root `ws`, and `trivial`, in a toolbox of their own.
fn dispatcher(dir: &Path, name: &str, backend: &WasmBackend) -> Dispatcher {
    let toolbox = dir.join(name);
    std::fs::create_dir_all(&toolbox).unwrap();
    std::fs::write(
        toolbox.join("hostile.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\n\
             fs = [{{ host = \"../ws\", guest = \"/ws\", access = \"read-write\" }}]\n",
            guest("hostile")
        ),
    )
    .unwrap();
    std::fs::write(
        toolbox.join("trivial.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            guest("trivial")
        ),
    )
    .unwrap();
    let protected: [Protected; 0] = [];
    let toolbox = Toolbox::load(&toolbox, &[backend], &protected).expect("the toolbox loads");
    Dispatcher::new(Arc::new(toolbox))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(HELPER_ARG) {
        warden_host::helper_main();
    }
    let place = tempfile::tempdir().unwrap();
    let dir = place.path();
    let content = vec![b'x'; FILE_BYTES];
    for i in 0..FILES {
        let sub = dir.join(format!("ws/d{}", i % 10));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}")), &content).unwrap();
    }
    let artifacts = Artifacts {
        store: dir.join("store"),
        cache: dir.join("cache"),
    };
    let store = Store::open(&dir.join("home/transactions")).unwrap();
    let host = HostBackend::new(Helper::this_program(&[HELPER_ARG]));
    let with = WasmBackend::new(artifacts.clone()).transactions(store, host.overlays());
    let without = WasmBackend::new(artifacts);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let with = dispatcher(dir, "with", &with);
    let without = dispatcher(dir, "without", &without);
    let mut rows: [(&str, Vec<f64>); 4] = [
        ("`write` of one file, with its transaction", Vec::new()),
        ("the same, writing the root in place", Vec::new()),
        ("`add` (no root), transactions on", Vec::new()),
        ("`add` (no root), transactions off", Vec::new()),
    ];
    let add = json!({ "a": 1, "b": 2 });
    // The writes first, then the adds: a write's sandbox ends (its overlay unmounted) as the
    // next call starts, which is not that call's cost.
    for phase in [0, 2] {
        for round in 0..=RUNS {
            let path = format!("/ws/d{}/f{}", round % 10, round % FILES);
            let write = json!({ "path": path, "contents": format!("round {round}") });
            let (tool, args) = if phase == 0 {
                ("write", &write)
            } else {
                ("add", &add)
            };
            for (i, d) in [&with, &without].into_iter().enumerate() {
                let call = ToolCall::new("c", tool, args);
                let start = Instant::now();
                let m = runtime.block_on(d.call(call));
                let took = start.elapsed().as_secs_f64() * 1e6;
                assert_eq!(m.status, Status::Success, "{}", m.content);
                // The first round starts the fork server and fills the engine's pool.
                if round > 0 {
                    rows[phase + i].1.push(took);
                }
            }
        }
    }
    println!("| median of {RUNS} (10 MB root, 1,000 files) | µs |\n|---|---|");
    for (label, mut times) in rows {
        println!("| {label} | {:.0} |", median(&mut times));
    }
}
