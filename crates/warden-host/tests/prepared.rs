//! Sandboxes prepared ahead: each serves one call and is never reused, a call's deadline
//! counts from the call, and a dropped tool leaves no helper behind.

use crate::common::{Place, backend, call, shell, text};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The helpers of this test process that still run (the children of its fork server, the
/// helper program it started), each with its `init` (the helper's child in the new
/// namespaces) once it has one.
fn helpers() -> Vec<(u32, Option<u32>)> {
    fork_servers()
        .into_iter()
        .flat_map(children_of)
        .map(|pid| (pid, children_of(pid).first().copied()))
        .collect()
}

/// The fork servers this test process started: its children running the helper program.
fn fork_servers() -> Vec<u32> {
    let program = PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper"));
    children_of(std::process::id())
        .into_iter()
        .filter(|&pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == program))
        .collect()
}

/// Live (not zombie) children of `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces, so read after its last ')'.
        let mut fields = stat[stat.rfind(')').unwrap() + 1..].split_whitespace();
        let (state, ppid) = (fields.next(), fields.next());
        if state != Some("Z") && ppid == Some(parent.to_string().as_str()) {
            out.push(pid);
        }
    }
    out
}

/// Waits until a prepared sandbox is set up (its `init` waits for a call): its helper and
/// `init`.
fn a_prepared_sandbox() -> (u32, u32) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((helper, Some(init))) = helpers().into_iter().next() {
            return (helper, init);
        }
        assert!(Instant::now() < until, "no sandbox was prepared");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The first line the model reads (stdout comes first).
fn first_line(r: &Result<warden_core::Output, warden_core::ToolError>) -> String {
    text(r).lines().next().unwrap_or_default().to_owned()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
}

#[tokio::test]
async fn consecutive_calls_never_share_a_sandbox() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    // The first call sets its sandbox up on its path and has the next one prepared.
    let mut networks = Vec::new();
    for i in 0..4 {
        let namespace = if i > 0 {
            let (helper, init) = a_prepared_sandbox();
            let net = std::fs::read_link(format!("/proc/{init}/ns/net")).unwrap();
            Some((helper, init, net))
        } else {
            None
        };
        let r = call(
            &tool,
            &limits,
            json!({"command": "ls -A /tmp; echo mark > /tmp/mark; ipcmk -Q >/dev/null; \
                   ipcs -q | grep -c '^0x' || true"}),
        )
        .await;
        // Nothing of the call before: no file in /tmp, no message queue; this call's own
        // queue is the only one.
        assert_eq!(first_line(&r), "1", "call {i}: {}", text(&r));
        if let Some((helper, init, net)) = namespace {
            // The prepared sandbox served this call and is gone with it.
            assert!(!alive(init) && !alive(helper), "call {i} left its sandbox");
            networks.push(net);
        }
    }
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut distinct = networks.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), networks.len(), "{networks:?}");
    assert!(!networks.contains(&own), "{networks:?}");
}

#[tokio::test]
async fn a_deadline_counts_from_the_call_not_from_the_preparation() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", "timeout = \"1s\""));
    let r = call(&tool, &limits, json!({"command": "echo first"})).await;
    assert_eq!(first_line(&r), "first");
    let (helper, init) = a_prepared_sandbox();
    // Idle far longer than the call's timeout and the helper's own alarm (timeout + 2 s).
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        alive(helper) && alive(init),
        "the idle prepared sandbox died"
    );
    let r = call(&tool, &limits, json!({"command": "echo second"})).await;
    assert_eq!(first_line(&r), "second", "{}", text(&r));
    assert!(!alive(init), "the call did not take the prepared sandbox");
    // And the deadline still holds for a call in a prepared sandbox.
    a_prepared_sandbox();
    let start = Instant::now();
    let r = call(&tool, &limits, json!({"command": "sleep 30"})).await;
    assert!(text(&r).starts_with("timeout"), "{}", text(&r));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_dropped_tool_leaves_no_helper_behind() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    let r = call(&tool, &limits, json!({"command": "true"})).await;
    assert!(r.is_ok(), "{}", text(&r));
    let (helper, init) = a_prepared_sandbox();
    drop(tool);
    let until = Instant::now() + Duration::from_secs(10);
    while !helpers().is_empty() || alive(helper) || alive(init) {
        assert!(Instant::now() < until, "left behind: {:?}", helpers());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_fork_server_killed_takes_its_sandboxes_along_and_is_started_again() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    let r = call(&tool, &limits, json!({"command": "echo first"})).await;
    assert_eq!(first_line(&r), "first");
    let (helper, init) = a_prepared_sandbox();
    let servers = fork_servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    let killed = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(servers[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    killed.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while alive(helper) || alive(init) {
        assert!(
            Instant::now() < until,
            "the prepared sandbox outlived its fork server"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 0..2 {
        let r = call(&tool, &limits, json!({"command": "echo again"})).await;
        assert_eq!(first_line(&r), "again", "call {i}: {}", text(&r));
    }
    let now = fork_servers();
    assert!(now.len() == 1 && now != servers, "{servers:?} then {now:?}");
}

#[tokio::test]
async fn no_preparation_keeps_no_helper_waiting() {
    let place = Place::new();
    let (tool, limits) = place.tool_on(&shell("", "", ""), backend().prepared(0));
    for _ in 0..2 {
        let r = call(&tool, &limits, json!({"command": "echo hi"})).await;
        assert_eq!(first_line(&r), "hi");
    }
    assert!(helpers().is_empty(), "{:?}", helpers());
}

#[tokio::test]
async fn a_changed_policy_never_takes_a_sandbox_prepared_for_the_old_one() {
    let place = Place::new();
    let (old, limits) = place.tool(&shell("user = \"65534:65534\"", "", ""));
    let r = call(&old, &limits, json!({"command": "id -u"})).await;
    assert_eq!(first_line(&r), "65534");
    a_prepared_sandbox();
    // The same file, changed, loaded again (as a reload does) while the old tool's sandbox
    // waits: the new tool's calls run as the new policy says.
    let (new, limits) = place.tool(&shell("user = \"1000:1000\"", "", ""));
    for _ in 0..3 {
        let r = call(&new, &limits, json!({"command": "id -u"})).await;
        assert_eq!(first_line(&r), "1000", "{}", text(&r));
    }
}
