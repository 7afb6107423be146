//! Warm pools (`pool = N`): containers started ahead of their calls, each used by one call
//! (or one session) and removed after, refilled in the background, a dead one never used, and
//! all of them gone when the toolbox is. Which container ran a command is read inside it:
//! its id is in the paths of the files the engine mounts into it.

use crate::common::*;
use bollard::query_parameters::KillContainerOptions;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use warden_core::{Dispatcher, Status, ToolCall};

/// Prints the id of the container it runs in.
const WHICH: &str =
    "grep -o 'containers/[0-9a-f]\\{64\\}' /proc/self/mountinfo | head -n 1 | cut -d/ -f2";

/// The harness's pooled containers that are running and waiting.
async fn waiting(h: &Harness) -> HashSet<String> {
    let docker = h.engine().client().await.expect("engine");
    let label = h.test_label();
    let filters = HashMap::from([
        ("label", vec![label.as_str(), "warden.mode=pool"]),
        ("status", vec!["running"]),
    ]);
    listed(&docker, &filters).await.into_iter().collect()
}

/// Waits until `n` pooled containers wait (the engine starts one in about 0.1–0.3 s), and
/// then a moment more: the engine shows a container running before warden has bound its gate
/// and put it in the pool.
async fn filled(h: &Harness, n: usize) -> HashSet<String> {
    for _ in 0..300 {
        let now = waiting(h).await;
        if now.len() >= n {
            tokio::time::sleep(Duration::from_millis(500)).await;
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the pool never held {n} containers: {:?}", waiting(h).await);
}

/// A dispatcher over a pooled shell tool, warmed as `warden serve` warms it.
fn warmed(h: &Harness, executor: &str) -> Dispatcher {
    let d = h.dispatcher(
        "sh",
        &h.shell_policy(executor, "", "timeout = \"30s\"\nconcurrency = 8"),
    );
    d.toolbox().warm();
    d
}

/// The container a call's command ran in, and that it found `/tmp` fresh.
async fn ran_in(d: &Dispatcher, id: &str) -> String {
    let m = d
        .call(ToolCall::new(
            id,
            "sh",
            &cmd(&format!("{WHICH}; ls /tmp; touch /tmp/used")),
        ))
        .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(
        !m.content.contains("used"),
        "a used container: {}",
        m.content
    );
    let container = m.content.lines().next().unwrap_or_default().to_owned();
    assert_eq!(container.len(), 64, "{}", m.content);
    container
}

#[tokio::test]
async fn fifty_calls_each_run_in_a_fresh_container_the_first_from_the_pool() {
    let h = docker_or_skip!();
    let d = warmed(&h, "pool = 4");
    let ready = filled(&h, 4).await;
    let mut seen = HashSet::new();
    let mut pooled = 0;
    for i in 0..50 {
        let before = waiting(&h).await;
        let container = ran_in(&d, &format!("c{i}")).await;
        pooled += usize::from(before.contains(&container));
        assert!(seen.insert(container), "a container ran two calls");
    }
    assert!(
        ready.iter().all(|id| seen.contains(id)),
        "the first four took the pool's"
    );
    assert!(pooled >= 4, "{pooled} of 50 from the pool");
    drop(d);
    h.assert_clean().await;
}

#[tokio::test]
async fn a_pooled_container_killed_while_it_waits_is_never_used_and_is_replaced() {
    let h = docker_or_skip!();
    let d = warmed(&h, "pool = 2");
    let ready = filled(&h, 2).await;
    let victim = ready.iter().next().unwrap().clone();
    let docker = h.engine().client().await.expect("engine");
    docker
        .kill_container(&victim, None::<KillContainerOptions>)
        .await
        .expect("kill");
    // At once: the watcher may not have seen it die yet.
    for i in 0..3 {
        let container = ran_in(&d, &format!("c{i}")).await;
        assert_ne!(container, victim, "the killed container ran a call");
    }
    let refilled = filled(&h, 2).await;
    assert!(!refilled.contains(&victim));
    for _ in 0..50 {
        if docker.inspect_container(&victim, None).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        docker.inspect_container(&victim, None).await.is_err(),
        "the dead one was removed"
    );
    drop(d);
    h.assert_clean().await;
}

#[tokio::test]
async fn eight_calls_at_once_find_eight_containers_ready() {
    let h = docker_or_skip!();
    let d = warmed(&h, "pool = 8");
    let ready = filled(&h, 8).await;
    let calls = (0..8).map(|i| {
        let d = &d;
        async move { ran_in(d, &format!("c{i}")).await }
    });
    let ran: HashSet<String> = futures::future::join_all(calls).await.into_iter().collect();
    assert_eq!(ran.len(), 8);
    assert!(
        ran.is_subset(&ready),
        "a call waited for a container to start"
    );
    drop(d);
    h.assert_clean().await;
}

#[tokio::test]
async fn a_sessions_first_command_finds_its_container_ready() {
    let h = docker_or_skip!();
    let d = warmed(&h, "pool = 1\nsession = true");
    let ready = filled(&h, 1).await;
    let first = d
        .call(ToolCall::new(
            "c1",
            "sh",
            &cmd(&format!("{WHICH}; cd /tmp")),
        ))
        .await;
    assert_eq!(first.status, Status::Success, "{}", first.content);
    let container = first.content.lines().next().unwrap_or_default();
    assert!(ready.contains(container), "{}", first.content);
    // The session keeps it; the pool makes another.
    let second = d
        .call(ToolCall::new("c2", "sh", &cmd(&format!("{WHICH}; pwd"))))
        .await;
    let lines: Vec<&str> = second.content.lines().take(2).collect();
    assert_eq!(lines, [container, "/tmp"], "one session, one shell");
    filled(&h, 1).await;
    d.close().await;
    drop(d);
    h.assert_clean().await;
}

#[tokio::test]
async fn a_pool_is_removed_with_its_toolbox_and_never_filled_unwarmed() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &h.shell_policy("pool = 3", "", ""));
    // Not warmed (`warden call`, `warden run`): calls start their own, and none wait.
    ran_in(&d, "c1").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiting(&h).await.is_empty(), "an unwarmed pool filled");
    d.toolbox().warm();
    filled(&h, 3).await;
    drop(d);
    // The pool's end removes its containers before it returns.
    assert!(
        h.containers().await.is_empty(),
        "{:?}",
        h.containers().await
    );
}

/// `warden serve`'s end: the runtime the pool fills on ends while a container is being made
/// for it (created or started, not yet waiting). That one is removed too, not left to the
/// next warden's reaper.
#[test]
fn a_pool_whose_runtime_ends_while_it_fills_leaves_nothing() {
    let serving = tokio::runtime::Runtime::new().expect("a runtime");
    let made = serving.block_on(async {
        let h = harness().await?;
        let d = h.dispatcher("sh", &h.shell_policy("pool = 3", "", ""));
        d.toolbox().warm();
        // They are made one at a time: while the first exists, the next is being made.
        let docker = h.engine().client().await.expect("engine");
        while h.containers_on(&docker).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Some((h, d))
    });
    let Some((h, d)) = made else { return };
    drop(d);
    serving.shutdown_timeout(Duration::from_secs(2));
    // A client of a runtime of its own: the first one's connections ended with it.
    let after = tokio::runtime::Runtime::new().expect("a runtime");
    let left = after.block_on(async {
        let docker = bollard::Docker::connect_with_defaults().expect("a client");
        h.containers_on(&docker).await
    });
    assert!(left.is_empty(), "left behind: {left:?}");
}
