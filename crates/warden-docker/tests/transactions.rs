//! A docker call as a transaction over its read-write root, through a real engine: the
//! container sees the root through an overlay the engine mounts, so a command that ends on its
//! own commits (its change set in the answer), one warden ends (its timeout, its memory limit)
//! leaves nothing, two pooled calls writing one file side by side commit once and conflict
//! once, and an undo puts the root back.

use crate::common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_core::ToolCall;

/// A root `ws` holding `a`, and a read-only `ctl` the test drives calls through.
fn roots(h: &Harness) -> (PathBuf, PathBuf, String) {
    let ws = h.folder("ws");
    let ctl = h.folder("ctl");
    std::fs::write(ws.join("a"), "alpha\n").unwrap();
    if is_root() {
        std::os::unix::fs::chown(ws.join("a"), Some(65534), Some(65534)).unwrap();
    }
    let grants = format!(
        "fs = [{{ host = \"{}\", guest = \"/ws\", access = \"read-write\" }}, \
         {{ host = \"{}\", guest = \"/ctl\", access = \"read-only\" }}]",
        ws.display(),
        ctl.display()
    );
    (ws.canonicalize().unwrap(), ctl, grants)
}

fn read(ws: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(ws.join(name)).ok()
}

under_runc_and_gvisor!(a_docker_call_that_ends_commits_and_one_warden_ends_leaves_nothing);

/// Under runc the view is final once the container's init has ended (a pidfd); under gVisor,
/// whose file server writes for the sandbox, once the engine says the container stopped.
async fn a_docker_call_that_ends_commits_and_one_warden_ends_leaves_nothing(sandbox: Sandbox) {
    let Some(mut h) = harness_in(sandbox).await else {
        return;
    };
    let store = h.transactions();
    let (ws, _, grants) = roots(&h);
    let d = h.dispatcher(
        "sh",
        // Time for gVisor's memory limit to kill a bomb; the timeout's call asks for less.
        &h.shell_policy("", &grants, "timeout = \"60s\"\nmemory = \"32MiB\""),
    );
    let m = call(
        &d,
        "sh",
        cmd("cd /ws && echo changed > a && mkdir d && echo n > d/n && rm -f gone"),
    )
    .await;
    assert_eq!(kind(&m), "success", "{}", m.content);
    assert_eq!(
        paths(&changes(&m)),
        [("a", "modified"), ("d", "added"), ("d/n", "added")]
            .map(|(p, c)| (p.to_owned(), c.to_owned()))
    );
    assert_eq!(read(&ws, "a").as_deref(), Some("changed\n"));
    assert_eq!(read(&ws, "d/n").as_deref(), Some("n\n"));

    // A failing exit status is the command's own end: it commits.
    let m = call(&d, "sh", cmd("echo failed > /ws/f; exit 3")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    assert_eq!(read(&ws, "f").as_deref(), Some("failed\n"));

    // Ended by its timeout mid-write: nothing of it remains.
    let m = call(
        &d,
        "sh",
        json!({
            "command": "echo half > /ws/a; echo more > /ws/new; rm /ws/f; sleep 30",
            "timeout": 3,
        }),
    )
    .await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    // The executor's own answer says so; on a machine too busy for it to answer within the
    // 100 ms before the deadline, the dispatcher's bare one is the call's.
    if m.content.contains("its container was killed") {
        assert!(m.content.contains("Nothing it wrote"), "{}", m.content);
        assert_eq!(changes(&m), json!({ "discarded": true }));
    }

    // Killed by its memory limit after it wrote: nothing of it remains either.
    let m = call(
        &d,
        "sh",
        cmd(
            "echo lost > /ws/a; rm /ws/f; x=$(head -c 300000000 /dev/zero | tr '\\0' a); \
             echo survived",
        ),
    )
    .await;
    assert_eq!(kind(&m), "out_of_memory", "{}", m.content);
    assert_eq!(changes(&m), json!({ "discarded": true }));

    assert_eq!(read(&ws, "a").as_deref(), Some("changed\n"));
    assert_eq!(read(&ws, "new"), None);
    assert_eq!(read(&ws, "f").as_deref(), Some("failed\n"));
    h.assert_clean().await;
    // A view warden ended goes once its container has.
    let views = h.dir.path().join("home/transactions/views");
    wait_for(|| std::fs::read_dir(&views).unwrap().count() == 0).await;

    // The first call is undone: the root is as it was before it.
    let first = store.records().unwrap().remove(0);
    store.rewind(&first.call_id).unwrap();
    store.undo(&first.call_id).unwrap();
    assert_eq!(read(&ws, "a").as_deref(), Some("alpha\n"));
    assert_eq!(read(&ws, "d/n"), None);
}

#[tokio::test]
async fn two_pooled_calls_writing_one_file_side_by_side_commit_once_and_conflict_once() {
    let Some(mut h) = harness().await else { return };
    h.transactions();
    let (ws, ctl, grants) = roots(&h);
    let d = h.dispatcher("sh", &h.shell_policy("pool = 2", &grants, ""));
    d.toolbox().warm();
    // The second call writes, then waits (on the read-only root, seen live) for the test.
    let second = d.call(ToolCall::new(
        "c2",
        "sh",
        &cmd("echo second > /ws/a; echo mine > /ws/only-second; \
              while ! test -e /ctl/go; do sleep 0.05; done"),
    ));
    let first = async {
        let views = h.dir.path().join("home/transactions/views");
        wait_for(|| written_in_a_view(&views, "only-second")).await;
        let m = call(&d, "sh", cmd("echo first > /ws/a")).await;
        std::fs::write(ctl.join("go"), "").unwrap();
        m
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(kind(&first), "success", "{}", first.content);
    assert_eq!(kind(&second), "conflict", "{}", second.content);
    assert!(
        second.content.contains(&ws.join("a").display().to_string()),
        "{}",
        second.content
    );
    assert_eq!(read(&ws, "a").as_deref(), Some("first\n"));
    assert_eq!(
        read(&ws, "only-second"),
        None,
        "nothing of the second applied"
    );
    drop(d);
    h.assert_clean().await;
}

async fn wait_for(done: impl Fn() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < until, "it never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True when some view's upper layer holds `name`.
fn written_in_a_view(views: &Path, name: &str) -> bool {
    std::fs::read_dir(views)
        .into_iter()
        .flatten()
        .flatten()
        .any(|view| view.path().join("0/upper").join(name).exists())
}

/// A policy's `files = "copy"` has its tool's roots copied in on this machine's engine too:
/// nothing of the host is mounted, and its calls are transactions over the copies, whoever
/// its container's user is (the way for one that warden, not root, cannot act as).
#[tokio::test]
async fn a_tool_whose_roots_its_policy_has_copied_mounts_nothing_and_commits_its_changes() {
    let Some(mut h) = harness().await else {
        return;
    };
    let store = h.transactions();
    let (ws, _, grants) = roots(&h);
    let e = h
        .toolbox("sh", &h.shell_policy("files = \"copy\"", &grants, ""))
        .err()
        .unwrap_or_default();
    assert!(
        e.contains("files = \"copy\"") && e.contains("copy_back = true"),
        "a read-write root copied needs its write-back: {e}"
    );
    let policy = h.shell_policy("files = \"copy\"\ncopy_back = true", &grants, "");
    let m = call(
        &h.dispatcher("sh", &policy),
        "sh",
        cmd("grep ' /ws ' /proc/mounts; echo changed > /ws/a; mkdir /ws/d"),
    )
    .await;
    assert_eq!(kind(&m), "success", "{}", m.content);
    assert!(m.content.contains(" /ws tmpfs "), "a copy: {}", m.content);
    assert_eq!(
        paths(&changes(&m)),
        [("a", "modified"), ("d", "added")].map(|(p, c)| (p.to_owned(), c.to_owned()))
    );
    assert_eq!(read(&ws, "a").as_deref(), Some("changed\n"));
    let call_id = store.records().unwrap().pop().unwrap().call_id;
    store.undo(&call_id).unwrap();
    assert_eq!(read(&ws, "a").as_deref(), Some("alpha\n"));
    assert!(!ws.join("d").exists());
    h.assert_clean().await;
}
