//! Session mode: one container and one long-lived shell per session, each command under its
//! own deadline; sessions end with their dispatcher.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

mod common;

use common::{call, cmd, kind, shell_policy};
use serde_json::json;
use std::time::{Duration, Instant};
use warden_core::{Status, ToolCall};

fn session_policy(h: &common::Harness, limits: &str) -> String {
    let ws = h.folder("ws");
    let grants = format!(
        "fs = [{{ host = \"{}\", guest = \"/workspace\", access = \"read-write\" }}]",
        ws.display()
    );
    shell_policy("session = true\nworkdir = \"/\"", &grants, limits)
}

#[tokio::test]
async fn a_session_keeps_cd_variables_and_files_and_restart_clears_them() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, ""));
    let m = call(
        &d,
        "sh",
        cmd("cd /workspace && touch a && export X=1 && touch /tmp/t"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let m = call(&d, "sh", cmd("pwd; ls; echo \"X=$X\"; ls /tmp")).await;
    assert_eq!(
        m.content, "/workspace\na\nX=1\nt\n[exit code 0]",
        "the next call sees it"
    );
    assert_eq!(h.containers().await.len(), 1, "one container per session");
    let m = call(&d, "sh", json!({"restart": true})).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let m = call(&d, "sh", cmd("pwd; echo \"X=$X\"; ls /tmp")).await;
    assert_eq!(m.content, "/\nX=\n[exit code 0]", "restart clears it");
    // The granted folder is the host's: its file outlives the session.
    assert!(h.dir.path().join("ws/a").exists());
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn each_command_has_its_own_deadline_and_a_timeout_restarts_the_shell() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"10s\""));
    call(&d, "sh", cmd("cd /workspace")).await;
    let start = Instant::now();
    let m = call(
        &d,
        "sh",
        json!({"command": "echo partial; sleep 1000", "timeout": 1}),
    )
    .await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(m.content.contains("partial"), "{}", m.content);
    assert!(m.content.contains("fresh one"), "{}", m.content);
    let m = call(&d, "sh", cmd("pwd")).await;
    assert_eq!(m.content, "/\n[exit code 0]", "a fresh shell");
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn exit_codes_syntax_errors_and_exit_in_a_session() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, ""));
    call(&d, "sh", cmd("Y=kept")).await;
    let m = call(&d, "sh", cmd("echo out; echo err >&2; false")).await;
    assert_eq!(kind(&m), "exit_status");
    assert_eq!(m.error.as_ref().unwrap().details["exit_code"], 1);
    assert!(
        m.content.contains("out\n[stderr]\nerr\n[exit code 1]"),
        "{}",
        m.content
    );
    // A syntax error fails its command, not the shell.
    let m = call(&d, "sh", cmd("echo (")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    assert!(m.content.contains("syntax error"), "{}", m.content);
    // A command reading stdin reads nothing, rather than the commands that follow.
    let m = call(&d, "sh", cmd("cat; echo \"Y=$Y\"; printf 'no newline'")).await;
    assert_eq!(m.content, "Y=kept\nno newline\n[exit code 0]");
    // `exit` ends the shell and the session; the next command gets a fresh one.
    let m = call(&d, "sh", cmd("exit 4")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    assert!(m.content.contains("the shell ended"), "{}", m.content);
    let m = call(&d, "sh", cmd("echo \"Y=$Y\"")).await;
    assert_eq!(m.content, "Y=\n[exit code 0]");
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn sessions_are_separate_and_end_with_their_dispatcher() {
    let h = docker_or_skip!();
    let first = h.dispatcher("sh", &session_policy(&h, ""));
    let second = first.new_session();
    call(&first, "sh", cmd("Z=first")).await;
    call(&second, "sh", cmd("Z=second")).await;
    assert_eq!(h.containers().await.len(), 2);
    let m = call(&first, "sh", cmd("echo $Z")).await;
    assert_eq!(m.content, "first\n[exit code 0]");
    second.close().await;
    assert_eq!(
        h.containers().await.len(),
        1,
        "closed: its container is gone"
    );
    // Dropping the last dispatcher of a session ends it too.
    drop(first);
    h.assert_clean().await;
}

#[tokio::test]
async fn a_memory_bomb_in_a_session_is_reported_and_the_next_command_runs() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "memory = \"32MiB\""));
    call(&d, "sh", cmd("W=still-here")).await;
    let m = call(
        &d,
        "sh",
        cmd("x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived"),
    )
    .await;
    // The shell holds the growing string, so the kill takes the shell and the session.
    assert_eq!(kind(&m), "out_of_memory", "{}", m.content);
    assert!(!m.content.contains("survived"), "{}", m.content);
    let m = call(&d, "sh", cmd("echo ok")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn a_batch_in_one_session_runs_in_order_of_the_shell() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"20s\""));
    let calls: Vec<ToolCall> = (0..10)
        .map(|i| {
            let args = if i == 4 {
                json!({"command": "sleep 1000", "timeout": 2})
            } else {
                cmd(&format!("echo call {i}"))
            };
            ToolCall::new(format!("c{i}"), "sh", &args)
        })
        .collect();
    let messages = d.dispatch(calls).await;
    for (i, m) in messages.iter().enumerate() {
        if i == 4 {
            assert_eq!(kind(m), "timeout", "{}", m.content);
        } else {
            assert_eq!(m.content, format!("call {i}\n[exit code 0]"));
        }
    }
    d.close().await;
    h.assert_clean().await;
}
