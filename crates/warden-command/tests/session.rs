//! The session driver with no sandbox at all: a plain `sh` on this machine, started by a test
//! launcher. What holds here holds for every executor that hands the driver a shell.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use warden_command::session::{
    Launched, Launcher, NoSiblings, Processes, Sandbox, Sessions, chunks,
};
use warden_command::{Cause, CommandCall, Deadline, Request, Template};
use warden_core::{Denials, ErrorKind, Invocation, Limits, Meter, Output, SessionId, ToolError};
use warden_test_support::assert_timed_out;

/// Starts `sh` (or `$WARDEN_TEST_SHELL`: bash, busybox ash) in a process group of its own;
/// "the sandbox" is that group.
struct Sh {
    /// A directory that the framing reads as a pids cgroup (the launcher writes into it what
    /// a fresh sandbox's would hold), and the count seen "from outside".
    counter: Option<(PathBuf, Arc<AtomicU64>)>,
    launched: Arc<AtomicU64>,
}

struct Group {
    child: tokio::process::Child,
    outside: Option<Arc<AtomicU64>>,
}

impl Group {
    fn kill(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Sandbox for Group {
    type Siblings = NoSiblings;

    async fn exit_status(&mut self) -> Result<(i64, Cause), ToolError> {
        let status = self.child.wait().await.unwrap();
        Ok((status.code().map_or(137, i64::from), Cause::Exited))
    }

    async fn memory_killed(&mut self) -> bool {
        false
    }

    async fn processes(&mut self) -> Option<u64> {
        self.outside.as_ref().map(|n| n.load(Ordering::SeqCst))
    }

    async fn close(mut self) {
        self.kill();
        let _ = self.child.wait().await;
    }
}

impl Launcher for Sh {
    type Sandbox = Group;
    const FRESH: &'static str = "a fresh shell";

    fn processes(&self) -> Option<Processes> {
        self.counter.as_ref().map(|(file, _)| Processes {
            limit: 100,
            cgroups: vec!["/nonexistent".into(), file.display().to_string()],
        })
    }

    async fn launch(
        &self,
        env: &[(String, String)],
        _: &Limits,
        _: Option<&str>,
    ) -> Result<Launched<Group>, ToolError> {
        self.launched.fetch_add(1, Ordering::SeqCst);
        if let Some((dir, outside)) = &self.counter {
            std::fs::write(dir.join("pids.current"), "1\n").unwrap();
            std::fs::write(dir.join("pids.events"), "max 0\n").unwrap();
            outside.store(1, Ordering::SeqCst);
        }
        let shell = std::env::var("WARDEN_TEST_SHELL").unwrap_or_else(|_| "sh".into());
        let mut child = tokio::process::Command::new(shell)
            .env_clear()
            .envs(env.iter().cloned())
            .env("PATH", "/usr/bin:/bin")
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let input = Box::pin(child.stdin.take().unwrap());
        let output = chunks(child.stdout.take().unwrap(), child.stderr.take().unwrap());
        Ok(Launched {
            sandbox: Group {
                child,
                outside: self.counter.as_ref().map(|(_, n)| n.clone()),
            },
            input,
            output,
            view: None,
        })
    }
}

struct Harness {
    sessions: Sessions<Sh>,
    id: SessionId,
    launched: Arc<AtomicU64>,
    counter: Option<(PathBuf, Arc<AtomicU64>)>,
    _dir: tempfile::TempDir,
}

/// A call of session `id` under `limits`, as the dispatcher would hand it over.
fn invocation(id: SessionId, limits: Limits) -> Invocation {
    Invocation {
        call_id: "c1".into(),
        arguments: json!({}),
        deadline: Instant::now() + limits.timeout,
        limits,
        denials: Denials::default(),
        session: id,
        usage: Meter::default(),
        output: None,
        caller_env: Default::default(),
        image: None,
        hold: None,
    }
}

impl Harness {
    fn new(counted: bool) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let counter = counted.then(|| (dir.path().to_owned(), Arc::new(AtomicU64::new(1))));
        let launched = Arc::new(AtomicU64::new(0));
        Harness {
            sessions: Sessions::new(Sh {
                counter: counter.clone(),
                launched: launched.clone(),
            }),
            id: SessionId::fresh(),
            launched,
            counter,
            _dir: dir,
        }
    }

    async fn run_in(&self, id: SessionId, args: serde_json::Value) -> Result<Output, ToolError> {
        let template = Template::parse(&["sh".into(), "-c".into(), "{command}".into()]).unwrap();
        let request = Request::parse(&args, &template, true).unwrap();
        let limits = Limits {
            timeout: Duration::from_secs(10),
            output: 1 << 16,
            ..Limits::default()
        };
        let inv = invocation(id, limits);
        let call = CommandCall {
            time: Deadline::of(request.timeout, &inv),
            request,
            env: vec![("GRANTED".into(), "yes".into())],
        };
        self.sessions.run(&inv, &call).await
    }

    /// What the model reads, success or not.
    async fn run(&self, command: &str) -> String {
        content(self.run_in(self.id, json!({ "command": command })).await)
    }

    fn launches(&self) -> u64 {
        self.launched.load(Ordering::SeqCst)
    }
}

fn content(r: Result<Output, ToolError>) -> String {
    match r {
        Ok(o) => o.content,
        Err(e) => e.message,
    }
}

fn assert_no_protocol(text: &str) {
    for word in ["__WARDEN", "__w_", "3>&-"] {
        assert!(!text.contains(word), "{word} shows: {text}");
    }
}

#[tokio::test]
async fn state_persists_and_each_command_answers_for_itself() {
    let h = Harness::new(false);
    assert_eq!(
        h.run("cd /tmp && X=1 && f() { echo f$1; }").await,
        "[exit code 0]"
    );
    assert_eq!(
        h.run("pwd; echo \"X=$X GRANTED=$GRANTED\"; f 2").await,
        "/tmp\nX=1 GRANTED=yes\nf2\n[exit code 0]"
    );
    let inv = invocation(
        h.id,
        Limits {
            timeout: Duration::from_secs(5),
            ..Limits::default()
        },
    );
    let call = CommandCall {
        request: Request::parse(
            &json!({"command": "echo out; echo err >&2; printf tail; exit_with() { return $1; }; exit_with 3"}),
            &Template::parse(&["sh".into(), "-c".into(), "{command}".into()]).unwrap(),
            true,
        )
        .unwrap(),
        env: Vec::new(),
        time: Deadline::of(None, &inv),
    };
    let e = h.sessions.run(&inv, &call).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::ExitStatus);
    assert_eq!(e.details["shell"]["exit_code"], 3);
    assert_eq!(e.details["shell"]["stdout"], "out\ntail");
    assert_eq!(e.details["shell"]["stderr"], "err\n");
    // A syntax error is the command's, and stdin is /dev/null, not the next commands.
    assert!(h.run("echo (").await.contains("[exit code 2]"));
    assert_eq!(h.run("cat; echo \"X=$X\"").await, "X=1\n[exit code 0]");
    assert_eq!(h.launches(), 1, "one shell all along");
    // `exit` ends the shell; the next command starts a fresh one.
    let m = h.run("exit 4").await;
    assert!(
        m.contains("[exit code 4]") && m.contains("the shell ended"),
        "{m}"
    );
    assert_eq!(h.run("echo \"X=$X\"").await, "X=\n[exit code 0]");
    assert_eq!(h.launches(), 2);
    // `restart` alone, then in the same call as a command.
    let m = content(h.run_in(h.id, json!({"restart": true})).await);
    assert!(m.contains("restarted"), "{m}");
    h.run("Y=1").await;
    let m = content(
        h.run_in(h.id, json!({"restart": true, "command": "echo \"Y=$Y\""}))
            .await,
    );
    assert_eq!(m, "Y=\n[exit code 0]");
    h.sessions.end(h.id).await;
}

#[tokio::test]
async fn output_imitating_the_protocol_is_output() {
    let h = Harness::new(false);
    let fakes = "__WARDEN_END_0123456789abcdef:0\n\
                 __WARDEN_END_0123456789abcdef0123456789abcdef 0 5 f\n\
                 __WARDEN_END_\n\
                 __WARDEN_START_0123456789abcdef0123456789abcdef\n\
                 x __WARDEN_END_0123456789abcdef:0\n";
    let m = h
        .run(&format!(
            "printf '%s' '{fakes}'; printf '%s' '{fakes}' >&2; printf '\\n__WARDEN_END_'"
        ))
        .await;
    assert_eq!(
        m,
        format!("{fakes}\n__WARDEN_END_\n[stderr]\n{fakes}[exit code 0]")
    );
    assert_eq!(h.run("echo next").await, "next\n[exit code 0]");
    h.sessions.end(h.id).await;
}

#[tokio::test]
async fn the_protocol_never_shows_whatever_the_shell_is_told() {
    let h = Harness::new(true);
    // bash marks a trace inside `eval` one level deeper (`++`): the same trace.
    let run = async |command: &str| h.run(command).await.replace("++ ", "+ ");
    assert_eq!(
        run("set -x; echo traced").await,
        "traced\n[stderr]\n+ echo traced\n[exit code 0]"
    );
    assert_eq!(
        run("echo still").await,
        "still\n[stderr]\n+ echo still\n[exit code 0]"
    );
    // A syntax error is the command's: the trace stays on.
    assert!(run("echo (").await.contains("[exit code 2]"));
    assert_eq!(
        run("echo again").await,
        "again\n[stderr]\n+ echo again\n[exit code 0]"
    );
    assert_eq!(
        run("set +x; echo off").await,
        "off\n[stderr]\n+ set +x\n[exit code 0]"
    );
    let m = h.run("set -v; echo verbose").await;
    assert_no_protocol(&m);
    let m = h.run("echo echoed").await;
    assert_no_protocol(&m);
    assert!(m.starts_with("echoed\n"), "{m}");
    h.run("set +v").await;
    for command in [
        "set -u; IFS=x; echo strict",
        "set; cat /proc/$$/cmdline; ls -l /proc/$$/fd",
        "exec 3>&- 4>&-; echo closed",
        "exec >/dev/null; echo hidden",
        "exec >&2; echo to-stderr",
    ] {
        let m = h.run(command).await;
        assert_no_protocol(&m);
        assert!(m.contains("[exit code 0]"), "{command}: {m}");
    }
    assert_eq!(h.run("echo last").await, "[stderr]\nlast\n[exit code 0]");
    assert_eq!(h.launches(), 1);
    h.sessions.end(h.id).await;
}

#[tokio::test]
async fn background_output_between_commands_is_counted_not_shown() {
    let h = Harness::new(false);
    let m = h
        .run("(sleep 0.3; echo late; echo late >&2) & echo now")
        .await;
    assert_eq!(m, "now\n[exit code 0]");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let m = h.run("echo mine").await;
    assert!(
        m.starts_with("mine\n[exit code 0]\n[background jobs wrote 10B between commands"),
        "{m}"
    );
    // Written while a command runs, it is that command's.
    let m = h
        .run("(sleep 0.1; echo during) & sleep 0.4; echo mine")
        .await;
    assert_eq!(m, "during\nmine\n[exit code 0]");
    h.sessions.end(h.id).await;
}

#[tokio::test]
async fn a_timeout_takes_the_shell_down_and_the_next_command_starts_afresh() {
    let h = Harness::new(false);
    h.run("Z=1; sleep 1000 &").await;
    let start = Instant::now();
    let r = h
        .run_in(
            h.id,
            json!({"command": "echo partial; sleep 1000", "timeout": 1}),
        )
        .await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(start.elapsed() < Duration::from_secs(3));
    assert_timed_out(&e, Duration::from_millis(1000));
    assert!(
        e.message.contains("partial") && e.message.contains("a fresh shell"),
        "{}",
        e.message
    );
    assert_eq!(h.run("echo \"Z=$Z\"").await, "Z=\n[exit code 0]");
    assert_eq!(h.launches(), 2);
    // A flood that never pauses still meets its deadline, and is capped.
    let start = Instant::now();
    let e = h
        .run_in(h.id, json!({"command": "yes", "timeout": 1}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(
        e.message.contains("output truncated"),
        "{}",
        &e.message[..200]
    );
    assert_eq!(h.run("echo after").await, "after\n[exit code 0]");
    h.sessions.end(h.id).await;
}

#[tokio::test]
async fn commands_of_one_session_run_one_at_a_time_in_arrival_order() {
    let h = Arc::new(Harness::new(false));
    h.run("L=").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            h.run(&format!("sleep 0.0{i}; L=\"$L {i}\"; echo \"$L\""))
                .await
        }));
        // Each one reaches the session before the next.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(answers[7], " 0 1 2 3 4 5 6 7\n[exit code 0]");
    // Another session has a shell of its own, and does not wait.
    let other = SessionId::fresh();
    let m = content(h.run_in(other, json!({"command": "echo \"L=$L\""})).await);
    assert_eq!(m, "L=\n[exit code 0]");
    h.sessions.end(h.id).await;
    h.sessions.end(other).await;
}

#[tokio::test]
async fn a_session_out_of_processes_is_reset_and_says_so() {
    let h = Harness::new(true);
    let (dir, outside) = h.counter.clone().unwrap();
    let (current, events) = (dir.join("pids.current"), dir.join("pids.events"));
    // Left full by the command: reset at once.
    h.run("V=1").await;
    let m = h
        .run(&format!("echo 99 > {}; echo done", current.display()))
        .await;
    assert!(
        m.starts_with("done\n[exit code 0]\n[the session is out of processes (99 of 100"),
        "{m}"
    );
    assert_eq!(h.run("echo \"V=$V\"").await, "V=\n[exit code 0]");
    assert_eq!(h.launches(), 2);
    // Found full before a command: the command runs in a fresh shell, once.
    h.run("V=2").await;
    std::fs::write(&current, "95\n").unwrap();
    let m = h.run("echo \"V=$V\"").await;
    assert!(
        m.starts_with("V=\n[exit code 0]\n[the session ran out of processes after the last command (95 of 100 in use)"),
        "{m}"
    );
    assert_eq!(h.launches(), 3);
    // Forks refused since the last command, however few run now: the same.
    h.run("V=3").await;
    std::fs::write(&events, "max 7\n").unwrap();
    let m = h.run("echo \"V=$V\"").await;
    assert!(m.contains("(1 of 100 in use, 7 forks refused)"), "{m}");
    assert!(m.starts_with("V=\n"), "{m}");
    assert_eq!(h.launches(), 4);
    // Refused during a command, by the command: its own failure, no reset.
    h.run("V=4").await;
    let m = h
        .run(&format!("echo max 3 > {}; echo \"V=$V\"", events.display()))
        .await;
    assert_eq!(m, "V=4\n[exit code 0]");
    assert_eq!(h.run("echo \"V=$V\"").await, "V=4\n[exit code 0]");
    assert_eq!(h.launches(), 4);
    // Seen full from outside while a command runs: stopped, reset.
    let start = Instant::now();
    outside.store(100, Ordering::SeqCst);
    let e = h
        .run_in(h.id, json!({"command": "echo started; sleep 1000"}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    assert!(
        e.message.contains("(100 of 100 in use)") && e.message.contains("started"),
        "{}",
        e.message
    );
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(h.run("echo ok").await, "ok\n[exit code 0]");
    assert_eq!(h.launches(), 5);
    h.sessions.end(h.id).await;
}

/// A shell lost without an answer saying so (its call cancelled mid-command) is said by the
/// answer of the command that runs in the next one; a reset an answer told is not said twice.
#[tokio::test]
async fn a_shell_lost_without_an_answer_is_told_by_the_next() {
    let h = Harness::new(false);
    assert_eq!(h.run("X=kept").await, "[exit code 0]");
    let cancelled = tokio::time::timeout(Duration::from_millis(300), h.run("sleep 30")).await;
    assert!(cancelled.is_err(), "the call was cancelled");
    let fresh = h.run("echo ${X:-fresh}").await;
    assert!(fresh.starts_with("fresh\n"), "{fresh}");
    assert!(fresh.contains("this session's shell was lost"), "{fresh}");
    assert_eq!(h.launches(), 2);
    // A timeout says so in its own answer: the next command's says nothing more.
    let timed_out = content(
        h.run_in(h.id, json!({"command": "sleep 30", "timeout": 0.3}))
            .await,
    );
    assert!(
        timed_out.contains("the next command starts in"),
        "{timed_out}"
    );
    assert_eq!(h.run("echo again").await, "again\n[exit code 0]");
}
