//! `true` per call: a plain spawn, the same spawn with piped output read to the end (what
//! the executor does around the helper), a call through the host policy, fully confined in a
//! fresh process tree, and a command in a host session (one confined shell for all of them).
//! Not a test and not in CI: `cargo bench -p warden-host --bench latency` (scripts/bench-host).
//! Prints one markdown table; the difference of the piped spawn and the per-call policy is the
//! confinement's cost, the session row what a command costs once the shell runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Dispatcher, Policy, Status, ToolCall, Toolbox};
use warden_host::{Helper, HostBackend};

const RUNS: usize = 200;

/// A dispatcher (one session) over one host tool named `name`, with `executor` lines.
fn dispatcher(dir: &std::path::Path, name: &str, executor: &str) -> Dispatcher {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("[executor]\nkind = \"host\"\nname = \"{name}\"\n{executor}\n"),
    )
    .expect("write the policy");
    let backend = HostBackend::new(Helper {
        program: PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper")),
        args: Vec::new(),
    });
    let policy = Policy::load(&path, &[&backend]).expect("the policy loads");
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[&backend])
        .expect("the tool loads");
    Dispatcher::new(Arc::new(toolbox))
}

fn plain() -> Vec<Duration> {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let status = std::process::Command::new("/bin/true")
                .status()
                .expect("true runs");
            assert!(status.success());
            start.elapsed()
        })
        .collect()
}

async fn piped() -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let out = tokio::process::Command::new("/bin/true")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .expect("true runs");
        assert!(out.status.success());
        times.push(start.elapsed());
    }
    times
}

async fn confined(d: &Dispatcher) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..=RUNS {
        let call = ToolCall::new(format!("c{i}"), "true", &json!({}));
        let start = Instant::now();
        let m = d.call(call).await;
        times.push(start.elapsed());
        assert_eq!(m.status, Status::Success, "{}", m.content);
    }
    times.remove(0);
    times
}

/// `command` in one session's shell: the first command (which starts the shell) apart.
async fn session(d: &Dispatcher, command: &str) -> (Duration, Vec<Duration>) {
    let mut times = Vec::new();
    for i in 0..=RUNS {
        let call = ToolCall::new(format!("s{i}"), "sh", &json!({ "command": command }));
        let start = Instant::now();
        let m = d.call(call).await;
        times.push(start.elapsed());
        assert_eq!(m.status, Status::Success, "{}", m.content);
        assert!(!m.content.contains("fresh shell"), "{}", m.content);
    }
    d.close().await;
    let first = times.remove(0);
    (first, times)
}

fn stats(times: &mut [Duration]) -> (f64, f64, f64) {
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let p90 = times[(times.len() * 9).div_ceil(10).saturating_sub(1)];
    (us(times[0]), us(times[times.len() / 2]), us(p90))
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dispatcher(dir.path(), "true", "argv = [\"/bin/true\"]");
    let s = dispatcher(
        dir.path(),
        "sh",
        "argv = [\"/bin/sh\", \"-c\", \"{command}\"]\nsession = true",
    );
    let mut plain = plain();
    let (mut piped, mut confined, (start, mut builtin), (_, mut program)) = rt.block_on(async {
        (
            piped().await,
            confined(&d).await,
            session(&s, "true").await,
            // The same dispatcher: closed above, so this is a fresh session.
            session(&s, "/bin/true").await,
        )
    });
    println!("\n| `true`, {RUNS} runs | min | median | p90 |");
    println!("|---|---:|---:|---:|");
    let mut medians = Vec::new();
    for (name, times) in [
        ("plain spawn (`std::process::Command::status`)", &mut plain),
        (
            "spawn with piped output read to the end (tokio)",
            &mut piped,
        ),
        (
            "warden host policy: helper, namespaces, rlimits, landlock",
            &mut confined,
        ),
        (
            "warden host session: `true` (a builtin) in the session's confined shell",
            &mut builtin,
        ),
        (
            "warden host session: `/bin/true` (fork and exec) in the session's shell",
            &mut program,
        ),
    ] {
        let (min, median, p90) = stats(times);
        medians.push(median);
        println!("| {name} | {min:.0} µs | {median:.0} µs | {p90:.0} µs |");
    }
    println!(
        "\nThe confinement costs {:.0} µs per call (median, host policy minus piped spawn). \
         Starting the session's shell (its first command): {:.0} µs. \
         Load average {} on {} cores.",
        medians[2] - medians[1],
        start.as_secs_f64() * 1e6,
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
            .unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
