//! The shipped shell policy end to end through the `warden` binary: `warden call` in the busybox
//! and the Debian image, the audit, `warden sandbox-image` (`--debian`), and the errors when
//! Docker or the image is missing.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temp toolbox holding the shipped `policies/shell-docker.toml` as it is, beside the
/// `workspace/` folder it grants.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        std::fs::create_dir(dir.path().join("workspace")).unwrap();
        std::fs::write(dir.path().join("workspace/README.txt"), "granted file\n").unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/shell-docker.toml");
        std::fs::copy(shipped, dir.path().join("policies/shell-docker.toml")).unwrap();
        Self { dir }
    }

    fn warden(&self, args: &[&str], docker_host: Option<&str>) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
        cmd.args(args)
            .env("WARDEN_TOOLBOX", self.dir.path().join("policies"))
            .env("WARDEN_HOME", self.home());
        if let Some(host) = docker_host {
            cmd.env("DOCKER_HOST", host);
        }
        cmd.output().expect("warden runs")
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
}

fn message(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Ready to run the shell tool, building the image when it is missing; `None` (skipped) when
/// no engine answers, unless `CI=true`.
fn ready(env: &Env) -> Option<()> {
    let probe = message(&env.warden(&["call", "shell", r#"{"command": "true"}"#], None));
    let text = probe["content"].as_str().unwrap_or_default().to_owned();
    if text.contains("not reachable") {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true and no Docker engine answers: {text}"
        );
        eprintln!("SKIPPED: {text}");
        return None;
    }
    if text.contains("is not on this engine") {
        let debian = text.contains("warden sandbox-image --debian");
        assert!(text.contains("warden sandbox-image"), "{text}");
        if debian && !mmdebstrap_installed() {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "CI=true and neither the Debian image nor mmdebstrap is here: {text}"
            );
            eprintln!("SKIPPED: {text}");
            return None;
        }
        let args: &[&str] = if debian {
            &["sandbox-image", "--debian"]
        } else {
            &["sandbox-image"]
        };
        let built = env.warden(args, None);
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    Some(())
}

#[test]
fn the_shipped_shell_policy_works_with_warden_call() {
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let out = env.warden(
        &[
            "call",
            "shell",
            r#"{"command": "cat README.txt; pwd; id -u; touch x 2>/dev/null || echo read-only"}"#,
        ],
        None,
    );
    let m = message(&out);
    assert!(out.status.success(), "{m}");
    assert_eq!(m["status"], "success");
    assert_eq!(
        m["content"],
        "granted file\n/workspace\n65534\nread-only\n[exit code 0]"
    );
    assert_eq!(m["artifact"]["result"]["exit_code"], 0);
    // `warden call` is a session of one call: its container is gone when it returns.
    if let Ok(ps) = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=warden.tool=shell"])
        .output()
    {
        assert_eq!(
            String::from_utf8_lossy(&ps.stdout).trim(),
            "",
            "left behind"
        );
    }
    let out = env.warden(
        &["call", "shell", r#"{"command": "echo no >&2; exit 3"}"#],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let m = message(&out);
    assert_eq!(m["error"]["kind"], "exit_status");
    assert_eq!(m["error"]["details"]["shell"]["exit_code"], 3);
    assert_eq!(m["error"]["details"]["shell"]["stderr"], "no\n");
}

fn mmdebstrap_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| d.join(warden_docker::BOOTSTRAP_TOOL).is_file())
    })
}

/// The shipped policy names the Debian image: `warden sandbox-image --debian` finds it built
/// (by `ready`, or .ci/run) and says so; its shell has python3 and git.
#[test]
fn the_shipped_shell_policy_runs_the_debian_image() {
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let policy = std::fs::read_to_string(env.dir.path().join("policies/shell-docker.toml"));
    let image = format!("image = \"{}\"", warden_docker::DEBIAN_IMAGE);
    assert!(
        policy.unwrap().contains(&image),
        "the shipped policy names {image}"
    );
    if mmdebstrap_installed() {
        let again = env.warden(&["sandbox-image", "--debian"], None);
        let stdout = String::from_utf8_lossy(&again.stdout);
        assert!(stdout.contains("is already on the engine"), "{stdout}");
        assert!(stdout.contains("not rebuilt"), "{stdout}");
    }
    let out = env.warden(
        &[
            "call",
            "shell",
            r#"{"command": "cat README.txt; pwd; id -u; python3 -c 'print(6 * 7)'; git --version | cut -c1-11; touch x 2>/dev/null || echo read-only"}"#,
        ],
        None,
    );
    let m = message(&out);
    assert!(out.status.success(), "{m}");
    assert_eq!(
        m["content"],
        "granted file\n/workspace\n65534\n42\ngit version\nread-only\n[exit code 0]"
    );
}

/// The shipped policy with a `net` grant reaches a server through the gate with the image's
/// curl, and nothing else; the busybox image, named instead, still runs its shell.
#[test]
fn the_shipped_shell_reaches_its_net_grants_through_the_gate() {
    use std::io::{Read, Write};
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in server.incoming().flatten().take(4) {
            let mut stream = stream;
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\nConnection: close\r\n\r\nshipped-reach\n",
            );
        }
    });
    let path = env.dir.path().join("policies/shell-docker.toml");
    let shipped = std::fs::read_to_string(&path).unwrap();
    let granted = shipped.replace(
        "# net = [\"pypi.org\", \"files.pythonhosted.org\"]",
        &format!("net = [\"127.0.0.1:{port}\"]"),
    );
    assert_ne!(shipped, granted, "the shipped policy shows a net line");
    std::fs::write(&path, &granted).unwrap();
    let command = format!(
        r#"{{"command": "curl -sS http://127.0.0.1:{port}/; curl -sS -m 5 http://127.0.0.2:{port}/"}}"#
    );
    let m = message(&env.warden(&["call", "shell", &command], None));
    let content = m["content"].as_str().unwrap_or_default();
    assert!(content.starts_with("shipped-reach\n"), "{m}");
    // Another loopback address, not granted: the gate refuses it and the call records it.
    assert!(content.contains("warden denied http://127.0.0.2"), "{m}");
    assert_eq!(m["artifact"]["denied_count"], 1, "{m}");
    // The busybox image named instead: its shell runs (its wget is not to be relied on).
    let busybox = granted.replace(
        &format!("\"{}\"", warden_docker::DEBIAN_IMAGE),
        "\"warden-sandbox:latest\"",
    );
    std::fs::write(&path, busybox).unwrap();
    let m = message(&env.warden(&["call", "shell", r#"{"command": "echo hi"}"#], None));
    if m["content"]
        .as_str()
        .is_some_and(|c| c.contains("is not on this engine"))
    {
        let built = env.warden(&["sandbox-image"], None);
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let m = message(&env.warden(&["call", "shell", r#"{"command": "echo hi"}"#], None));
    assert_eq!(m["content"], "hi\n[exit code 0]", "{m}");
}

#[test]
fn an_unreachable_daemon_is_unavailable_and_names_the_socket() {
    let env = Env::new();
    let out = env.warden(
        &["call", "shell", r#"{"command": "true"}"#],
        Some("unix:///nonexistent/docker.sock"),
    );
    assert_eq!(out.status.code(), Some(1));
    let m = message(&out);
    assert_eq!(m["error"]["kind"], "unavailable");
    let text = m["error"]["message"].as_str().unwrap();
    assert!(text.contains("/nonexistent/docker.sock"), "{text}");
    assert!(text.contains("dockerd"), "how to start it: {text}");
}

#[test]
fn the_audit_shows_the_container_and_its_hardening() {
    let env = Env::new();
    let out = env.warden(&["audit", "--json"], None);
    assert!(out.status.success());
    let audit = message(&out);
    let p = &audit["policies"][0];
    assert_eq!(p["executor"]["kind"], "docker");
    assert_eq!(p["executor"]["image"], warden_docker::DEBIAN_IMAGE);
    assert_eq!(p["executor"]["mode"], "session");
    assert_eq!(p["network"], "none");
    let hardening = p["executor"]["hardening"].to_string();
    assert!(
        hardening.contains("all capabilities dropped"),
        "{hardening}"
    );
    assert!(p["flags"].to_string().contains("not by digest"), "{p}");
    assert_eq!(p["tools"][0]["name"], "shell");

    let policy = env.dir.path().join("policies/shell-docker.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    let open = text.replace("# network = \"unrestricted\"", "network = \"unrestricted\"");
    std::fs::write(&policy, open).unwrap();
    let audit = message(&env.warden(&["audit", "--json"], None));
    let p = &audit["policies"][0];
    assert_eq!(p["network"], "unrestricted");
    assert!(
        p["flags"].to_string().contains("unrestricted network"),
        "{p}"
    );
}

/// `warden exec ARGS` with the shipped shell, fed `input`.
fn exec(env: &Env, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("exec")
        .args(args)
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .env("WARDEN_TEST_MARKER", "MARKER-docker-exec")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("warden runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn no_container_left(tool: &str) {
    let ps = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=warden.tool={tool}"),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ps.stdout).trim(),
        "",
        "containers left"
    );
}

#[test]
fn a_whole_program_runs_in_the_shipped_shells_container() {
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let out = exec(
        &env,
        &[
            "shell",
            "--",
            "sh",
            "-c",
            "id -u; cat README.txt; env; touch x",
        ],
        b"",
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("65534\ngranted file\n"),
        "{stdout}{}",
        text(&out.stderr)
    );
    assert!(
        !stdout.contains("MARKER-docker-exec"),
        "warden's env: {stdout}"
    );
    assert!(
        text(&out.stderr).contains("Read-only"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1));
    let out = exec(&env, &["shell", "--", "wc", "-l"], b"a\nb\n");
    assert_eq!(text(&out.stdout).trim(), "2", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    let out = exec(&env, &["shell", "--", "sh", "-c", "exit 3"], b"");
    assert_eq!(out.status.code(), Some(3));
    let out = exec(&env, &["shell", "--", "sh", "-c", "kill -9 $$"], b"");
    assert_eq!(out.status.code(), Some(137));
    // No program: the tool's shell, reading its commands on stdin.
    let out = exec(&env, &["shell"], b"cd /tmp && pwd\nexit 4\n");
    assert_eq!(text(&out.stdout), "/tmp\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(4));
    let out = exec(
        &env,
        &["shell", "--timeout", "1s", "--", "sleep", "60"],
        b"",
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    no_container_left("shell");
}

#[test]
fn a_programs_container_takes_sigterm_and_reaches_only_its_grants() {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
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
    let path = env.dir.path().join("policies/shell-docker.toml");
    let shipped = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        shipped.replace(
            "# net = [\"pypi.org\", \"files.pythonhosted.org\"]",
            &format!("net = [\"127.0.0.1:{port}\"]"),
        ),
    )
    .unwrap();
    let script =
        format!("curl -sS http://127.0.0.1:{port}/; curl -sS -m 5 http://127.0.0.2:{port}/");
    let out = exec(&env, &["shell", "--", "sh", "-c", &script], b"");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("exec-reach!\n"), "{stdout}");
    assert!(
        stdout.contains("warden denied http://127.0.0.2"),
        "{stdout}"
    );
    let log = std::fs::read_to_string(env.home().join("calls.jsonl")).unwrap();
    let exec_record: Value = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["exec"] == true)
        .unwrap();
    assert_eq!(exec_record["denied_count"], 1, "{exec_record}");

    let script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done";
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["exec", "shell", "--", "sh", "-c", script])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut ready_line = [0u8; 6];
    stdout.read_exact(&mut ready_line).unwrap();
    assert_eq!(&ready_line, b"ready\n");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        rest,
        "got-term\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(7));
    no_container_left("shell");
}

/// A program's container sees its read-write root through a view, under the shipped session
/// policy with its grant made read-write: what a program that exits wrote is kept (and
/// logged); one its time limit ended leaves nothing.
#[test]
fn a_programs_writes_in_a_container_are_kept_when_it_ends_and_none_past_its_time_limit() {
    let env = Env::new();
    let path = env.dir.path().join("policies/shell-docker.toml");
    let policy = std::fs::read_to_string(&path).unwrap();
    let writable = policy.replace("access = \"read-only\"", "access = \"read-write\"");
    assert_ne!(policy, writable, "the shipped grant changed");
    std::fs::write(&path, writable).unwrap();
    let workspace = env.dir.path().join("workspace");
    // The container runs as the root's owner, who must not be root.
    for entry in [workspace.clone(), workspace.join("README.txt")] {
        std::os::unix::fs::chown(&entry, Some(65_488), Some(65_488)).unwrap();
    }
    if ready(&env).is_none() {
        return;
    }
    let script = "echo kept > kept.txt; rm README.txt; exit 3";
    let out = exec(&env, &["shell", "--", "sh", "-c", script], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("2 change(s)"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.txt")).unwrap(),
        "kept\n"
    );
    assert!(!workspace.join("README.txt").exists());

    let script = "echo lost > kept.txt; echo lost > lost.txt; sleep 100";
    let out = exec(
        &env,
        &["shell", "--timeout", "2s", "--", "sh", "-c", script],
        b"",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(stderr.contains("Nothing the program wrote"), "{stderr}");
    assert!(!workspace.join("lost.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.txt")).unwrap(),
        "kept\n"
    );
    let log = std::fs::read_to_string(env.home().join("calls.jsonl")).unwrap();
    let kept = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["exec"] == true && r["exit_status"] == 3)
        .unwrap();
    assert_eq!(kept["changes"]["count"], 2, "{kept}");
    no_container_left("shell");
}

#[test]
fn a_programs_container_at_a_terminal_gets_one_that_follows_its_size() {
    use crate::common::terminal::Terminal;
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    let script = "tty; stty size; while read x; do stty size; done; exit 5";
    command
        .args(["exec", "shell", "--", "sh", "-c", script])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home());
    let terminal = Terminal::start(command, 24, 80);
    terminal.wait_for("24 80");
    // The line that starts the program is not echoed: the program's output comes first.
    assert!(
        terminal.screen().starts_with("/dev/pts/"),
        "{}",
        terminal.screen()
    );
    terminal.resize(30, 100);
    terminal.wait_until("30 100", || terminal.type_keys(b"\r"));
    terminal.type_keys(b"\x04");
    let (code, shown) = terminal.wait();
    assert_eq!(code, Some(5), "{shown}");

    // An interactive bash: ^C reaches its foreground job, not warden.
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command
        .args(["exec", "shell", "--", "bash", "--norc", "-i"])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home());
    let terminal = Terminal::start(command, 24, 80);
    terminal.type_keys(b"sleep 60\r");
    std::thread::sleep(std::time::Duration::from_millis(500));
    terminal.type_keys(b"\x03");
    terminal.type_keys(b"echo after-\"$?\"; exit 6\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, Some(6), "{shown}");
    assert!(shown.contains("after-130"), "{shown}");
    no_container_left("shell");
}

#[test]
fn a_programs_container_uses_a_credential_it_never_holds() {
    use crate::exec::{EXEC_CREDENTIAL, credential_grants};
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let server = warden_test_support::servers::EchoServer::http();
    let port = server.port;
    let path = env.dir.path().join("policies/shell-docker.toml");
    let shipped = std::fs::read_to_string(&path).unwrap();
    let with_credential = shipped.replace(
        "# net = [\"pypi.org\", \"files.pythonhosted.org\"]",
        &credential_grants(port),
    );
    assert_ne!(with_credential, shipped);
    std::fs::write(&path, with_credential).unwrap();
    let script = format!(
        "echo \"env=$API_TOKEN\"; curl -sS -H \"X-Mine: $API_TOKEN\" http://127.0.0.1:{port}/"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["exec", "shell", "--", "sh", "-c", &script])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .env("WARDEN_TEST_EXEC_CRED", EXEC_CREDENTIAL)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("env=warden-placeholder-api_token-"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(EXEC_CREDENTIAL), "{stdout}");
    let received = server.received().join("\n").to_ascii_lowercase();
    assert!(
        received.contains(&format!("authorization: bearer {EXEC_CREDENTIAL}")),
        "{received}"
    );
    assert_eq!(received.matches(EXEC_CREDENTIAL).count(), 1, "{received}");
    no_container_left("shell");
}

/// The tool's pooled containers, running or not: a pooled container whose warden was killed
/// may stop on its own (its stdin closed with the attach), and is still there to reap.
fn pooled(tool: &str) -> Vec<String> {
    let ps = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter"])
        .arg(format!("label=warden.tool={tool}"))
        .args(["--filter", "label=warden.mode=pool"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&ps.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Waits until `check` holds, for up to 30 s.
fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..300 {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("never: {what}");
}

#[test]
fn a_killed_servers_pool_is_reaped_at_the_next_start_and_a_stopped_one_removes_its_own() {
    use std::process::Stdio;
    let env = Env::new();
    if ready(&env).is_none() {
        return;
    }
    let tool = format!("pooled-{}", std::process::id());
    std::fs::write(
        env.dir.path().join("policies/pooled.toml"),
        format!(
            "[executor]\nkind = \"docker\"\nname = \"{tool}\"\nimage = \"warden-sandbox:latest\"\n\
             argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\npool = 2\n"
        ),
    )
    .unwrap();
    let serve = || {
        Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("serve")
            .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
            .env("WARDEN_HOME", env.home())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("warden serve runs")
    };
    // `warden serve` fills the pool as it starts, before any request.
    let mut first = serve();
    eventually("the first server's pool is full", || {
        pooled(&tool).len() == 2
    });
    let old = pooled(&tool);
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(pooled(&tool), old, "a killed warden removes nothing");
    let mut second = serve();
    let gone = |id: &String| {
        !Command::new("docker")
            .args(["inspect", id])
            .output()
            .unwrap()
            .status
            .success()
    };
    eventually("the killed server's pool is reaped", || {
        old.iter().all(gone)
    });
    eventually("the second server's pool is full", || {
        pooled(&tool).len() == 2
    });
    // Its end (stdin closed, here before any client initialized, which it reports) removes
    // its pool before it exits.
    drop(second.stdin.take());
    second.wait().unwrap();
    no_container_left(&tool);
}
