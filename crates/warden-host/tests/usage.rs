//! What a host call used comes back with it: CPU time and the largest resident set of every
//! process the command ran (as `init` reaped them); a session's command, its CPU, and its
//! memory peak where warden can make the session a cgroup. Real confined processes.

use crate::common::*;
use serde_json::json;
use warden_core::{ErrorKind, SessionId};

/// Half a second of CPU, however loaded the machine (the sandbox has no `/proc` to count in).
const HALF_A_SECOND_OF_CPU: &str = "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint(\"spun\")'";

#[tokio::test]
async fn cpu_time_and_peak_memory_are_measured_per_call() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", "memory = \"1GiB\""));
    // tail keeps its one 50 MB line in memory; a child of a child counts too.
    let (r, _, usage) = call_metered(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": "head -c 50000000 /dev/zero | tail -n 1 | wc -c" }),
    )
    .await;
    assert!(text(&r).contains("50000000"), "{}", text(&r));
    let peak = usage.peak_memory_bytes.unwrap();
    assert!(peak >= 50_000_000, "{usage:?}");

    let (r, _, usage) = call_metered(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": HALF_A_SECOND_OF_CPU }),
    )
    .await;
    assert!(text(&r).contains("spun"), "{}", text(&r));
    let cpu = usage.cpu_ms.unwrap();
    assert!((450.0..3000.0).contains(&cpu), "{usage:?}");
    // A small command stays small: the figures are this call's, not the machine's.
    let (_, _, usage) = call_metered(
        &tool,
        &limits,
        SessionId::fresh(),
        json!({ "command": "true" }),
    )
    .await;
    assert!(usage.cpu_ms.unwrap() < 100.0, "{usage:?}");
    assert!(usage.peak_memory_bytes.unwrap() < 50_000_000, "{usage:?}");
}

#[tokio::test]
async fn each_command_of_a_session_reports_its_own_cpu_and_memory_peak() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("session = true", "", "memory = \"1GiB\""));
    let session = SessionId::fresh();
    let run = |command: &str, timeout: u64| {
        let args = json!({ "command": command, "timeout": timeout });
        call_metered(&tool, &limits, session, args)
    };
    // A memory peak per command needs a cgroup of the session's own; without one, no figure
    // per command could be honest (see the host session's docs).
    let cgroups = warden_command::cgroup::Owned::create().is_some();
    let (r, _, usage) = run("head -c 50000000 /dev/zero | tail -n 1 | wc -c", 20).await;
    assert!(text(&r).contains("50000000"), "{}", text(&r));
    if cgroups {
        assert!(usage.peak_memory_bytes.unwrap() >= 50_000_000, "{usage:?}");
    } else {
        assert_eq!(usage.peak_memory_bytes, None, "{usage:?}");
    }
    let (r, _, usage) = run(HALF_A_SECOND_OF_CPU, 20).await;
    assert!(text(&r).contains("spun"), "{}", text(&r));
    let cpu = usage.cpu_ms.unwrap();
    assert!((450.0..3000.0).contains(&cpu), "{usage:?}");
    let (_, _, usage) = run("true", 20).await;
    assert!(usage.cpu_ms.unwrap() < 100.0, "{usage:?}");
    // Each command's peak starts anew.
    if cgroups {
        assert!(usage.peak_memory_bytes.unwrap() < 50_000_000, "{usage:?}");
    }
    // A failing command and a timed-out one report theirs too.
    let (r, _, usage) = run("(exit 3)", 20).await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::ExitStatus);
    assert!(usage.cpu_ms.unwrap() < 100.0, "{usage:?}");
    let (r, _, usage) = run("while :; do :; done", 1).await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Timeout);
    assert!(usage.cpu_ms.unwrap() > 100.0, "{usage:?}");
}
