//! `warden exec` with the shipped host shell: a whole program in the sandbox a call of the
//! tool gets, its streams passed through, its exit status warden's, its signals passed on,
//! and nothing of it left once it ends.

use crate::common::hang::Watch;
use crate::common::terminal::Terminal;
use crate::common::{pids_of, processes_of};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use warden_test_support::servers::EchoServer;

/// A temp toolbox holding the shipped `policies/shell-host.toml`, run as a user of its own
/// (so that what it leaves behind can be counted), with `grants` lines added.
struct Env {
    dir: tempfile::TempDir,
    uid: u32,
}

impl Env {
    fn new(uid: u32, grants: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // The command runs as another user: the granted folder must be reachable by others.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        std::fs::create_dir(dir.path().join("workspace")).unwrap();
        std::fs::write(dir.path().join("workspace/README.txt"), "granted file\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "MARKER-exec-5e2\n").unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/shell-host.toml");
        let text = std::fs::read_to_string(shipped)
            .unwrap()
            .replace(
                "# user = \"65534:65534\"",
                &format!("user = \"{uid}:{uid}\""),
            )
            .replace("[grants]\n", &format!("[grants]\n{grants}\n"));
        assert!(text.contains(&format!("\nuser = \"{uid}")), "{text}");
        std::fs::write(dir.path().join("policies/shell-host.toml"), text).unwrap();
        assert_eq!(processes_of(uid), 0, "user {uid} already runs processes");
        Self { dir, uid }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .arg("exec")
            .args(args)
            .env("WARDEN_TOOLBOX", self.dir.path().join("policies"))
            .env("WARDEN_HOME", self.dir.path().join("home"))
            .env("WARDEN_TEST_MARKER", "MARKER-env-77a");
        command
    }

    /// `warden exec ARGS` started with its streams piped, under a watch that fails a hang
    /// within a minute, saying where each process waited (one once hung in CI: a blocking
    /// relay, since mended).
    fn spawn(&self, args: &[&str]) -> (Child, Watch) {
        let child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("warden runs");
        let watch = Watch::new(child.id(), Duration::from_secs(60));
        (child, watch)
    }

    /// `warden exec ARGS`, fed `input`.
    fn exec(&self, args: &[&str], input: &[u8]) -> Output {
        let (mut child, _watch) = self.spawn(args);
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Makes the tool require a person's review of each call.
    fn require_review(&self) {
        let path = self.dir.path().join("policies/shell-host.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(path, format!("{text}\n[review]\nrequired = true\n")).unwrap();
    }

    /// The call log's records, its seals left out.
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("home/calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["event"] != "seal")
            .collect()
    }

    /// Everything of the sandbox's user is gone, soon.
    fn leaves_nothing(&self) {
        assert!(
            eventually(Duration::from_secs(5), || processes_of(self.uid) == 0),
            "processes of {} left: {:?}",
            self.uid,
            pids_of(self.uid)
        );
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_program_runs_in_the_sandbox_a_call_gets() {
    let env = Env::new(65_471, "");
    let script = "id -u; cat README.txt; env; cat ../secret.txt; echo x > planted";
    let out = env.exec(&["host-shell", "--", "/bin/sh", "-c", script], b"");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.starts_with("65471\ngranted file\n"),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("MARKER-env-77a"), "warden's env: {stdout}");
    for name in stdout.lines().skip(2).filter_map(|l| l.split_once('=')) {
        assert!(["PATH", "LANG", "PWD"].contains(&name.0), "{name:?} leaked");
    }
    assert!(!stdout.contains("MARKER-exec-5e2"), "{stdout}");
    // The secret is not in the sandbox's root; the root is a read-only mount.
    assert!(stderr.contains("No such file"), "{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert!(!env.dir.path().join("workspace/planted").exists());
    // The last command's failure is the program's status, and warden's.
    let code = out.status.code().unwrap();
    assert!(code != 0 && code != 125, "{code}: {stderr}");
    env.leaves_nothing();
}

/// A root with a `guest` is where the program sees it, and its host path is not there, even
/// below a folder the program's user cannot pass through.
#[test]
fn a_program_sees_its_root_at_the_guest_path() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new(65_469, "");
    let path = env.dir.path().join("policies/shell-host.toml");
    let policy = std::fs::read_to_string(&path).unwrap();
    let moved = policy.replace(
        "host = \"../workspace\", access",
        "host = \"../workspace\", guest = \"/workspace\", access",
    );
    assert_ne!(policy, moved);
    std::fs::write(&path, moved).unwrap();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let host = env.dir.path().join("workspace");
    let script = format!("pwd; cat /workspace/README.txt; ls {}", host.display());
    let out = env.exec(&["host-shell", "--", "/bin/sh", "-c", &script], b"");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout, "/workspace\ngranted file\n", "{stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");
    env.leaves_nothing();
}

#[test]
fn stdin_flows_through_and_the_exit_status_is_wardens() {
    let env = Env::new(65_472, "");
    let out = env.exec(&["host-shell", "--", "wc", "-l"], b"a\nb\n");
    assert_eq!(text(&out.stdout).trim(), "2", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    let out = env.exec(&["host-shell", "--", "sh", "-c", "exit 3"], b"");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = env.exec(&["host-shell", "--", "sh", "-c", "kill -9 $$"], b"");
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    // No program: the tool's shell, reading its commands on stdin.
    let out = env.exec(&["host-shell"], b"cd /tmp && pwd\nexit 4\n");
    assert_eq!(text(&out.stdout), "/tmp\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(4));
    // Each is a call record marked `exec`, and the audit counts them.
    let records: Vec<Value> = env
        .records()
        .into_iter()
        .filter(|r| r["exec"] == true)
        .collect();
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(
        records[1]["argv"],
        serde_json::json!(["sh", "-c", "exit 3"])
    );
    assert_eq!(records[1]["exit_status"], 3);
    assert_eq!(records[1]["outcome"], "exit_status");
    assert_eq!(records[0]["outcome"], "success");
    assert!(records[0]["policy_digest"].is_string(), "{:?}", records[0]);
    let usage = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["audit", "--usage", "--json"])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.dir.path().join("home"))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&usage.stdout).unwrap();
    assert_eq!(report["tools"][0]["execs"], 4, "{report}");
}

/// Runs `warden exec` writing `bytes` of zeros to a reader that counts them; answers the
/// count and warden's largest resident set, in KiB.
fn stream(env: &Env, bytes: u64) -> (u64, i64) {
    let mut child = env
        .command(&[
            "host-shell",
            "--",
            "head",
            "-c",
            &bytes.to_string(),
            "/dev/zero",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut counted = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stdout.read(&mut buf).unwrap() {
            0 => break,
            n => counted += n as u64,
        }
    }
    (counted, max_rss_kib(child))
}

/// Waits for `child` and answers its largest resident set, in KiB.
fn max_rss_kib(child: Child) -> i64 {
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    usage.ru_maxrss
}

#[test]
fn a_long_stream_passes_without_warden_holding_it() {
    let env = Env::new(65_473, "");
    let (small, small_rss) = stream(&env, 1 << 20);
    let (large, large_rss) = stream(&env, 200_000_000);
    assert_eq!((small, large), (1 << 20, 200_000_000));
    // 200 MB through warden leave its memory where 1 MiB does: it streams.
    assert!(
        large_rss < small_rss + 16 * 1024,
        "{large_rss} KiB for 200 MB against {small_rss} KiB for 1 MiB"
    );
}

#[test]
fn a_program_past_its_time_limit_is_killed_and_leaves_nothing() {
    let env = Env::new(65_474, "");
    let start = Instant::now();
    let out = env.exec(
        &[
            "host-shell",
            "--timeout",
            "1s",
            "--",
            "sh",
            "-c",
            "sleep 100 & sleep 100",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("time limit of 1s"),
        "{}",
        text(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    env.leaves_nothing();
    // A fork bomb meets the policy's process limit, then the time limit.
    let out = env.exec(
        &[
            "host-shell",
            "--timeout",
            "3s",
            "--",
            "sh",
            "-c",
            "b() { b | b & }; b; sleep 60",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    env.leaves_nothing();
}

#[test]
fn sigterm_reaches_the_program_and_the_sandbox_ends() {
    let env = Env::new(65_475, "");
    let script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done";
    let mut child = env
        .command(&["host-shell", "--timeout", "none", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    stdout.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(rest, "got-term\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    env.leaves_nothing();
    let record = env
        .records()
        .into_iter()
        .find(|r| r["exec"] == true)
        .unwrap();
    assert_eq!(record["unlimited_time"], true, "{record}");
    // A program that ignores SIGTERM is killed once its grace period is over.
    let script = "trap '' TERM; echo ready; while :; do sleep 0.1; done";
    let mut child = env
        .command(&["host-shell", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
    let start = Instant::now();
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    env.leaves_nothing();
}

#[test]
fn at_a_terminal_the_program_gets_one_that_follows_its_size() {
    let env = Env::new(65_479, "");
    let script = "tty; stty size; while read x; do stty size; done; exit 5";
    let command = env.command(&["host-shell", "--", "sh", "-c", script]);
    let terminal = Terminal::start(command, 24, 80);
    terminal.wait_for("24 80");
    assert!(
        terminal.screen().starts_with("/dev/pts/"),
        "{}",
        terminal.screen()
    );
    terminal.resize(30, 100);
    // The new size reaches the program's terminal a moment after warden hears of it.
    terminal.wait_until("30 100", || terminal.type_keys(b"\r"));
    // ^D at the start of a line ends the input of a terminal in its usual mode.
    terminal.type_keys(b"\x04");
    let (code, shown) = terminal.wait();
    assert_eq!(code, Some(5), "{shown}");
    env.leaves_nothing();
}

#[test]
fn an_interactive_bash_at_a_terminal_has_job_control() {
    let env = Env::new(65_480, "");
    let command = env.command(&["host-shell", "--", "bash", "--norc", "--noprofile", "-i"]);
    let terminal = Terminal::start(command, 24, 80);
    terminal.type_keys(b"echo sta''rted\r");
    terminal.wait_for("started");
    // ^C reaches the program's foreground job, not warden (whose terminal is raw).
    terminal.type_keys(b"sleep 60\r");
    std::thread::sleep(Duration::from_millis(300));
    terminal.type_keys(b"\x03");
    terminal.type_keys(b"echo after-\"$?\"\r");
    terminal.wait_for("after-130");
    // ^Z stops it and hands the terminal back to bash; `fg` gives it back to the job.
    terminal.type_keys(b"sleep 3\r");
    std::thread::sleep(Duration::from_millis(300));
    terminal.type_keys(b"\x1a");
    terminal.wait_for("Stopped");
    terminal.type_keys(b"fg\r");
    terminal.type_keys(b"echo fg-\"$?\"\r");
    terminal.wait_for("fg-0");
    // Raw mode, as an editor sets it: a key reaches the program without a newline.
    terminal.type_keys(b"stty raw -echo; head -c 1 | od -An -c; stty sane; exit 6\r");
    std::thread::sleep(Duration::from_millis(300));
    terminal.type_keys(b"q");
    terminal.wait_for("   q");
    let (code, shown) = terminal.wait();
    assert_eq!(code, Some(6), "{shown}");
    env.leaves_nothing();
}

#[test]
fn secret_values_are_redacted_from_the_stream_however_it_is_cut() {
    let env = Env::new(65_476, "env_from_host = [\"WARDEN_TEST_EXEC_TOKEN\"]");
    // One byte a write: the value crosses every read warden makes; then whole.
    let script = "v=$WARDEN_TEST_EXEC_TOKEN; for ((i = 0; i < ${#v}; i++)); do \
                  printf '%s' \"${v:i:1}\"; sleep 0.01; done; echo; echo \"$v\"";
    let out = env
        .command(&["host-shell", "--", "bash", "-c", script])
        .env("WARDEN_TEST_EXEC_TOKEN", "tok-4d9f0c2b")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "[redacted:WARDEN_TEST_EXEC_TOKEN]\n[redacted:WARDEN_TEST_EXEC_TOKEN]\n",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_net_grant_is_reached_through_the_gate_and_the_rest_refused() {
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in server.incoming().flatten().take(2) {
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nexec-reach!\n",
            );
        }
    });
    let env = Env::new(65_477, &format!("net = [\"127.0.0.1:{port}\"]"));
    let script =
        format!("curl -sS http://127.0.0.1:{port}/; curl -sS -m 5 http://127.0.0.2:{port}/");
    let out = env.exec(&["host-shell", "--", "sh", "-c", &script], b"");
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("exec-reach!\n"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("warden denied http://127.0.0.2"),
        "{stdout}"
    );
    let records = env.records();
    let denied = records.iter().find(|r| r["event"] == "denied");
    assert!(denied.is_some(), "{records:?}");
    let exec = records.iter().find(|r| r["exec"] == true).unwrap();
    assert_eq!(exec["denied_count"], 1, "{exec}");
    assert!(
        exec["usage"]["net_connections"].as_u64() >= Some(2),
        "{exec}"
    );
}

#[test]
fn a_credential_reaches_its_host_and_the_program_never_holds_it() {
    let server = EchoServer::http();
    let port = server.port;
    let env = Env::new(65_481, &credential_grants(port));
    // The program sends its placeholder in the credential's header and in one of its own.
    let script = format!(
        "echo \"env=$API_TOKEN\"; curl -sS -H \"X-Mine: $API_TOKEN\" http://127.0.0.1:{port}/"
    );
    let out = env
        .command(&["host-shell", "--", "sh", "-c", &script])
        .env("WARDEN_TEST_EXEC_CRED", EXEC_CREDENTIAL)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("env=warden-placeholder-api_token-"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert!(!stdout.contains(EXEC_CREDENTIAL), "{stdout}");
    let received = server.received().join("\n").to_ascii_lowercase();
    assert!(
        received.contains(&format!("authorization: bearer {EXEC_CREDENTIAL}")),
        "{received}"
    );
    assert_eq!(received.matches(EXEC_CREDENTIAL).count(), 1, "{received}");
    env.leaves_nothing();
}

/// The value of the credential the exec tests grant (from `WARDEN_TEST_EXEC_CRED`).
pub(crate) const EXEC_CREDENTIAL: &str = "cred-91be7d3a55";

/// Grants reaching 127.0.0.1:`port`, with a credential for it in `Authorization`, over plain
/// HTTP, its placeholder in `API_TOKEN`.
pub(crate) fn credential_grants(port: u16) -> String {
    format!(
        "net = [\"127.0.0.1:{port}\"]\nnet_credentials = [{{ host = \"127.0.0.1\", \
         header = \"Authorization\", from_host = \"WARDEN_TEST_EXEC_CRED\", prefix = \"Bearer \", \
         env = \"API_TOKEN\", allow_plain_http = true }}]"
    )
}

#[test]
fn a_parent_drives_the_shell_command_by_command_as_langchains_shell_tool_does() {
    use std::io::BufRead;
    let env = Env::new(65_479, "");
    let (mut child, _watch) = env.spawn(&["host-shell", "--timeout", "none", "--", "bash"]);
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // One command at a time, each answered before the next is written: the shell waits on
    // its stdin in between, and `cd` and variables carry over.
    let mut run = |command: &str, marker: &str| -> Vec<String> {
        writeln!(stdin, "{command}; printf '\\n{marker} %s\\n' $?").unwrap();
        stdin.flush().unwrap();
        let mut out = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line.starts_with(marker) {
                out.push(line);
                return out;
            }
            out.push(line);
        }
        panic!("the shell ended before {marker}: {out:?}");
    };
    assert_eq!(run("cd /tmp && X=kept", "__M1__"), ["", "__M1__ 0"]);
    assert_eq!(
        run("pwd; echo $X; false", "__M2__"),
        ["/tmp", "kept", "", "__M2__ 1"]
    );
    // Its input closed, the shell exits with its last command's status (the marker's).
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.leaves_nothing();
}

#[test]
fn every_stream_warden_relays_is_non_blocking_piped_and_at_a_terminal() {
    // A blocking one hung a shell driven command by command, in about one run in twelve at a
    // terminal: tokio read it after a stale wake-up and blocked the thread that relays input.
    let env = Env::new(65_470, "");
    let (mut piped, _watch) = env.spawn(&["host-shell", "--", "sleep", "3"]);
    let streams = relayed_streams(&env, piped.id());
    // The helper's stdin, stdout, stderr and reports.
    assert_eq!(streams.len(), 4, "{streams:?}");
    none_blocks(&streams);
    piped.kill().unwrap();
    piped.wait().unwrap();
    env.leaves_nothing();

    let terminal = Terminal::start(env.command(&["host-shell", "--", "sleep", "3"]), 24, 80);
    let streams = relayed_streams(&env, terminal.pid());
    // The terminal's side twice (input, output), beside the pipes still open.
    let sides = streams.iter().filter(|(id, _)| id.starts_with("/dev/ptmx"));
    assert_eq!(sides.count(), 2, "{streams:?}");
    none_blocks(&streams);
    let (code, shown) = terminal.wait();
    assert_eq!(code, Some(0), "{shown}");
    env.leaves_nothing();
}

/// Fails naming every stream that blocks.
fn none_blocks(streams: &[(String, bool)]) {
    let blocking: Vec<_> = streams
        .iter()
        .filter(|(_, nonblocking)| !nonblocking)
        .collect();
    assert!(blocking.is_empty(), "blocking: {blocking:?} of {streams:?}");
}

/// Once `env`'s program runs under warden `pid`: warden's pipes and terminal sides beyond its
/// own stdin, stdout and stderr (and what it inherited from this test), each with whether it
/// is non-blocking.
fn relayed_streams(env: &Env, pid: u32) -> Vec<(String, bool)> {
    assert!(
        eventually(Duration::from_secs(10), || processes_of(env.uid) > 0),
        "the program never started"
    );
    // A pipe by its inode, a terminal's side by its index: what names one stream.
    let identity = |fd: &Path, info: &str| {
        let target = std::fs::read_link(fd).ok()?.display().to_string();
        let index = info.lines().find(|l| l.starts_with("tty-index:"));
        (target.starts_with("pipe:") || target == "/dev/ptmx")
            .then(|| format!("{target} {}", index.unwrap_or_default()))
    };
    let open = |proc: &str| -> Vec<(u32, String, String)> {
        std::fs::read_dir(format!("/proc/{proc}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let fd = e.file_name().to_str()?.parse::<u32>().ok()?;
                let info = std::fs::read_to_string(format!("/proc/{proc}/fdinfo/{fd}")).ok()?;
                Some((fd, identity(&e.path(), &info)?, info))
            })
            .collect()
    };
    let inherited: Vec<String> = open("self").into_iter().map(|(_, id, _)| id).collect();
    open(&pid.to_string())
        .into_iter()
        .filter(|(fd, id, _)| *fd > 2 && !inherited.contains(id))
        .map(|(_, id, info)| {
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                .unwrap();
            (id, flags & nix::libc::O_NONBLOCK as u32 != 0)
        })
        .collect()
}

#[test]
fn an_unknown_tool_is_refused_with_the_tools_exec_runs() {
    let env = Env::new(65_478, "");
    let out = env.exec(&["no-such-tool", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no tool named `no-such-tool`"), "{stderr}");
    assert!(stderr.contains("host-shell"), "{stderr}");
    // A policy that does not load is warned about once, and the refusal says tools may be
    // missing for it.
    let policies = env.dir.path().join("policies");
    let shipped = std::fs::read_to_string(policies.join("shell-host.toml")).unwrap();
    let moved = shipped.replace("name = \"host-shell\"", "name = \"moved-shell\"");
    let moved = moved.replace("../workspace", "../no-such-folder");
    assert_ne!(moved, shipped);
    std::fs::write(policies.join("moved.toml"), moved).unwrap();
    let out = env.exec(&["moved-shell", "--", "true"], b"");
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("no-such-folder").count(), 1, "{stderr}");
    assert!(
        stderr.contains("1 of the toolbox's policies did not load"),
        "{stderr}"
    );
}

/// `warden exec` loads the toolbox's docker and host tools alone: a wasm policy is read, its
/// component is not, so one that would not load (here under `--strict`, which refuses a
/// toolbox with any policy that does not) neither stops a program nor costs it the load.
#[test]
fn a_program_runs_without_loading_the_toolboxs_wasm_components() {
    let env = Env::new(65_482, "");
    let policies = env.dir.path().join("policies");
    std::fs::write(policies.join("broken.wasm"), b"\0asm\x0d\0\x01\0\xff\xff").unwrap();
    std::fs::write(
        policies.join("broken.toml"),
        "[executor]\nkind = \"wasm\"\ncomponent = \"broken.wasm\"\n",
    )
    .unwrap();
    let strict = |args: &[&str]| {
        let mut command = env.command(args);
        command.env("WARDEN_STRICT", "1").stdin(Stdio::null());
        command.output().unwrap()
    };
    let ran = strict(&["host-shell", "--", "sh", "-c", "echo RAN"]);
    assert_eq!(text(&ran.stdout), "RAN\n", "{}", text(&ran.stderr));
    assert_eq!(ran.status.code(), Some(0));
    assert!(
        !text(&ran.stderr).contains("broken"),
        "{}",
        text(&ran.stderr)
    );
    // A name exec does not run is explained from the whole toolbox, which does not load.
    let unknown = strict(&["no-such-tool", "--", "true"]);
    assert_eq!(unknown.status.code(), Some(125));
    assert!(
        text(&unknown.stderr).contains("broken.toml"),
        "{}",
        text(&unknown.stderr)
    );
}

/// Waits up to `within` for `done`; answers whether it came true.
fn eventually(within: Duration, done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + within;
    while !done() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// `warden exec` of a tool that requires review runs nothing unreviewed: refused where no one
/// can be asked (no terminal, as langchain-warden's shell starts it), asked on the controlling
/// terminal of a parent that drives warden through pipes; approved, edited or rejected there.
#[test]
fn a_reviewed_tools_program_runs_only_once_a_person_approves_it() {
    use std::os::unix::process::CommandExt;
    let env = Env::new(65_484, "");
    env.require_review();
    let mut detached = env.command(&["host-shell", "--", "sh", "-c", "echo RAN"]);
    // SAFETY: setsid is async-signal-safe: a session of its own has no controlling terminal.
    unsafe {
        detached.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let out = detached.stdin(Stdio::null()).output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(125), "{stdout}{stderr}");
    assert!(!stdout.contains("RAN"), "{stdout}");
    assert!(
        stderr.contains("[review] required = true") && stderr.contains("no one to ask"),
        "{stderr}"
    );
    let record = env.records().pop().unwrap();
    assert_eq!(
        (&record["exec"], &record["outcome"]),
        (&Value::Bool(true), &Value::from("rejected")),
        "{record}"
    );

    // Approved on the parent's terminal: the program runs on the parent's pipes.
    let script = "read x; echo RAN-$x";
    let mut terminal =
        Terminal::controlling(env.command(&["host-shell", "--", "sh", "-c", script]));
    terminal.wait_for("[a]pprove");
    assert!(
        terminal.screen().contains("RAN-$x"),
        "{}",
        terminal.screen()
    );
    terminal.type_keys(b"a\n");
    let mut stdin = terminal.child().stdin.take().unwrap();
    stdin.write_all(b"piped\n").unwrap();
    drop(stdin);
    let (code, stdout, shown) = finish(terminal);
    assert_eq!((code, stdout.as_str()), (Some(0), "RAN-piped\n"), "{shown}");

    // Edited: the reviewer's argv runs instead.
    let edit: [(&str, &[u8]); 2] = [
        ("[a]pprove", b"e\n"),
        (
            "arguments (JSON): ",
            b"{\"argv\": [\"echo\", \"EDITED\"]}\n",
        ),
    ];
    let (code, stdout, shown) = reviewed(&env, &edit);
    assert_eq!((code, stdout.as_str()), (Some(0), "EDITED\n"), "{shown}");

    // Rejected: nothing runs, and the reason is warden's error.
    let reject: [(&str, &[u8]); 2] = [("[a]pprove", b"r\n"), ("reason: ", b"not today\n")];
    let (code, stdout, shown) = reviewed(&env, &reject);
    assert_eq!((code, stdout.as_str()), (Some(125), ""), "{shown}");
    assert!(
        shown.contains("a reviewer rejected this program: not today"),
        "{shown}"
    );
    env.leaves_nothing();
}

/// A tool whose calls' changes a person reviews runs no program: `warden exec` commits a
/// program's changes when it exits, with no one asked.
#[test]
fn a_tool_whose_changes_are_reviewed_runs_no_program() {
    let env = Env::new(65_486, "");
    let path = env.dir.path().join("policies/shell-host.toml");
    let policy = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\nsession = true", "\n# session = true")
        .replace("access = \"read-only\"", "access = \"read-write\"");
    std::fs::write(&path, format!("{policy}\n[review]\nchanges = true\n")).unwrap();
    let script = "echo RAN > planted; echo RAN";
    let out = env.exec(&["host-shell", "--", "sh", "-c", script], b"");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(125), "{stdout}{stderr}");
    assert!(!stdout.contains("RAN"), "{stdout}");
    assert!(
        stderr.contains("commits its changes when it exits"),
        "{stderr}"
    );
    assert!(!env.dir.path().join("workspace/planted").exists());
}

/// A program is a transaction over its read-write roots, as a call is, under the shipped
/// session policy as it is (its sandbox is the program's own): what a program that ends on its
/// own wrote is kept, whatever its status or signal, logged and undone by `warden undo`; a
/// program that its time limit ended leaves nothing.
#[test]
fn a_programs_writes_are_kept_when_it_ends_and_undone_or_none_past_its_time_limit() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new(65_487, "");
    let path = env.dir.path().join("policies/shell-host.toml");
    let policy = std::fs::read_to_string(&path).unwrap();
    let writable = policy.replace("access = \"read-only\"", "access = \"read-write\"");
    assert_ne!(policy, writable, "the shipped grant changed");
    std::fs::write(&path, writable).unwrap();
    let workspace = env.dir.path().join("workspace");
    std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o777)).unwrap();

    let script = "echo kept > kept.txt; rm README.txt; exit 3";
    let out = env.exec(&["host-shell", "--", "sh", "-c", script], b"");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("2 change(s)"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.txt")).unwrap(),
        "kept\n"
    );
    assert!(!workspace.join("README.txt").exists());
    let record = env.records().pop().unwrap();
    assert_eq!(
        (&record["exec"], &record["changes"]["count"]),
        (&Value::Bool(true), &Value::from(2)),
        "{record}"
    );
    let call_id = record["call_id"].as_str().unwrap().to_owned();
    assert!(
        stderr.contains(&format!("`warden undo {call_id}`")),
        "{stderr}"
    );

    // Its time limit ends a program: nothing it wrote is kept.
    let out = env.exec(
        &[
            "host-shell",
            "--timeout",
            "1s",
            "--",
            "sh",
            "-c",
            "echo lost > kept.txt; echo lost > lost.txt; sleep 100",
        ],
        b"",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(stderr.contains("Nothing the program wrote"), "{stderr}");
    assert!(!workspace.join("lost.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.txt")).unwrap(),
        "kept\n"
    );
    // A signal ends one: what it wrote is kept, as a call's command killed by one.
    let script = "echo signalled > signalled.txt; kill -9 $$";
    let out = env.exec(&["host-shell", "--", "sh", "-c", script], b"");
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert!(workspace.join("signalled.txt").exists());

    let undo = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["undo", &call_id])
        .env("WARDEN_HOME", env.dir.path().join("home"))
        .output()
        .unwrap();
    assert!(undo.status.success(), "{}", text(&undo.stderr));
    assert!(!workspace.join("kept.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("README.txt")).unwrap(),
        "granted file\n"
    );
    env.leaves_nothing();
}

/// `echo RAN` exec'd at [`Terminal::controlling`], the reviewer typing each answer once its
/// prompt shows, with no input: how it ended, as [`finish`] says.
fn reviewed(env: &Env, answers: &[(&str, &[u8])]) -> (Option<i32>, String, String) {
    let mut terminal = Terminal::controlling(env.command(&["host-shell", "--", "echo", "RAN"]));
    for (prompt, keys) in answers {
        terminal.wait_for(prompt);
        terminal.type_keys(keys);
    }
    drop(terminal.child().stdin.take());
    finish(terminal)
}

/// How a program at [`Terminal::controlling`] ended: its exit code, its stdout, and its stderr
/// and the terminal's screen for a failing assertion.
fn finish(mut terminal: Terminal) -> (Option<i32>, String, String) {
    let mut stdout = String::new();
    let mut pipe = terminal.child().stdout.take().unwrap();
    pipe.read_to_string(&mut stdout).unwrap();
    let (code, shown) = terminal.wait();
    (code, stdout, shown)
}

/// `exec -n` leaves warden's stdin to the parent: a parent's `while read` loop that runs a
/// program for each line gets every line (without it, warden may pass the lines that follow on
/// to the program ahead of its reads, as `ssh` without `-n` does).
#[test]
fn exec_n_leaves_the_parents_input_to_the_parent() {
    let env = Env::new(65_485, "");
    let warden = env!("CARGO_BIN_EXE_warden");
    let loop_over = |flags: &str| {
        let script = format!(
            "printf 'one\\ntwo\\nthree\\n' | while read line; do \
             \"$WARDEN\" exec {flags} host-shell -- true; echo \"got $line\"; done"
        );
        let out = Command::new("/bin/sh")
            .args(["-c", &script])
            .env("WARDEN", warden)
            .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
            .env("WARDEN_HOME", env.dir.path().join("home"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(loop_over("-n"), "got one\ngot two\ngot three\n");
    assert_eq!(loop_over("--no-stdin"), "got one\ngot two\ngot three\n");
    env.leaves_nothing();
}
