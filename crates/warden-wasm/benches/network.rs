//! What the network gate costs: one HTTP GET to a server on 127.0.0.1, sent by the host
//! directly, by a tool through warden's checked path, and refused by the policy.
//!
//! Run with `cargo bench -p warden-wasm --bench network` (scripts/bench runs it):
//!
//! - `direct_tcp_get`: the host itself writes a GET on a fresh connection and reads the
//!   answer: the floor of one request on loopback.
//! - `tool_get_granted`: `netprobe.http` through the dispatcher: a fresh sandbox, the grant
//!   check, resolving and vetting, a fresh connection, hyper, the capped body.
//! - `tool_get_denied`: the same tool asking for a port it is not granted: the cost of a
//!   refusal, recorded as a denial.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use criterion::{Criterion, criterion_group};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{Dispatcher, Protected, ToolCall, Toolbox};
use warden_wasm::{Artifacts, WasmBackend};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// A server answering every connection with one small response.
fn serve() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    port
}

fn direct_get(port: u16) -> usize {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("read");
    answer.len()
}

fn dispatcher(dir: &Path, port: u16) -> Dispatcher {
    let wasm = root().join("target/wasm32-wasip2/release/netprobe.wasm");
    assert!(wasm.is_file(), "build guest-sdk first (scripts/bench does)");
    let toolbox = dir.join("policies");
    std::fs::create_dir(&toolbox).expect("toolbox");
    std::fs::write(
        toolbox.join("netprobe.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\nnet = [\"127.0.0.1:{port}\"]\n",
            wasm.display().to_string()
        ),
    )
    .expect("policy");
    let artifacts = Artifacts {
        store: dir.join("store"),
        cache: root().join("target/warden-bench-cache"),
    };
    let protected = [Protected::new("the toolbox", toolbox.clone())];
    let backend = WasmBackend::new(artifacts);
    let toolbox = Toolbox::load(&toolbox, &[&backend], &protected).expect("toolbox loads");
    Dispatcher::new(Arc::new(toolbox))
}

fn network(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let tmp = tempfile::tempdir().expect("temp dir");
    let port = serve();
    let d = dispatcher(tmp.path(), port);
    let get = |p: u16| {
        let args = json!({"method": "GET", "url": format!("http://127.0.0.1:{p}/"), "headers": []});
        ToolCall::new("b", "http", &args)
    };
    let mut group = c.benchmark_group("network");
    group.bench_function("direct_tcp_get", |b| b.iter(|| direct_get(port)));
    group.bench_function("tool_get_granted", |b| {
        b.iter(|| {
            let m = rt.block_on(d.call(get(port)));
            assert!(m.error.is_none(), "{m:?}");
        })
    });
    group.bench_function("tool_get_denied", |b| {
        b.iter(|| {
            let m = rt.block_on(d.call(get(port.wrapping_add(1))));
            assert!(m.error.is_some(), "{m:?}");
        })
    });
    group.finish();
}

criterion_group!(benches, network);

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("network: benchmarks run with `cargo bench` or scripts/bench; skipped");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
