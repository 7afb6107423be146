//! Session mode: one container and one long-lived shell per session, each command under its
//! own deadline; sessions end with their dispatcher.

use crate::common::{HALF_A_SECOND_OF_CPU, call, cmd, holds_fifty_mb, kind, shell_policy, usage};
use serde_json::json;
use std::time::{Duration, Instant};
use warden_core::{Status, ToolCall};
use warden_test_support::assert_timed_out;

fn session_policy(h: &crate::common::Harness, limits: &str) -> String {
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

/// Under runc on this machine a timeout stops the command's processes and keeps the shell;
/// a loop of the shell's own builtins takes the shell down.
#[tokio::test]
async fn each_command_has_its_own_deadline_and_a_timeout_keeps_the_shell() {
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
    assert!(m.content.contains("shell lives on"), "{}", m.content);
    let e = m.error.as_ref().expect("an error");
    assert_timed_out(e, Duration::from_millis(1000));
    let m = call(&d, "sh", cmd("pwd")).await;
    assert_eq!(m.content, "/workspace\n[exit code 0]", "the same shell");
    let m = call(
        &d,
        "sh",
        json!({"command": "while :; do :; done", "timeout": 1}),
    )
    .await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    assert!(m.content.contains("fresh shell"), "{}", m.content);
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
    assert_eq!(m.error.as_ref().unwrap().details["shell"]["exit_code"], 1);
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

/// The fork bomb of the issue, as a new user would try it.
const BOMB: &str = "b(){ b|b& }; b";

/// The prefix of every line of the protocol between warden and the session shell.
const PROTOCOL: &str = "__WARDEN_";

/// Nothing of the session's protocol shows: no marker, no nonce, no framing.
fn assert_no_protocol(m: &warden_core::ToolMessage) {
    let everything = format!("{}{}", m.content, m.artifact.clone().unwrap_or_default());
    assert!(!everything.contains(PROTOCOL), "{}", m.content);
    assert!(!everything.contains("__w_"), "{}", m.content);
}

/// A command that needs a fork (`/bin/echo`), in a shell whose state shows (`$((…))`).
const PROBE: &str = "echo $((6*7)); /bin/echo forked";

#[tokio::test]
async fn a_fork_bomb_in_a_session_is_contained_and_the_next_command_answers_soon() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"20s\""));
    let start = Instant::now();
    let m = call(&d, "sh", cmd(BOMB)).await;
    eprintln!("the bomb answered in {:?}: {}", start.elapsed(), m.content);
    assert_no_protocol(&m);
    let mut reset = false;
    for n in 0..3 {
        let start = Instant::now();
        let m = call(&d, "sh", cmd(PROBE)).await;
        let took = start.elapsed();
        eprintln!(
            "command {n} after the bomb answered in {took:?}: {}",
            m.content
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
        // A bomb still growing when its own command ended is caught by a later command (the
        // first to find the sandbox full: its processes churn, so not always the next), which
        // then fails with the reset named, never silently; the ones after it run clean.
        if !reset && m.status != Status::Success {
            assert!(
                m.content.contains("out of processes") && m.content.contains("it was reset"),
                "{}",
                m.content
            );
            assert_no_protocol(&m);
            reset = true;
            continue;
        }
        assert_eq!(m.status, Status::Success, "{}", m.content);
        assert!(m.content.starts_with("42\nforked\n"), "{}", m.content);
        assert_no_protocol(&m);
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn ten_sessions_survive_ten_fork_bombs_at_once() {
    let h = docker_or_skip!();
    // Bounded for a small machine: 64 processes and half a CPU per session.
    let policy = shell_policy(
        "session = true\nworkdir = \"/\"\npids = 64\ncpus = 0.5",
        "",
        "timeout = \"20s\"",
    );
    let first = h.dispatcher("sh", &policy);
    let sessions: Vec<_> = (0..10).map(|_| first.new_session()).collect();
    // Each session up, so what is measured below is the bomb, not ten container starts.
    let up = futures::future::join_all(sessions.iter().map(|d| call(d, "sh", cmd("V=kept")))).await;
    for m in &up {
        assert_eq!(m.status, Status::Success, "{}", m.content);
    }
    let start = Instant::now();
    let bombs = futures::future::join_all(sessions.iter().map(|d| call(d, "sh", cmd(BOMB)))).await;
    eprintln!("ten bombs answered in {:?}", start.elapsed());
    for m in &bombs {
        assert_no_protocol(m);
    }
    let start = Instant::now();
    let next = futures::future::join_all(sessions.iter().map(|d| async {
        let m = call(d, "sh", cmd(PROBE)).await;
        (m, start.elapsed())
    }))
    .await;
    for (m, took) in &next {
        eprintln!("answered in {took:?}: {}", m.content);
    }
    for (m, took) in &next {
        assert_eq!(m.status, Status::Success, "{}", m.content);
        assert!(m.content.starts_with("42\nforked\n"), "{}", m.content);
        assert_no_protocol(m);
        assert!(*took < Duration::from_secs(8), "{took:?}");
    }
    for d in &sessions {
        d.close().await;
    }
    first.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn a_session_left_without_processes_is_reset_and_says_so() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"20s\""));
    call(&d, "sh", cmd("cd /workspace; V=kept")).await;
    // Background sleepers until the pids limit refuses a fork: nothing left for later commands.
    let m = call(&d, "sh", cmd("while :; do sleep 1000 & done")).await;
    assert_no_protocol(&m);
    assert!(m.content.contains("can't fork"), "{}", m.content);
    assert!(
        m.content.contains("out of processes") && m.content.contains("it was reset"),
        "{}",
        m.content
    );
    let start = Instant::now();
    let m = call(&d, "sh", cmd(&format!("pwd; echo \"V=$V\"; {PROBE}"))).await;
    let took = start.elapsed();
    eprintln!("answered in {took:?}: {}", m.content);
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(
        m.content.starts_with("/\nV=\n42\nforked\n"),
        "a fresh shell: {}",
        m.content
    );
    assert_no_protocol(&m);
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(h.containers().await.len(), 1, "the old container is gone");
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn a_command_that_holds_every_process_is_stopped_long_before_its_deadline() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"30s\""));
    // Fills the container with sleepers, then waits on a pipe no one writes: the end line
    // never comes, and the container stays full.
    let start = Instant::now();
    let m = call(
        &d,
        "sh",
        cmd("mkfifo /tmp/f; (while :; do sleep 1000 & done) 2>/dev/null; echo waiting; read x </tmp/f"),
    )
    .await;
    let took = start.elapsed();
    eprintln!("answered in {took:?}: {}", m.content);
    assert_eq!(kind(&m), "limit_exceeded", "{}", m.content);
    assert!(
        m.content.contains("waiting") && m.content.contains("reset"),
        "{}",
        m.content
    );
    assert_no_protocol(&m);
    assert!(took < Duration::from_secs(12), "{took:?}");
    let start = Instant::now();
    let m = call(&d, "sh", cmd(PROBE)).await;
    assert_eq!(m.content, "42\nforked\n[exit code 0]");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn output_that_imitates_the_marker_changes_nothing() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"10s\""));
    // Today's and yesterday's forms, guessed nonces, the bare prefix, on both streams, with
    // and without a line of their own; then more output, then the exit status.
    let fakes = "__WARDEN_END_0123456789abcdef:0\n\
                 __WARDEN_END_0123456789abcdef\n\
                 __WARDEN_END_\n\
                 __WARDEN_END_0123456789abcdef 0 5\n\
                 __WARDEN_START_0123456789abcdef\n\
                 x __WARDEN_END_0123456789abcdef:0\n";
    let command = format!(
        "printf '%s' '{fakes}'; printf '%s' '{fakes}' >&2; printf '\\n__WARDEN_END_'; \
         echo after; echo err-after >&2; exit_with() {{ return $1; }}; exit_with 3"
    );
    let m = call(&d, "sh", cmd(&command)).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    let error = m.error.as_ref().unwrap();
    assert_eq!(error.details["shell"]["exit_code"], 3, "{}", m.content);
    assert_eq!(
        error.details["shell"]["stdout"],
        format!("{fakes}\n__WARDEN_END_after\n"),
        "{}",
        m.content
    );
    assert_eq!(
        error.details["shell"]["stderr"],
        format!("{fakes}err-after\n")
    );
    // The next command's output is its own.
    let m = call(&d, "sh", cmd("echo next")).await;
    assert_eq!(m.content, "next\n[exit code 0]");
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn the_protocol_never_shows_whatever_the_shell_is_told() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"10s\""));
    // Tracing and verbose input show the command's own lines, never warden's framing.
    let m = call(&d, "sh", cmd("set -x; echo traced")).await;
    assert_eq!(m.content, "traced\n[stderr]\n+ echo traced\n[exit code 0]");
    let m = call(&d, "sh", cmd("echo still")).await;
    assert_eq!(m.content, "still\n[stderr]\n+ echo still\n[exit code 0]");
    let m = call(&d, "sh", cmd("set +x; set -v; echo verbose")).await;
    assert_no_protocol(&m);
    let m = call(&d, "sh", cmd("set +v; echo quiet")).await;
    assert_no_protocol(&m);
    // The shell's own state: strict modes, a strange IFS, its variables and command line.
    for command in [
        "set -eu; IFS=x; echo strict",
        "set; cat /proc/$$/cmdline; ls -l /proc/$$/fd",
        "exec >/dev/null; echo hidden",
        "exec >&2; echo to-stderr",
        "exec 3>&- 4>&-; echo closed",
        "false",
    ] {
        let m = call(&d, "sh", cmd(command)).await;
        assert_no_protocol(&m);
        assert!(m.content.contains("[exit code"), "{command}: {}", m.content);
    }
    let m = call(&d, "sh", cmd("echo 'still here' >&2")).await;
    assert_eq!(m.content, "[stderr]\nstill here\n[exit code 0]");
    d.close().await;
    h.assert_clean().await;
}

#[tokio::test]
async fn each_command_of_a_session_reports_its_own_cpu_and_memory_peak() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "memory = \"256MiB\""));
    holds_fifty_mb(&d).await;
    // The container's peak is still 50 MB; this command's is its own.
    let m = call(&d, "sh", cmd("true")).await;
    let used = usage(&m);
    assert!(
        used["peak_memory_bytes"].as_u64().unwrap() < 25_000_000,
        "{used}"
    );
    let m = call(&d, "sh", cmd(HALF_A_SECOND_OF_CPU)).await;
    assert!(m.content.starts_with("spun\n"), "{}", m.content);
    let used = usage(&m);
    let cpu = used["cpu_ms"].as_f64().unwrap();
    assert!((450.0..3000.0).contains(&cpu), "{used}");
    let m = call(&d, "sh", cmd("true")).await;
    let used = usage(&m);
    assert!(used["cpu_ms"].as_f64().unwrap() < 100.0, "{used}");
    // A failing command and a timed-out one report theirs too.
    let m = call(&d, "sh", cmd("(exit 3)")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    let used = usage(&m);
    assert!(used["cpu_ms"].as_f64().unwrap() < 100.0, "{used}");
    assert!(used["peak_memory_bytes"].as_u64().is_some(), "{used}");
    let m = call(
        &d,
        "sh",
        json!({"command": "while :; do :; done", "timeout": 1}),
    )
    .await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    let used = usage(&m);
    assert!(used["cpu_ms"].as_f64().unwrap() > 100.0, "{used}");
    assert!(used["peak_memory_bytes"].as_u64().is_some(), "{used}");
    d.close().await;
    h.assert_clean().await;
}

/// A command that comes while the session's shell runs another runs at once, in the same
/// container: each waits for a file the other makes, which commands run one after the other
/// would never see. The second starts from the state the last command left, as the session's
/// user, and its own `cd` and `export` stay its own.
#[tokio::test]
async fn overlapping_commands_run_at_once_in_the_session_s_container() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"20s\""));
    let m = call(&d, "sh", cmd("cd /workspace && export V=1 && W=2 && id -u")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let uid = m
        .content
        .trim_end_matches("[exit code 0]")
        .trim()
        .to_owned();
    let (first, second) = tokio::join!(
        call(
            &d,
            "sh",
            cmd("touch /tmp/a; until [ -e /tmp/b ]; do sleep 0.05; done; echo first")
        ),
        call(
            &d,
            "sh",
            cmd("until [ -e /tmp/a ]; do sleep 0.05; done; touch /tmp/b; \
                 pwd; echo V=$V W=${W:-unset} $(id -u); cd /tmp; export V=changed")
        ),
    );
    assert_eq!(first.content, "first\n[exit code 0]");
    assert_eq!(
        second.content,
        format!("/workspace\nV=1 W=unset {uid}\n[exit code 0]")
    );
    let m = call(&d, "sh", cmd("pwd; echo V=$V W=$W")).await;
    assert_eq!(m.content, "/workspace\nV=1 W=2\n[exit code 0]");
    assert_eq!(h.containers().await.len(), 1, "one container per session");
    d.close().await;
    h.assert_clean().await;
}

/// A timeout of a command that overlaps another ends that command alone: the other one, the
/// session's shell and its files live on.
#[tokio::test]
async fn a_timeout_of_an_overlapping_command_ends_only_it_in_docker() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &session_policy(&h, "timeout = \"20s\""));
    call(&d, "sh", cmd("cd /tmp; X=kept")).await;
    let beside = async {
        let stopped = call(
            &d,
            "sh",
            json!({"command": "until [ -e /tmp/a ]; do sleep 0.05; done; echo started; sleep 300",
                   "timeout": 1}),
        )
        .await;
        let done = call(&d, "sh", cmd("touch /tmp/done; echo told")).await;
        (stopped, done)
    };
    let (first, (stopped, done)) = tokio::join!(
        call(
            &d,
            "sh",
            cmd("touch /tmp/a; until [ -e /tmp/done ]; do sleep 0.05; done; echo first")
        ),
        beside,
    );
    assert_eq!(kind(&stopped), "timeout", "{}", stopped.content);
    assert!(
        stopped.content.contains("session lives on"),
        "{}",
        stopped.content
    );
    assert!(stopped.content.contains("started"), "{}", stopped.content);
    assert_eq!(done.content, "told\n[exit code 0]");
    assert_eq!(first.content, "first\n[exit code 0]");
    let m = call(&d, "sh", cmd("echo $X; pwd; ls a done")).await;
    assert_eq!(m.content, "kept\n/tmp\na\ndone\n[exit code 0]");
    d.close().await;
    h.assert_clean().await;
}
