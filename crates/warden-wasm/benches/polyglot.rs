//! Python and JavaScript components (tens of MB, an engine inside): the first compile, the
//! cached load, and a warm call through warden beside the plain-wasmtime fresh-instance floor
//! for the same component. Prints a markdown table.
//!
//! Run with `cargo bench -p warden-wasm --bench polyglot` after `scripts/build-polyglot`
//! (scripts/bench does both when the toolchains are installed).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Dispatcher, Protected, ToolCall, Toolbox};
use warden_wasm::{Artifacts, WasmBackend};
use wasmtime::component::{Linker, ResourceTable, Val};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

/// Calls timed per figure; the median is reported.
const CALLS: usize = 50;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The plain floor's store: WASI and wasi-http (JavaScript components import it) with every
/// request refused.
struct Raw {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: Refuse,
    table: ResourceTable,
}

struct Refuse;

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for Refuse {
    fn send_request(
        &mut self,
        _: http::Request<WasiBody>,
        _: Option<RequestOptions>,
        _: IoFuture,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), Error>> + Send> {
        Box::new(async { Err(Error::HttpRequestDenied) })
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

impl WasiHttpView for Raw {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Fresh store, instance and call of `function(args)` on plain wasmtime (default config,
/// on-demand allocation), compiled code loaded from `cwasm`.
async fn raw_floor(path: &Path, function: &str, args: Vec<Val>) -> Duration {
    let mut cfg = Config::new();
    cfg.epoch_interruption(false);
    let engine = Engine::new(&cfg).expect("engine");
    let component =
        wasmtime::component::Component::from_file(&engine, path).expect("component compiles");
    let mut linker: Linker<Raw> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).expect("http");
    let pre = linker
        .instantiate_pre(&component)
        .expect("imports satisfied");
    let mut times = Vec::new();
    for _ in 0..CALLS {
        let start = Instant::now();
        let mut store = Store::new(
            &engine,
            Raw {
                wasi: WasiCtxBuilder::new().build(),
                http: WasiHttpCtx::new(),
                hooks: Refuse,
                table: ResourceTable::new(),
            },
        );
        let instance = pre.instantiate_async(&mut store).await.expect("instance");
        let func = instance
            .get_func(&mut store, function)
            .expect("the export exists");
        let mut results = vec![Val::Bool(false)];
        func.call_async(&mut store, &args, &mut results)
            .await
            .expect("the call succeeds");
        times.push(start.elapsed());
    }
    median(times)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("polyglot: benchmarks run with `cargo bench` or scripts/bench; skipped");
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: [(&str, &str, Value, Vec<Val>); 2] = [
        (
            "textstats",
            "stats",
            json!({"text": "a b a"}),
            vec![Val::String("a b a".into()), Val::Option(None)],
        ),
        (
            "slugify",
            "slugify",
            json!({"title": "A b"}),
            vec![Val::String("A b".into()), Val::Option(None)],
        ),
    ];
    println!(
        "| component | size | first compile | cached load | warden warm call p50 | plain wasmtime fresh instance + call p50 |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, function, args, vals) in cases {
        let path = root().join(format!("target/polyglot/{name}.wasm"));
        if !path.is_file() {
            println!("| {name} | missing: run scripts/build-polyglot | | | | |");
            continue;
        }
        let size = std::fs::metadata(&path).expect("metadata").len();
        let toolbox = dir.path().join(format!("policies-{name}"));
        std::fs::create_dir(&toolbox).expect("toolbox");
        std::fs::write(
            toolbox.join(format!("{name}.toml")),
            format!(
                "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
                path.display().to_string()
            ),
        )
        .expect("policy");
        let artifacts = Artifacts {
            store: dir.path().join("store"),
            cache: dir.path().join(format!("cache-{name}")),
        };
        let protected = [Protected::new("the toolbox", toolbox.clone())];
        let load = |artifacts: Artifacts| {
            let backend = WasmBackend::new(artifacts);
            Toolbox::load(&toolbox, &[&backend], &protected).expect("toolbox loads")
        };
        let start = Instant::now();
        load(artifacts.clone());
        let first = start.elapsed();
        let start = Instant::now();
        let toolbox = load(artifacts);
        let cached = start.elapsed();
        let d = Dispatcher::new(Arc::new(toolbox));
        let call = ToolCall::new("b", function, &args);
        let warm = median(
            (0..CALLS)
                .map(|_| {
                    let start = Instant::now();
                    let m = rt.block_on(d.call(call.clone()));
                    assert!(m.error.is_none(), "{m:?}");
                    start.elapsed()
                })
                .collect(),
        );
        let raw = rt.block_on(raw_floor(&path, function, vals));
        println!(
            "| {name} | {:.1} MB | {:.2} s | {:.1} ms | {:.2} ms | {:.2} ms |",
            size as f64 / 1e6,
            first.as_secs_f64(),
            ms(cached),
            ms(warm),
            ms(raw),
        );
    }
}
