//! `echo hi` per call: a container per call, a session's shell, and `docker run --rm` from
//! the CLI. Not a test and not in CI: `cargo bench -p warden-docker --bench latency`
//! (scripts/bench-docker). Prints one markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Dispatcher, Policy, Status, ToolCall, Toolbox};
use warden_docker::{DockerBackend, Engine, SANDBOX_IMAGE};

const RUNS: usize = 30;

fn policy(dir: &Path, session: bool) -> Dispatcher {
    let text = format!(
        "[executor]\nkind = \"docker\"\nname = \"sh\"\nimage = \"{SANDBOX_IMAGE}\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\nsession = {session}\n"
    );
    let path = dir.join(format!("sh-{session}.toml"));
    std::fs::write(&path, text).expect("write the policy");
    let backend = DockerBackend::new(Engine::from_env().label("warden.bench", "1"));
    let policy = Policy::load(&path, &[&backend]).expect("the policy loads");
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[&backend])
        .expect("the tool loads");
    Dispatcher::new(Arc::new(toolbox))
}

async fn time_calls(d: &Dispatcher) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..=RUNS {
        let call = ToolCall::new(format!("c{i}"), "sh", &json!({"command": "echo hi"}));
        let start = Instant::now();
        let m = d.call(call).await;
        let took = start.elapsed();
        assert_eq!(m.status, Status::Success, "{}", m.content);
        // The first session call starts the container: reported apart.
        times.push(took);
    }
    times
}

fn time_cli() -> Vec<Duration> {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let out = std::process::Command::new("docker")
                .args([
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "--log-driver",
                    "none",
                    "--read-only",
                    "--cap-drop",
                    "ALL",
                    "--user",
                    "65534:65534",
                    SANDBOX_IMAGE,
                    "echo",
                    "hi",
                ])
                .output()
                .expect("the docker CLI runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            start.elapsed()
        })
        .collect()
}

fn stats(times: &mut [Duration]) -> (f64, f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p90 = times[(times.len() * 9).div_ceil(10).saturating_sub(1)];
    (ms(times[0]), ms(times[times.len() / 2]), ms(p90))
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let (mut per_call, mut session, first) = rt.block_on(async {
        let per_call = time_calls(&policy(dir.path(), false)).await;
        let d = policy(dir.path(), true);
        let mut session = time_calls(&d).await;
        let first = session.remove(0);
        d.close().await;
        (per_call, session, first)
    });
    per_call.remove(0);
    let mut cli = time_cli();
    println!("\n| `echo hi`, {RUNS} runs | min | median | p90 |");
    println!("|---|---:|---:|---:|");
    for (name, times) in [
        ("warden, a container per call", &mut per_call),
        ("warden, session mode (one shell per session)", &mut session),
        ("`docker run --rm` from the CLI", &mut cli),
    ] {
        let (min, median, p90) = stats(times);
        println!("| {name} | {min:.1} ms | {median:.1} ms | {p90:.1} ms |");
    }
    println!(
        "\nSession start (container + shell, first call): {:.1} ms. Load average {:.2} on {} cores.",
        first.as_secs_f64() * 1000.0,
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok()))
            .unwrap_or(0.0),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
