//! `echo hi` per call: a container per call, a session's shell, and `docker run --rm` from
//! the CLI; then a session's start (container and shell, paid by its first command) in the
//! busybox image beside the Debian one, taken in turns. Not a test and not in CI:
//! `cargo bench -p warden-docker --bench latency` (scripts/bench-docker). Prints two markdown
//! tables.
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
use warden_docker::{DEBIAN_IMAGE, DockerBackend, Engine, SANDBOX_IMAGE};

const RUNS: usize = 30;

/// Session starts per image.
const STARTS: usize = 10;

fn policy(dir: &Path, session: bool) -> Dispatcher {
    policy_in(dir, session, SANDBOX_IMAGE)
}

fn policy_in(dir: &Path, session: bool, image: &str) -> Dispatcher {
    let text = format!(
        "[executor]\nkind = \"docker\"\nname = \"sh\"\nimage = \"{image}\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\nsession = {session}\n"
    );
    let name: String = image
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let path = dir.join(format!("sh-{session}-{name}.toml"));
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

/// A fresh session's first `echo hi` (its container and shell start), then its end.
async fn session_start(base: &Dispatcher) -> Result<Duration, String> {
    let d = base.new_session();
    let call = ToolCall::new("start", "sh", &json!({"command": "echo hi"}));
    let start = Instant::now();
    let m = d.call(call).await;
    let took = start.elapsed();
    d.close().await;
    match m.status {
        Status::Success => Ok(took),
        _ => Err(m.content),
    }
}

/// [`STARTS`] session starts in each image, in turns, so that both see the same load.
async fn session_starts(dir: &Path) -> Vec<(&'static str, Result<Vec<Duration>, String>)> {
    let images = [SANDBOX_IMAGE, DEBIAN_IMAGE];
    let bases: Vec<Dispatcher> = images.iter().map(|i| policy_in(dir, true, i)).collect();
    let mut starts: Vec<Result<Vec<Duration>, String>> = vec![Ok(Vec::new()); images.len()];
    // One start each first, not counted: the engine's first use of an image is slower.
    for (base, times) in bases.iter().zip(starts.iter_mut()) {
        if let Err(e) = session_start(base).await {
            *times = Err(e);
        }
    }
    for _ in 0..STARTS {
        for (base, times) in bases.iter().zip(starts.iter_mut()) {
            if let Ok(list) = times {
                match session_start(base).await {
                    Ok(took) => list.push(took),
                    Err(e) => *times = Err(e),
                }
            }
        }
    }
    images.into_iter().zip(starts).collect()
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
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    let starts = rt.block_on(session_starts(dir.path()));
    println!(
        "\n| session start (container + shell + `echo hi`), {STARTS} each, in turns | min | median | p90 |"
    );
    println!("|---|---:|---:|---:|");
    for (image, times) in starts {
        match times {
            Ok(mut times) => {
                let (min, median, p90) = stats(&mut times);
                println!("| {image} | {min:.0} ms | {median:.0} ms | {p90:.0} ms |");
            }
            // The Debian image is built by `warden sandbox-image --debian`.
            Err(e) => println!("| {image} | skipped: {e} | | |"),
        }
    }
}
