//! A session's `echo hi` on an engine elsewhere beside this machine's: the second engine of
//! the tests (`dockerd` in namespaces of its own, on a loopback TCP port with mutual TLS,
//! reached through the tests' forwarder) and the local unix socket, taken in turns; then a
//! session's start (container and shell, paid by its first command) on each. Not a test and
//! not in CI: `cargo bench -p warden-docker --bench remote` (scripts/bench-docker), as root.
//! Prints a markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

// The tests' second engine, shared with this bench.
#[path = "../tests/common/second_engine.rs"]
#[allow(dead_code, reason = "the tests use more of it than the bench")]
mod second_engine;

use second_engine::SecondEngine;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Dispatcher, Policy, Status, ToolCall, Toolbox};
use warden_docker::{DockerBackend, Engine, SANDBOX_IMAGE};

/// Rounds of commands, each engine in turn.
const ROUNDS: usize = 5;
/// Commands per session and round.
const COMMANDS: usize = 20;

/// A session tool on `backend`'s engine; each dispatcher holds sessions of its own.
fn session(dir: &Path, name: &str, backend: &DockerBackend) -> Dispatcher {
    let text = format!(
        "[executor]\nkind = \"docker\"\nname = \"sh\"\nimage = \"{SANDBOX_IMAGE}\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\nsession = true\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write the policy");
    let policy = Policy::load(&path, &[backend]).expect("the policy loads");
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[backend])
        .expect("the tool loads");
    Dispatcher::new(Arc::new(toolbox))
}

async fn echo(d: &Dispatcher) -> Duration {
    let call = ToolCall::new("c", "sh", &json!({"command": "echo hi"}));
    let start = Instant::now();
    let m = d.call(call).await;
    let took = start.elapsed();
    assert_eq!(m.status, Status::Success, "{}", m.content);
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and 90th percentile.
fn spread(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let at = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
    (at(0.5), at(0.9))
}

#[tokio::main]
async fn main() {
    let second = SecondEngine::get().expect("the second engine runs here (as root)");
    let certs = second.certs().good;
    let dir = tempfile::tempdir().expect("a temp dir");
    // One warden instance per engine: its first session pays the first contact (TLS, the
    // version, reaping, the lease marker), reported apart from the later starts.
    let backends = [
        DockerBackend::new(Engine::from_env().label("warden.bench", "1")),
        DockerBackend::new(second.engine(&certs).label("warden.bench", "1")),
    ];
    let mut commands = [Vec::new(), Vec::new()];
    let mut starts = [Vec::new(), Vec::new()];
    let mut first = [Duration::ZERO; 2];
    for round in 0..=ROUNDS {
        for (i, name) in ["local", "remote"].into_iter().enumerate() {
            let d = session(dir.path(), name, &backends[i]);
            let start = echo(&d).await;
            match round {
                0 => first[i] = start,
                _ => starts[i].push(start),
            }
            for _ in 0..COMMANDS {
                commands[i].push(echo(&d).await);
            }
            d.close().await;
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\n| session, `echo hi` | this machine's engine (unix socket) | engine elsewhere (tcp, mutual TLS) |"
    );
    println!("|---|---|---|");
    let [local, remote] = commands.map(spread);
    println!(
        "| a command, median / p90 ({} each) | {:.2} / {:.2} ms | {:.2} / {:.2} ms |",
        (ROUNDS + 1) * COMMANDS,
        local.0,
        local.1,
        remote.0,
        remote.1
    );
    let [local, remote] = starts.map(spread);
    println!(
        "| the session's start (its first command), median / p90 ({ROUNDS} each) | {:.1} / {:.1} ms | {:.1} / {:.1} ms |",
        local.0, local.1, remote.0, remote.1
    );
    println!(
        "| the first session's start (first contact of the instance) | {:.1} ms | {:.1} ms |",
        ms(first[0]),
        ms(first[1])
    );
    println!(
        "\nload average before the table: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
