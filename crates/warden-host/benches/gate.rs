//! The gate's cost, measured by curl inside one confined host process: a request through the
//! gate (absolute-form HTTP), the first byte through a CONNECT tunnel, and the same request
//! straight to the server from a sandbox with `network = "unrestricted"` (the floor); then an
//! HTTPS request through a plain tunnel beside one the gate intercepts to add a credential.
//! The servers are on this machine's loopback. Not a test and not in CI:
//! `cargo bench -p warden-host --bench gate` (scripts/bench-host). Prints one markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{Dispatcher, Policy, ToolCall, Toolbox};
use warden_host::{Helper, HostBackend};
use warden_net::{Egress, Resolver};
use warden_test_support::servers::{HttpServer, TlsServer};

const RUNS: usize = 200;
const TOKEN_VAR: &str = "WARDEN_BENCH_TOKEN";

/// One host tool `name` with `grants`; warden also trusts `roots` upstream.
fn dispatcher(
    dir: &Path,
    name: &str,
    extra: &str,
    grants: &str,
    roots: Option<&str>,
) -> Dispatcher {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[executor]\nkind = \"host\"\nname = \"{name}\"\nargv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n\
             cpu_time = \"120s\"\n{extra}\n[grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n{grants}\n\
             [limits]\ntimeout = \"120s\"\nmemory = \"1GiB\"\n"
        ),
    )
    .expect("write the policy");
    let resolver = Resolver::with_overrides(["api.test:127.0.0.1"]).expect("override");
    let egress = match roots {
        Some(pem) => Egress::new(resolver)
            .with_roots_pem(pem.as_bytes())
            .expect("PEM"),
        None => Egress::new(resolver),
    };
    let backend = HostBackend::new(Helper {
        program: PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper")),
        args: Vec::new(),
    })
    .egress(egress);
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
        "i=0; while [ $i -lt {RUNS} ]; do curl -sS -o /dev/null -w '%{{time_total}} %{{time_starttransfer}}\\n' {args}; i=$((i+1)); done"
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
    // SAFETY: set before the runtime and its threads start.
    unsafe { std::env::set_var(TOKEN_VAR, "bench-token") };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let server = HttpServer::start();
        let port = server.port;
        let tls = TlsServer::start(&["api.test"]);
        let t = tls.port;
        let dir = tempfile::tempdir().expect("a temp dir");
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).expect("a folder");
        std::fs::write(certs.join("ca.pem"), &tls.ca_pem).expect("the CA");
        // What an intercepted sandbox's bundle holds: this machine's roots, then one CA.
        let system = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
        std::fs::write(certs.join("bundle.pem"), format!("{system}{}", tls.ca_pem)).expect("a bundle");
        let gated = dispatcher(
            dir.path(),
            "gated",
            "",
            &format!(
                "net = [\"api.test:{port}\", \"127.0.0.1:{port}\", \"api.test:{t}\", \"127.0.0.1:{t}\"]\n\
                 fs = [{{ host = \"{}\", access = \"read-only\" }}]",
                certs.display()
            ),
            None,
        );
        let credential = dispatcher(
            dir.path(),
            "credential",
            "",
            &format!(
                "net = [\"api.test:{t}\", \"127.0.0.1:{t}\"]\nnet_credentials = [{{ host = \"api.test\", \
                 header = \"Authorization\", from_host = \"{TOKEN_VAR}\" }}]\ncredential_host_shared = true"
            ),
            Some(&tls.ca_pem),
        );
        let open = dispatcher(dir.path(), "open", "network = \"unrestricted\"", "", None);
        let url = format!("http://api.test:{port}/");
        let https = format!("https://api.test:{t}/");
        let cacert = certs.join("ca.pem").display().to_string();
        let direct = curl(&open, "open", &format!("http://127.0.0.1:{port}/")).await;
        let proxied = curl(&gated, "gated", &url).await;
        let tunnel = curl(&gated, "gated", &format!("-p {url}")).await;
        let plain_tls = curl(&gated, "gated", &format!("--cacert {cacert} {https}")).await;
        let bundle = certs.join("bundle.pem").display().to_string();
        let plain_bundle = curl(&gated, "gated", &format!("--cacert {bundle} {https}")).await;
        let intercepted = curl(&credential, "credential", &https).await;
        println!("| {RUNS} requests from one sandbox (curl) | total, median | first byte, median |");
        println!("|---|---|---|");
        for (what, (total, first)) in [
            ("HTTP direct, `network = \"unrestricted\"` (floor)", direct),
            ("HTTP through the gate (absolute-form)", proxied),
            ("HTTP through a CONNECT tunnel", tunnel),
            ("HTTPS through a plain CONNECT tunnel (end to end), curl trusting one CA", plain_tls),
            ("the same, curl loading this machine's roots too (as an intercepted sandbox does)", plain_bundle),
            ("HTTPS intercepted to add a credential (two TLS sessions)", intercepted),
        ] {
            println!("| {what} | {total:.3} ms | {first:.3} ms |");
        }
    });
}
