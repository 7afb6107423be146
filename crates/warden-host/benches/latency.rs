//! `true` per call: a plain spawn, the same spawn with piped output read to the end (what
//! the executor does around the helper), a call through the host policy, fully confined in a
//! fresh process tree — its sandbox set up on the call's path (no preparation: the path before
//! sandboxes were prepared ahead) and prepared ahead — and a command in a host session (one
//! confined shell for all of them). Then batches of 200 calls: wall and CPU per call at the
//! margin, beside a batch of plain spawns, with one sandbox prepared ahead and with as many
//! as the batch runs at a time. CPU is the machine's (every core, from `/proc/stat`): the
//! helpers are the fork server's children, not this process's, and the kernel's deferred
//! clean-up of namespaces counts too, so run it on a quiet machine.
//! Not a test and not in CI: `cargo bench -p warden-host --bench latency` (scripts/bench-host).
//! Prints markdown tables; the difference of the piped spawn and the per-call policy is the
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

/// How many calls of a batch run at a time: the dispatcher's default.
const BATCH_CONCURRENCY: usize = 16;

/// The helper as cargo builds it (linked dynamically).
fn built_helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper"))
}

/// A dispatcher (one session) over one host tool named `name`, with `executor` lines, which
/// keeps `prepared` sandboxes ahead and starts `helper`.
fn dispatcher(
    dir: &std::path::Path,
    name: &str,
    executor: &str,
    prepared: usize,
    helper: PathBuf,
) -> Dispatcher {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("[executor]\nkind = \"host\"\nname = \"{name}\"\n{executor}\n"),
    )
    .expect("write the policy");
    let backend = HostBackend::new(Helper {
        program: helper,
        args: Vec::new(),
    })
    .prepared(prepared);
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

/// `true` through the host policy, one call after another; `apart` between calls (not
/// counted), the time a model takes between turns.
async fn confined(d: &Dispatcher, apart: Duration) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..=RUNS {
        let call = ToolCall::new(format!("c{i}"), "true", &json!({}));
        tokio::time::sleep(apart).await;
        let start = Instant::now();
        let m = d.call(call).await;
        times.push(start.elapsed());
        assert_eq!(m.status, Status::Success, "{}", m.content);
    }
    times.remove(0);
    times
}

/// CPU time the machine has spent so far, every core and the kernel's own work included.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let ticks: u64 = stat
        .lines()
        .next()
        .expect("the cpu line")
        .split_whitespace()
        .skip(1)
        // user, nice, system, (idle, iowait skipped), irq, softirq
        .enumerate()
        .filter(|(i, _)| ![3, 4].contains(i))
        .take(5)
        .map(|(_, v)| v.parse::<u64>().expect("a tick count"))
        .sum();
    // SAFETY: sysconf reads a constant.
    let per_second = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) } as u64;
    Duration::from_micros(ticks * 1_000_000 / per_second)
}

/// Wall and CPU per call of one batch of `RUNS` calls of `true`, after one call to warm up
/// (and time to make up the tool's prepared sandboxes, when it keeps some).
async fn batch(d: &Dispatcher) -> (Duration, Duration) {
    let m = d.call(ToolCall::new("warm", "true", &json!({}))).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = (0..RUNS)
        .map(|i| ToolCall::new(format!("b{i}"), "true", &json!({})))
        .collect();
    let (start, cpu0) = (Instant::now(), cpu());
    let answers = d.dispatch(calls).await;
    let (wall, used) = (start.elapsed(), cpu() - cpu0);
    for m in answers {
        assert_eq!(m.status, Status::Success, "{}", m.content);
    }
    (wall / RUNS as u32, used / RUNS as u32)
}

/// The floor of a batch: `RUNS` piped spawns of `/bin/true`, 16 at a time (the dispatcher's
/// default concurrency).
async fn spawns_batch() -> (Duration, Duration) {
    let gate = Arc::new(tokio::sync::Semaphore::new(BATCH_CONCURRENCY));
    let (start, cpu0) = (Instant::now(), cpu());
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..RUNS {
        let gate = gate.clone();
        set.spawn(async move {
            let _permit = gate.acquire().await.expect("open");
            tokio::process::Command::new("/bin/true")
                .env_clear()
                .stdin(Stdio::null())
                .output()
                .await
                .expect("true runs")
        });
    }
    while let Some(out) = set.join_next().await {
        assert!(out.expect("joined").status.success());
    }
    let (wall, used) = (start.elapsed(), cpu() - cpu0);
    (wall / RUNS as u32, used / RUNS as u32)
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
    let argv = "argv = [\"/bin/true\"]";
    let cold = dispatcher(dir.path(), "true", argv, 0, built_helper());
    let ahead = dispatcher(
        dir.path(),
        "true",
        argv,
        warden_host::DEFAULT_PREPARED,
        built_helper(),
    );
    // As many prepared as a batch runs at a time.
    let deep = dispatcher(dir.path(), "true", argv, BATCH_CONCURRENCY, built_helper());
    let s = dispatcher(
        dir.path(),
        "sh",
        "argv = [\"/bin/sh\", \"-c\", \"{command}\"]\nsession = true",
        0,
        built_helper(),
    );
    let apart = Duration::from_millis(10);
    let mut plain = plain();
    let (
        mut piped,
        mut before,
        mut prepared,
        mut back_to_back,
        (start, mut builtin),
        (_, mut program),
    ) = rt.block_on(async {
        (
            piped().await,
            confined(&cold, apart).await,
            confined(&ahead, apart).await,
            confined(&ahead, Duration::ZERO).await,
            session(&s, "true").await,
            // The same dispatcher: closed above, so this is a fresh session.
            session(&s, "/bin/true").await,
        )
    });
    let (floor, batch_before, batch_ahead, batch_deep) = rt.block_on(async {
        (
            spawns_batch().await,
            batch(&cold).await,
            batch(&ahead).await,
            batch(&deep).await,
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
            "warden host policy, sandbox set up on the call's path (no preparation), calls 10 ms apart",
            &mut before,
        ),
        (
            "warden host policy, sandbox prepared ahead, calls 10 ms apart",
            &mut prepared,
        ),
        (
            "warden host policy, sandbox prepared ahead, calls back to back",
            &mut back_to_back,
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
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("\n| batch of {RUNS} `true`, 16 at a time | wall per call | CPU per call |");
    println!("|---|---:|---:|");
    for (name, (wall, used)) in [
        ("piped spawns of `/bin/true` (the floor)", floor),
        ("warden host policy, no preparation", batch_before),
        ("warden host policy, sandboxes prepared ahead", batch_ahead),
        (
            "warden host policy, 16 sandboxes prepared ahead",
            batch_deep,
        ),
    ] {
        println!("| {name} | {:.0} µs | {:.0} µs |", us(wall), us(used));
    }
    println!(
        "\nThe confinement costs {:.0} µs per call set up on the call's path, {:.0} µs prepared \
         ahead (median, host policy minus piped spawn). Starting the session's shell (its first \
         command): {:.0} µs. Load average {} on {} cores.",
        medians[2] - medians[1],
        medians[3] - medians[1],
        us(start),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
            .unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
}
