//! The gate's cost, measured by curl inside one confined host process: a request through the
//! gate (absolute-form HTTP), the first byte through a CONNECT tunnel, and the same request
//! straight to the server from a sandbox with `network = "unrestricted"` (the floor). The
//! server is on this machine's loopback. Not a test and not in CI:
//! `cargo bench -p warden-host --bench gate` (scripts/bench-host). Prints one markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use warden_core::{Dispatcher, Policy, ToolCall, Toolbox};
use warden_host::{Helper, HostBackend};
use warden_net::Resolver;
use warden_test_support::servers::HttpServer;

const RUNS: usize = 200;

fn dispatcher(dir: &std::path::Path, name: &str, extra: &str, net: &str) -> Dispatcher {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[executor]\nkind = \"host\"\nname = \"{name}\"\nargv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n\
             cpu_time = \"120s\"\n{extra}\n[grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\nnet = {net}\n\
             [limits]\ntimeout = \"120s\"\nmemory = \"1GiB\"\n"
        ),
    )
    .expect("write the policy");
    let backend = HostBackend::new(Helper {
        program: PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper")),
        args: Vec::new(),
    })
    .resolver(Resolver::with_overrides(["api.test:127.0.0.1"]).expect("override"));
    let policy = Policy::load(&path, &[&backend]).expect("the policy loads");
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[&backend])
        .expect("the tool loads");
    Dispatcher::new(Arc::new(toolbox))
}

/// Medians in ms of curl's `time_total` and `time_starttransfer` over RUNS requests.
async fn curl(d: &Dispatcher, tool: &str, args: &str) -> (f64, f64) {
    let command = format!(
        "i=0; while [ $i -lt {RUNS} ]; do curl -s -o /dev/null -w '%{{time_total}} %{{time_starttransfer}}\\n' {args}; i=$((i+1)); done"
    );
    let m = d
        .call(ToolCall::new("c", tool, &json!({ "command": command })))
        .await;
    let mut total = Vec::new();
    let mut first = Vec::new();
    for line in m.content.lines() {
        let mut parts = line.split_whitespace();
        if let (Some(Ok(t)), Some(Ok(f))) = (
            parts.next().map(str::parse::<f64>),
            parts.next().map(str::parse::<f64>),
        ) {
            total.push(t * 1000.0);
            first.push(f * 1000.0);
        }
    }
    assert!(total.len() == RUNS, "{}", m.content);
    (median(&mut total), median(&mut first))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let server = HttpServer::start();
        let port = server.port;
        let dir = tempfile::tempdir().expect("a temp dir");
        let gated = dispatcher(
            dir.path(),
            "gated",
            "",
            &format!("[\"api.test:{port}\", \"127.0.0.1:{port}\"]"),
        );
        let open = dispatcher(dir.path(), "open", "network = \"unrestricted\"", "[]");
        let url = format!("http://api.test:{port}/");
        let direct = curl(&open, "open", &format!("http://127.0.0.1:{port}/")).await;
        let proxied = curl(&gated, "gated", &url).await;
        let tunnel = curl(&gated, "gated", &format!("-p {url}")).await;
        println!(
            "| {RUNS} requests from one sandbox (curl) | total, median | first byte, median |"
        );
        println!("|---|---|---|");
        for (what, (total, first)) in [
            ("direct, `network = \"unrestricted\"` (floor)", direct),
            ("through the gate (absolute-form HTTP)", proxied),
            ("through a CONNECT tunnel", tunnel),
        ] {
            println!("| {what} | {total:.3} ms | {first:.3} ms |");
        }
    });
}
