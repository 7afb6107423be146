//! Session mode: one confined shell per session, kept between commands, reset on timeouts
//! and fork bombs, and gone with its session.

use crate::common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{
    ErrorKind, Executor, Limits, Output, Pipe, PipeInput, Piping, SessionId, Stream, ToolError,
};
use warden_test_support::assert_timed_out;

/// What a command printed, without the exit-code line of a success.
fn body(r: &Result<Output, ToolError>) -> String {
    match r {
        Ok(o) => o
            .content
            .trim_end_matches("[exit code 0]")
            .trim()
            .to_owned(),
        Err(e) => format!("{}: {}", e.kind, e.message),
    }
}

/// A session shell tool run as `uid`, with a folder holding `sub` granted read-write. The
/// folder is outside /tmp, so that the session has a /tmp of its own.
fn session_tool(
    place: &Place,
    uid: u32,
    extra: &str,
    limits: &str,
) -> (Arc<dyn Executor>, Limits, tempfile::TempDir) {
    let w = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::create_dir(w.path().join("sub")).unwrap();
    for p in [w.path().to_owned(), w.path().join("sub")] {
        chmod(&p, 0o777);
    }
    let (tool, limits) = place.tool(&shell(
        &format!("session = true\nuser = \"{uid}:{uid}\"\n{extra}"),
        &format!(
            "fs = [{{ host = \"{}\", access = \"read-write\" }}]",
            w.path().canonicalize().unwrap().display()
        ),
        limits,
    ));
    (tool, limits, w)
}

#[tokio::test]
async fn the_working_directory_variables_and_tmp_persist_in_a_session() {
    let place = Place::new();
    let (tool, limits, w) = session_tool(&place, 65529, "", "");
    let id = SessionId::fresh();
    let r = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "cd sub && X=1 && echo kept >/tmp/f"}),
    )
    .await;
    assert!(r.is_ok(), "{}", text(&r));
    let r = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "pwd; echo $X; cat /tmp/f"}),
    )
    .await;
    let sub = w.path().join("sub").canonicalize().unwrap();
    assert_eq!(body(&r), format!("{}\n1\nkept", sub.display()));
    // A restart forgets it all.
    let r = call_in(&tool, &limits, id, json!({"restart": true})).await;
    assert!(r.is_ok(), "{}", text(&r));
    let r = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "echo ${X:-unset}; cat /tmp/f"}),
    )
    .await;
    assert!(text(&r).contains("unset"), "{}", text(&r));
    assert!(!text(&r).contains("kept"), "{}", text(&r));
    tool.end_session(id).await;
}

#[tokio::test]
async fn two_sessions_do_not_share_a_shell() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65528, "", "");
    let (a, b) = (SessionId::fresh(), SessionId::fresh());
    let r = call_in(
        &tool,
        &limits,
        a,
        json!({"command": "A=mine; echo a >/tmp/a; echo $$"}),
    )
    .await;
    assert!(r.is_ok(), "{}", text(&r));
    let r = call_in(
        &tool,
        &limits,
        b,
        json!({"command": "echo ${A:-none}; ls -A /tmp"}),
    )
    .await;
    assert_eq!(body(&r), "none");
    let r = call_in(&tool, &limits, a, json!({"command": "echo $A; ls -A /tmp"})).await;
    assert_eq!(body(&r), "mine\na");
    tool.end_session(a).await;
    tool.end_session(b).await;
}

/// A timeout stops the command's processes, not the session: its working directory,
/// variables, files and earlier background jobs stay. A loop of the shell's own builtins
/// has no process to stop, and takes the shell down as before.
#[tokio::test]
async fn a_timeout_ends_the_command_and_keeps_the_session() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65527, "", "timeout = \"2s\"");
    let id = SessionId::fresh();
    let run = |command: &str| call_in(&tool, &limits, id, json!({ "command": command }));
    body(&run("cd /tmp; echo kept > file; sleep 300 &").await);
    let started = Instant::now();
    let e = run("X=5; echo before; sleep 30 | cat; echo after")
        .await
        .expect_err("past its deadline");
    assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
    assert!(e.message.contains("before"), "{}", e.message);
    assert!(e.message.contains("shell lives on"), "{}", e.message);
    assert_timed_out(&e, Duration::from_millis(2000));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // The rest of the command ran once its processes were gone.
    assert_eq!(
        e.details["shell"]["stdout"], "before\nafter\n",
        "{}",
        e.message
    );
    let r = run("echo $X; pwd; cat file; kill -0 $! && echo job alive").await;
    assert_eq!(body(&r), "5\n/tmp\nkept\njob alive");

    let e = run("Y=1; while :; do :; done")
        .await
        .expect_err("past its deadline");
    assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
    assert!(e.message.contains("a fresh shell"), "{}", e.message);
    let r = run("echo ${Y:-unset}").await;
    assert_eq!(body(&r), "unset");
    tool.end_session(id).await;
}

#[tokio::test]
async fn ending_a_session_leaves_no_process_of_its_user() {
    let place = Place::new();
    let uid = 65526;
    let (tool, limits, _w) = session_tool(&place, uid, "", "");
    let id = SessionId::fresh();
    let r = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "sleep 300 >/dev/null 2>&1 & (sleep 301 &) ; echo started"}),
    )
    .await;
    assert!(text(&r).contains("started"), "{}", text(&r));
    assert!(processes_of(uid) >= 3, "the shell and its jobs run");
    tool.end_session(id).await;
    assert_eq!(processes_left(uid), 0, "nothing of the session is left");
}

#[tokio::test]
async fn a_fork_bomb_in_a_session_is_contained_and_the_next_command_answers() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65525, "processes = 32", "timeout = \"5s\"");
    let id = SessionId::fresh();
    let r = call_in(&tool, &limits, id, json!({"command": "b() { b | b & }; b"})).await;
    // Whatever the bomb's own answer, it is an answer.
    eprintln!("the bomb: {}", text(&r));
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let r = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "ls -d / && echo answered"}),
    )
    .await;
    let took = started.elapsed();
    let content = r.as_ref().map(|o| o.content.clone()).unwrap_or_default();
    eprintln!("after the bomb, in {took:?}: {content}");
    assert!(content.contains("/\nanswered"), "{}", text(&r));
    assert!(took < Duration::from_secs(3), "took {took:?}: {}", text(&r));
    // Found still full of the bomb, the session was reset (and the answer says so), or the
    // bomb had died down: either way the command ran in full, and so does the next.
    assert!(!content.to_lowercase().contains("fork"), "{content}");
    let r = call_in(&tool, &limits, id, json!({"command": "echo $((6 * 7))"})).await;
    assert_eq!(body(&r), "42");
    tool.end_session(id).await;
    assert_eq!(processes_left(65525), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_sessions_bombed_at_once_answer_their_next_commands() {
    let place = Place::new();
    let uid = 65524;
    let (tool, limits, _w) = session_tool(&place, uid, "processes = 32", "timeout = \"10s\"");
    let ids: Vec<SessionId> = (0..10).map(|_| SessionId::fresh()).collect();
    let bombs = ids.iter().map(|&id| {
        let (tool, limits) = (tool.clone(), limits);
        async move { call_in(&tool, &limits, id, json!({"command": "b() { b | b & }; b"})).await }
    });
    futures_join(bombs).await;
    let started = Instant::now();
    let next = ids.iter().enumerate().map(|(i, &id)| {
        let (tool, limits) = (tool.clone(), limits);
        async move {
            let r = call_in(
                &tool,
                &limits,
                id,
                json!({"command": format!("ls -d / && echo {i}")}),
            )
            .await;
            (i, started.elapsed(), r)
        }
    });
    for (i, took, r) in futures_join(next).await {
        eprintln!("session {i} answered after the bombs in {took:?}");
        let content = r.as_ref().map(|o| o.content.clone()).unwrap_or_default();
        assert!(content.starts_with(&format!("/\n{i}\n")), "{}", text(&r));
        assert!(!content.to_lowercase().contains("fork"), "{content}");
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }
    for id in ids {
        tool.end_session(id).await;
    }
    assert_eq!(processes_left(uid), 0);
}

#[tokio::test]
async fn a_session_dropped_mid_command_leaves_no_process() {
    let place = Place::new();
    let uid = 65523;
    let (tool, limits, _w) = session_tool(&place, uid, "", "");
    let id = SessionId::fresh();
    let call = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "sleep 60 & sleep 60"}),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), call)
            .await
            .is_err(),
        "still running"
    );
    // The call's future, and with it the shell, is gone: so is everything it started.
    assert_eq!(processes_left(uid), 0);
    // The session goes on, in a fresh shell, and its answer says so: no answer said it.
    let r = call_in(&tool, &limits, id, json!({"command": "echo again"})).await;
    let said = body(&r);
    assert!(said.starts_with("again\n"), "{said}");
    assert!(said.contains("this session's shell was lost"), "{said}");
    tool.end_session(id).await;
}

/// The protections in force, as an answer's `isolation` says them, for a shell run as `uid`.
fn assert_isolated(isolation: &serde_json::Value, uid: u32) {
    assert_eq!(isolation["user"], format!("{uid}:{uid}"), "{isolation}");
    for key in [
        "user_namespace",
        "pid_namespace",
        "network_namespace",
        "private_tmp",
        "seccomp",
        "new_namespaces_denied",
        "rlimits",
    ] {
        assert_eq!(isolation[key], true, "{key}: {isolation}");
    }
    assert!(isolation["landlock_abi"].as_u64() >= Some(3), "{isolation}");
}

#[tokio::test]
async fn session_answers_say_what_was_in_force_as_calls_do() {
    let place = Place::new();
    let uid = 65520;
    let (tool, limits, _w) = session_tool(&place, uid, "", "timeout = \"2s\"");
    let id = SessionId::fresh();
    let ok = call_in(&tool, &limits, id, json!({"command": "echo hi"}))
        .await
        .expect("echo runs");
    assert_isolated(&ok.details["isolation"], uid);
    // The same shell: the same report, on failures too.
    let failed = call_in(&tool, &limits, id, json!({"command": "false"}))
        .await
        .expect_err("false fails");
    assert_eq!(failed.kind, ErrorKind::ExitStatus, "{}", failed.message);
    assert_isolated(&failed.details["isolation"], uid);
    assert_eq!(failed.details["isolation"], ok.details["isolation"]);
    // A timeout closes the shell before answering: the answer still says what held it.
    let late = call_in(&tool, &limits, id, json!({"command": "sleep 30"}))
        .await
        .expect_err("past its deadline");
    assert_eq!(late.kind, ErrorKind::Timeout, "{}", late.message);
    assert_isolated(&late.details["isolation"], uid);
    // And the fresh shell after it reports its own.
    let again = call_in(&tool, &limits, id, json!({"command": "true"}))
        .await
        .expect("true runs");
    assert_isolated(&again.details["isolation"], uid);
    tool.end_session(id).await;
}

/// The first command of a session, `cd sub && X=kept`, run by `run_on` on a thread of its
/// own that then ends; `idle` later, the second command on the test's own: what it printed,
/// and the folder it should name.
async fn first_on_another_thread(
    uid: u32,
    run_on: impl FnOnce(Box<dyn FnOnce() -> Result<Output, ToolError> + Send>) + Send + 'static,
    idle: Duration,
) -> (String, std::path::PathBuf) {
    let place = Place::new();
    let (tool, limits, w) = session_tool(&place, uid, "", "");
    let id = SessionId::fresh();
    let (t, handle) = (tool.clone(), tokio::runtime::Handle::current());
    let first = Box::new(move || {
        handle.block_on(call_in(
            &t,
            &limits,
            id,
            json!({"command": "cd sub && X=kept && echo set"}),
        ))
    });
    tokio::task::spawn_blocking(move || run_on(first))
        .await
        .unwrap();
    tokio::time::sleep(idle).await;
    let r = call_in(&tool, &limits, id, json!({"command": "pwd; echo $X"})).await;
    tool.end_session(id).await;
    assert_eq!(processes_left(uid), 0);
    (text(&r), w.path().join("sub").canonicalize().unwrap())
}

/// The helper's parent-death signal fires when the *thread* that spawned it ends: a session
/// must not end with the thread its first command happened to run on (a thread per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_the_thread_that_started_its_shell() {
    let (printed, sub) = first_on_another_thread(
        65522,
        |first| {
            let r = std::thread::spawn(first).join().unwrap();
            assert!(text(&r).starts_with("set"), "{}", text(&r));
        },
        Duration::from_millis(300),
    )
    .await;
    assert!(
        printed.starts_with(&format!("{}\nkept\n", sub.display())),
        "{printed}"
    );
}

/// tokio's blocking threads end after 10 s idle: a session whose shell was started from one
/// (`spawn_blocking`) keeps it past that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_started_on_a_blocking_thread_survives_its_idle_end() {
    let (printed, sub) = first_on_another_thread(
        65521,
        |first| {
            let r = first();
            assert!(text(&r).starts_with("set"), "{}", text(&r));
        },
        Duration::from_secs(13),
    )
    .await;
    assert!(
        printed.starts_with(&format!("{}\nkept\n", sub.display())),
        "{printed}"
    );
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// A session's commands are held to the CPU time limit as one call's are, and the answer names
/// it, read from what the kernel counted: a program that used its CPU time is
/// `limit_exceeded` and the shell lives on; a loop the shell runs itself ends the shell (its
/// CPU counts every command it ran itself) and says so; a program that merely exits with the
/// status SIGXCPU gives is an `exit_status`.
#[tokio::test]
async fn a_sessions_cpu_loops_are_answered_as_the_cpu_time_limit() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65519, "cpu_time = \"1s\"", "timeout = \"60s\"");
    let id = SessionId::fresh();
    let r = call_in(&tool, &limits, id, json!({"command": "X=kept"})).await;
    assert!(r.is_ok(), "{}", text(&r));
    let program = json!({"command": "sh -c 'while :; do :; done'"});
    let e = call_in(&tool, &limits, id, program).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    assert!(e.message.contains("CPU time limit of 1s"), "{}", e.message);
    let r = call_in(&tool, &limits, id, json!({"command": "echo $X"})).await;
    assert_eq!(body(&r), "kept", "the shell lived on");

    let own = json!({"command": "sh -c 'kill -XCPU $$'; echo status $?"});
    let r = call_in(&tool, &limits, id, own).await;
    assert!(
        r.is_ok() && body(&r).starts_with("status 152"),
        "{}",
        text(&r)
    );
    let exited = json!({"command": "sh -c 'exit 152'"});
    let e = call_in(&tool, &limits, id, exited).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::ExitStatus, "{}", e.message);

    let builtin = json!({"command": "while :; do :; done"});
    let e = call_in(&tool, &limits, id, builtin).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    assert!(
        e.message
            .contains("the session's shell used its CPU time limit of 1s"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("the next command starts in"),
        "{}",
        e.message
    );
    let r = call_in(&tool, &limits, id, json!({"command": "echo ${X:-fresh}"})).await;
    assert_eq!(body(&r), "fresh");
    tool.end_session(id).await;
}

/// A command that comes while the session's shell runs another runs at once, in the same
/// sandbox: each waits for a file the other makes, which a session that ran them one after
/// the other would never see (the first would run into its deadline). The second starts
/// from the state the last command left, and its own `cd` and `export` stay its own.
#[tokio::test]
async fn overlapping_commands_run_at_once_from_the_session_s_state() {
    let place = Place::new();
    let (tool, limits, w) = session_tool(&place, 65518, "", "");
    let id = SessionId::fresh();
    let run = |command: &str| call_in(&tool, &limits, id, json!({ "command": command }));
    body(&run("cd sub && export V=1 && W=2").await);
    let (first, second) = tokio::join!(
        run("touch /tmp/a; until [ -e /tmp/b ]; do sleep 0.05; done; echo first"),
        run("until [ -e /tmp/a ]; do sleep 0.05; done; touch /tmp/b; \
             pwd; echo V=$V W=${W:-unset} $(id -u); cd /tmp; export V=changed"),
    );
    assert_eq!(body(&first), "first");
    let sub = w.path().join("sub").canonicalize().unwrap();
    assert_eq!(
        body(&second),
        format!("{}\nV=1 W=unset 65518", sub.display())
    );
    let after = run("pwd; echo V=$V W=$W").await;
    assert_eq!(body(&after), format!("{}\nV=1 W=2", sub.display()));
    tool.end_session(id).await;
}

/// A timeout of a command that overlaps another ends that command alone: the other one, the
/// session's shell and its files live on.
#[tokio::test]
async fn a_timeout_of_an_overlapping_command_ends_only_it() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65517, "", "");
    let id = SessionId::fresh();
    let call = |args: serde_json::Value| call_in(&tool, &limits, id, args);
    body(&call(json!({"command": "cd /tmp; X=kept"})).await);
    let beside = async {
        let stopped = call(json!({
            "command": "until [ -e /tmp/a ]; do sleep 0.05; done; echo started; sleep 300",
            "timeout": 1,
        }))
        .await;
        let done = call(json!({"command": "touch /tmp/done; echo told"})).await;
        (stopped, done)
    };
    let (first, (stopped, done)) = tokio::join!(
        call(
            json!({"command": "touch /tmp/a; until [ -e /tmp/done ]; do sleep 0.05; done; echo first"})
        ),
        beside,
    );
    let e = stopped.expect_err("past its deadline");
    assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
    assert!(e.message.contains("session lives on"), "{}", e.message);
    assert!(e.message.contains("started"), "{}", e.message);
    assert_eq!(body(&done), "told");
    assert_eq!(body(&first), "first");
    let r = call(json!({"command": "echo $X; pwd; ls a done"})).await;
    assert_eq!(body(&r), "kept\n/tmp\na\ndone");
    tool.end_session(id).await;
}

/// A client's pipe (`Executor::pipe`): a shell beside the session's, raw bytes through.
fn pipe<'a>(command: &str, input: Option<&'a [u8]>, output: u64, secs: u64) -> Pipe<'a> {
    Pipe {
        command: command.to_owned(),
        input: input.map_or(PipeInput::Nothing, PipeInput::Bytes),
        output,
        deadline: Instant::now() + Duration::from_secs(secs),
    }
}

#[tokio::test]
async fn a_clients_pipe_takes_bytes_made_as_it_runs_and_ends_at_once_when_their_maker_gives_up() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65515, "", "");
    let id = SessionId::fresh();
    let r = call_in(&tool, &limits, id, json!({"command": "cd /tmp"})).await;
    assert!(r.is_ok(), "{}", text(&r));
    let piece: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    // Made piece by piece while `cat` runs.
    let streamed = |pieces: Vec<std::io::Result<Vec<u8>>>, len: u64| {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            for p in pieces {
                let _ = tx.send(p).await;
            }
        });
        Pipe {
            command: "cat".into(),
            input: PipeInput::Stream(Stream::new(len, rx)),
            output: 1 << 20,
            deadline: Instant::now() + Duration::from_secs(20),
        }
    };
    let whole = streamed((0..3).map(|_| Ok(piece.clone())).collect(), 300_000);
    let Piping::Ran(Ok(piped)) = tool.pipe(id, &whole).await else {
        panic!("the host shell starts shells beside the session's");
    };
    assert!(
        piped.stdout == piece.repeat(3),
        "{} bytes back",
        piped.stdout.len()
    );
    assert_eq!(piped.status, Some(0));
    // Its maker gives up after a piece: the transfer fails now, not at its deadline.
    let started = Instant::now();
    let halfway = streamed(
        vec![Ok(piece.clone()), Err(std::io::Error::other("no"))],
        300_000,
    );
    let Piping::Ran(Err(e)) = tool.pipe(id, &halfway).await else {
        panic!("a transfer whose bytes stopped coming fails");
    };
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // Fewer bytes than it said: the same.
    let short = streamed(vec![Ok(piece.clone())], 300_000);
    let ran = tool.pipe(id, &short).await;
    assert!(matches!(ran, Piping::Ran(Err(_))), "{ran:?}");
    // The next transfer is carried as ever.
    let again = streamed(vec![Ok(piece.clone())], 100_000);
    let Piping::Ran(Ok(piped)) = tool.pipe(id, &again).await else {
        panic!("ran");
    };
    assert!(piped.stdout == piece && piped.status == Some(0));
    let r = call_in(&tool, &limits, id, json!({"command": "pwd"})).await;
    assert_eq!(body(&r), "/tmp", "the session lives on");
    tool.end_session(id).await;
}

#[tokio::test]
async fn a_clients_pipe_runs_beside_the_session_raw_and_stops_at_its_deadline() {
    let place = Place::new();
    let (tool, limits, _w) = session_tool(&place, 65516, "", "");
    let id = SessionId::fresh();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let echo = pipe("cat", Some(&bytes), 1 << 20, 10);
    assert!(matches!(tool.pipe(id, &echo).await, Piping::NoShellYet));
    // What the session's shell holds takes no part: the pipe's shell is a fresh one.
    let r = call_in(
        &tool,
        &limits,
        id,
        json!({"command": "cat() { echo lie; }; cd /tmp"}),
    )
    .await;
    assert!(r.is_ok(), "{}", text(&r));
    let Piping::Ran(Ok(piped)) = tool.pipe(id, &echo).await else {
        panic!("the host shell starts shells beside the session's");
    };
    assert!(piped.stdout == bytes, "{} bytes back", piped.stdout.len());
    assert_eq!((piped.status, piped.overflowed), (Some(0), false));
    let Piping::Ran(Ok(cut)) = tool.pipe(id, &pipe("cat", Some(&bytes), 1000, 10)).await else {
        panic!("ran");
    };
    assert!(cut.overflowed && cut.stdout == bytes[..1000], "{cut:?}");
    let Piping::Ran(Ok(failed)) = tool
        .pipe(id, &pipe("sh -c 'echo no >&2; exit 3'", None, 99, 10))
        .await
    else {
        panic!("ran");
    };
    assert_eq!((failed.status, failed.stderr.trim()), (Some(3), "no"));
    // One shell carries transfer after transfer. Input a command leaves unread (past a
    // pipe's buffer) never reaches it, though it holds lines like those it reads.
    let carried = pids_of(65516);
    let mut lines = vec![b'x'; 300_000];
    lines.extend_from_slice(b"\n0\nsomething\ntouch /tmp/pwned\n");
    let Piping::Ran(Ok(read)) = tool
        .pipe(id, &pipe("head -c 3", Some(&lines), 99, 10))
        .await
    else {
        panic!("ran");
    };
    assert_eq!(
        (read.stdout.as_slice(), read.status),
        (&b"xxx"[..], Some(0))
    );
    for _ in 0..5 {
        let Piping::Ran(Ok(piped)) = tool.pipe(id, &echo).await else {
            panic!("ran");
        };
        assert!(piped.stdout == bytes && piped.status == Some(0));
    }
    assert_eq!(pids_of(65516), carried, "the same shells, none left behind");
    let Piping::Ran(Ok(none)) = tool
        .pipe(id, &pipe("test ! -e /tmp/pwned", None, 99, 10))
        .await
    else {
        panic!("ran");
    };
    assert_eq!(none.status, Some(0), "no input was run as a command");
    let Piping::Ran(Err(late)) = tool.pipe(id, &pipe("sleep 300", None, 99, 1)).await else {
        panic!("past its deadline");
    };
    assert_eq!(late.kind, ErrorKind::Timeout, "{}", late.message);
    // A killed process stays in /proc until the kernel has torn it down.
    let until = Instant::now() + Duration::from_secs(5);
    while commands_of(65516).contains(&"sleep".to_owned()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !commands_of(65516).contains(&"sleep".to_owned()),
        "the sleep is gone"
    );
    let r = call_in(&tool, &limits, id, json!({"command": "pwd"})).await;
    assert_eq!(body(&r), "/tmp", "the session lives on");
    tool.end_session(id).await;
    assert_eq!(processes_left(65516), 0);
}
