//! The shipped host shell policy end to end through the `warden` binary, which starts the
//! small `warden-helper` beside it as the sandbox helper (or re-executes itself when that is
//! missing or of another build): usable as it is, confined, and honest in the audit.

use crate::common::{pids_of, processes_of};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temp toolbox holding the shipped `policies/shell-host.toml` as it is, beside the
/// `workspace/` folder it grants.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // The command runs as nobody: the granted folder must be reachable by others.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        std::fs::create_dir(dir.path().join("workspace")).unwrap();
        std::fs::write(dir.path().join("workspace/README.txt"), "granted file\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "MARKER-host-9c1\n").unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/shell-host.toml");
        std::fs::copy(shipped, dir.path().join("policies/shell-host.toml")).unwrap();
        Self { dir }
    }

    fn warden(&self, args: &[&str]) -> Output {
        self.warden_at(Path::new(env!("CARGO_BIN_EXE_warden")), args)
    }

    fn warden_at(&self, warden: &Path, args: &[&str]) -> Output {
        Command::new(warden)
            .args(args)
            .env("WARDEN_TOOLBOX", self.dir.path().join("policies"))
            .env("WARDEN_HOME", self.home())
            .env("WARDEN_TEST_MARKER", "MARKER-env-51d")
            .output()
            .expect("warden runs")
    }

    /// The shipped policy in session mode, run as `uid`, with a `sub` folder in its root.
    fn session(uid: u32) -> Self {
        let env = Self::new();
        let path = env.dir.path().join("policies/shell-host.toml");
        let shipped = std::fs::read_to_string(&path).unwrap();
        let text = shipped
            .replace("# session = true", "session = true")
            .replace(
                "# user = \"65534:65534\"",
                &format!("user = \"{uid}:{uid}\""),
            );
        assert!(text.contains("\nsession = true") && text.contains("\nuser = "));
        std::fs::write(&path, text).unwrap();
        std::fs::create_dir(env.dir.path().join("workspace/sub")).unwrap();
        assert_eq!(processes_of(uid), 0, "user {uid} already runs processes");
        env
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn shell(&self, command: &str) -> Value {
        let args = serde_json::json!({ "command": command }).to_string();
        let out = self.warden(&["call", "host-shell", &args]);
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

#[test]
fn the_shipped_host_shell_runs_confined() {
    let env = Env::new();
    let m = env.shell("id -u; cat README.txt; env");
    assert_eq!(m["status"], "success", "{m}");
    let content = m["content"].as_str().unwrap();
    assert!(content.starts_with("65534\ngranted file\n"), "{content}");
    assert!(
        !content.contains("MARKER-env-51d"),
        "warden's env leaked: {content}"
    );
    let names: Vec<&str> = content
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    // The grants, and PWD, which the shell sets itself.
    for name in &names {
        assert!(
            ["PATH", "LANG", "PWD"].contains(name),
            "{name} leaked: {content}"
        );
    }
    let isolation = &m["artifact"]["isolation"];
    assert_eq!(isolation["pid_namespace"], true, "{m}");
    assert_eq!(isolation["network_namespace"], true, "{m}");
    assert!(isolation["landlock_abi"].as_u64() >= Some(3), "{m}");

    let secret = env.dir.path().join("secret.txt");
    let m = env.shell(&format!("echo x > ../planted; cat {}", secret.display()));
    assert_eq!(m["status"], "error", "{m}");
    let content = m["content"].as_str().unwrap();
    assert!(!content.contains("MARKER-host-9c1"), "{content}");
    assert!(!env.dir.path().join("planted").exists());
}

/// A fresh user's clone: the toolbox below a folder only its owner may pass through (as
/// `mktemp -d` and home folders are), below /tmp, with no `chmod` at all. The workspace is
/// seen at its own path, and the shell has a private /tmp beside it.
#[test]
fn the_shipped_host_shell_works_below_a_closed_folder_in_tmp() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let dir = env.dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(dir.starts_with("/tmp"), "{}", dir.display());
    // The host's /tmp, full of files, is not the shell's.
    let m = env.shell("cat README.txt && pwd && touch /tmp/f && ls /tmp");
    assert_eq!(m["status"], "success", "{m}");
    let workspace = dir.join("workspace").canonicalize().unwrap();
    let expected = format!("granted file\n{}\nf\n", workspace.display());
    assert!(m["content"].as_str().unwrap().starts_with(&expected), "{m}");
    let isolation = &m["artifact"]["isolation"];
    assert_eq!(isolation["private_tmp"], true, "{m}");
    assert_eq!(isolation["missing"], serde_json::json!([]), "{m}");
}

#[test]
fn a_host_session_answer_carries_its_isolation() {
    const USER: u32 = 65_483;
    let env = Env::session(USER);
    // `warden call` is a session of one call: the shell's helper reports what it put in force.
    let m = env.shell("id -u; cat README.txt");
    assert_eq!(m["status"], "success", "{m}");
    assert!(
        m["content"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{USER}\ngranted file\n")),
        "{m}"
    );
    let isolation = &m["artifact"]["isolation"];
    assert_eq!(isolation["user"], format!("{USER}:{USER}"), "{m}");
    assert_eq!(isolation["pid_namespace"], true, "{m}");
    assert_eq!(isolation["network_namespace"], true, "{m}");
    assert!(isolation["landlock_abi"].as_u64() >= Some(3), "{m}");
    let m = env.shell("cat ../secret.txt");
    assert_eq!(m["status"], "error", "{m}");
    assert_eq!(m["error"]["details"]["isolation"], *isolation, "{m}");
}

#[test]
fn the_audit_says_what_is_in_force_here() {
    let env = Env::new();
    let out = env.warden(&["audit"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for words in [
        "executor  host",
        "as 65534:65534",
        "in force  PID namespace",
        "in force  network namespace",
        "in force  landlock ABI",
    ] {
        assert!(text.contains(words), "{words} missing:\n{text}");
    }
    let out = env.warden(&["audit", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ex = &report["policies"][0]["executor"];
    assert_eq!(ex["kind"], "host");
    assert_eq!(ex["isolation"], "required");
    assert!(
        ex["in_force_here"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{ex}"
    );
}

#[test]
fn a_user_other_than_root_is_confined_in_a_user_namespace() {
    use std::os::unix::process::CommandExt;
    if !nix_is_root() {
        eprintln!("SKIPPED: only root can start warden as another user here");
        return;
    }
    const USER: u32 = 64_021;
    let env = Env::new();
    // A copy of warden that user can run, and a home it owns.
    let warden = env.dir.path().join("warden");
    std::fs::copy(env!("CARGO_BIN_EXE_warden"), &warden).unwrap();
    std::fs::create_dir(env.home()).unwrap();
    std::os::unix::fs::chown(env.home(), Some(USER), Some(USER)).unwrap();
    let out = Command::new(&warden)
        .args([
            "call",
            "host-shell",
            r#"{"command": "id -u; cat README.txt; cat ../secret.txt"}"#,
        ])
        .env_clear()
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .uid(USER)
        .gid(USER)
        .output()
        .expect("warden runs");
    let m: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let details = &m["error"]["details"];
    assert_eq!(
        details["shell"]["stdout"],
        format!("{USER}\ngranted file\n"),
        "{m}"
    );
    assert!(!m.to_string().contains("MARKER-host-9c1"), "{m}");
    let isolation = m["error"]["details"]["isolation"].clone();
    assert_eq!(isolation["user_namespace"], true, "{m}");
    assert_eq!(isolation["pid_namespace"], true, "{m}");
}

/// The programs of `child`'s children that lived a while (a call's helper, not a fork on its
/// way to `exec` or a quick question), polled until `child` ends; each one's last seen.
fn children_programs(child: &mut std::process::Child) -> Vec<PathBuf> {
    use std::time::{Duration, Instant};
    let mut seen: std::collections::BTreeMap<String, (Instant, Instant, PathBuf)> =
        Default::default();
    while child.try_wait().unwrap().is_none() {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id()));
        for task in tasks.into_iter().flatten().flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            for pid in children.unwrap_or_default().split_whitespace() {
                if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
                    let now = Instant::now();
                    let entry = seen
                        .entry(pid.to_owned())
                        .or_insert((now, now, exe.clone()));
                    (entry.1, entry.2) = (now, exe);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut programs: Vec<PathBuf> = seen
        .into_values()
        .filter(|(first, last, _)| *last - *first > Duration::from_millis(300))
        .map(|(_, _, exe)| exe)
        .collect();
    programs.sort();
    programs.dedup();
    programs
}

/// `warden call host-shell "sleep 1"` from `warden`; the programs of its children meanwhile.
fn helper_programs(env: &Env, warden: &Path) -> Vec<PathBuf> {
    let mut child = Command::new(warden)
        .args([
            "call",
            "host-shell",
            r#"{"command": "sleep 1; echo slept"}"#,
        ])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("warden runs");
    let programs = children_programs(&mut child);
    let out = child.wait_with_output().unwrap();
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(m["artifact"]["shell"]["stdout"], "slept\n", "{m}");
    programs
}

#[test]
fn calls_start_the_helper_beside_warden() {
    let env = Env::new();
    let warden = Path::new(env!("CARGO_BIN_EXE_warden"));
    let helper = warden
        .with_file_name("warden-helper")
        .canonicalize()
        .unwrap();
    assert_eq!(helper_programs(&env, warden), vec![helper]);
}

/// A folder with a copy of warden in it, and that copy's path.
fn warden_copy(env: &Env) -> (PathBuf, PathBuf) {
    let bin = env.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let warden = bin.join("warden");
    std::fs::copy(env!("CARGO_BIN_EXE_warden"), &warden).unwrap();
    (bin, warden)
}

/// A shell script at `path` that leaves `marker` behind if it is ever started.
fn tell_tale_script(path: &Path, marker: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::write(
        path,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(path, PermissionsExt::from_mode(0o755)).unwrap();
}

#[test]
fn a_helper_of_another_build_or_none_beside_warden_is_not_used() {
    let env = Env::new();
    let (bin, warden) = warden_copy(&env);
    // Nothing beside it: warden re-executes itself.
    assert_eq!(helper_programs(&env, &warden), vec![warden.clone()]);
    let ran = env.dir.path().join("stale-helper-ran");
    // Programs of other builds: neither holds this build's protocol id.
    tell_tale_script(&bin.join("warden-helper"), &ran);
    assert_eq!(helper_programs(&env, &warden), vec![warden.clone()]);
    assert!(!ran.exists(), "the stale helper was handed a plan");
    std::fs::remove_file(bin.join("warden-helper")).unwrap();
    std::fs::copy("/bin/true", bin.join("warden-helper")).unwrap();
    assert_eq!(helper_programs(&env, &warden), vec![warden.clone()]);
}

/// The helper beside warden is looked for when a sandbox first starts, not when a host
/// policy loads: a call of a wasm tool in a toolbox that has one never reads it (here a
/// folder in its place, which the look warns about).
#[test]
fn the_helper_is_looked_for_at_the_first_sandbox_not_at_load() {
    let env = Env::new();
    let (bin, warden) = warden_copy(&env);
    std::fs::create_dir(bin.join("warden-helper")).unwrap();
    std::fs::write(
        env.dir.path().join("policies/trivial.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            crate::common::wasm("trivial")
        ),
    )
    .unwrap();
    let warned = |out: &Output| String::from_utf8_lossy(&out.stderr).contains("host helper");
    let wasm = env.warden_at(&warden, &["call", "noop", "{}"]);
    assert!(wasm.status.success(), "{wasm:?}");
    assert!(!warned(&wasm), "{wasm:?}");
    let host = env.warden_at(&warden, &["call", "host-shell", r#"{"command": "true"}"#]);
    assert!(host.status.success(), "{host:?}");
    assert!(
        warned(&host),
        "the look at the first sandbox warns: {host:?}"
    );
}

#[test]
fn a_helper_replaced_while_warden_runs_is_not_started() {
    let env = Env::new();
    let (bin, warden) = warden_copy(&env);
    let helper = Path::new(env!("CARGO_BIN_EXE_warden")).with_file_name("warden-helper");
    std::fs::copy(helper, bin.join("warden-helper")).unwrap();
    let mut mcp = Mcp::start_at(&env, &warden);
    assert!(mcp.shell("echo one").starts_with("one"));
    // A rebuild puts another file at the path: the one warden checked is what it starts.
    let ran = env.dir.path().join("replacement-ran");
    tell_tale_script(&bin.join("warden-helper"), &ran);
    for _ in 0..3 {
        let answer = mcp.shell("echo two");
        assert!(answer.starts_with("two"), "{answer}");
    }
    assert!(!ran.exists(), "the replacement was started");
}

#[test]
fn a_long_output_keeps_its_exit_code_and_counts_what_was_cut() {
    let env = Env::new();
    let m = env.shell("head -c 5242880 /dev/zero | tr '\\0' x");
    let content = m["content"].as_str().unwrap();
    assert!(
        content.ends_with("\n[exit code 0]"),
        "{}",
        &content[content.len() - 200..]
    );
    // The shipped policy's output cap is 64 KiB: the content stays within it.
    assert!(content.len() <= 64 << 10, "{} bytes", content.len());
    let shown = content.bytes().take_while(|b| *b == b'x').count();
    let marker = format!(
        "[warden: output truncated, {} more bytes not shown]",
        5_242_880 - shown
    );
    assert!(content.contains(&marker), "{}", &content[shown..]);
}

/// This build's protocol id, as the real helper answers it.
fn protocol_id() -> String {
    let helper = Path::new(env!("CARGO_BIN_EXE_warden")).with_file_name("warden-helper");
    let out = Command::new(helper).arg("--protocol").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_planted_helper_carrying_the_protocol_id_is_not_started() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let (bin, warden) = warden_copy(&env);
    let ran = env.dir.path().join("planted-helper-ran");
    let planted = bin.join("warden-helper");
    // What a sandbox writing beside warden left: a program holding the id warden looks for.
    let plant = |mode: u32| {
        let _ = std::fs::remove_file(&planted);
        let script = format!("#!/bin/sh\n# {}\ntouch {}\n", protocol_id(), ran.display());
        std::fs::write(&planted, script).unwrap();
        std::fs::set_permissions(&planted, PermissionsExt::from_mode(mode)).unwrap();
    };
    // Writable by others: anyone could have put it there.
    plant(0o777);
    assert_eq!(helper_programs(&env, &warden), vec![warden.clone()]);
    assert!(!ran.exists(), "a helper others can write was started");
    if nix_is_root() {
        // Written by a sandbox's nobody: its owner is neither root nor warden's user.
        plant(0o755);
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        assert_eq!(helper_programs(&env, &warden), vec![warden.clone()]);
        assert!(!ran.exists(), "a helper of another user was started");
        // In a folder others can write, a file of root's may have been swapped in.
        std::os::unix::fs::chown(&planted, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&bin, PermissionsExt::from_mode(0o777)).unwrap();
        assert_eq!(helper_programs(&env, &warden), vec![warden.clone()]);
        assert!(
            !ran.exists(),
            "a helper in a folder others can write was started"
        );
    }
}

#[test]
fn a_read_write_root_holding_warden_or_its_helper_is_refused_at_load() {
    let env = Env::new();
    let (bin, warden) = warden_copy(&env);
    let policies = env.dir.path().join("policies");
    let host = policies.join("shell-host.toml");
    let shipped = std::fs::read_to_string(&host).unwrap();
    let granting = |root: &str, access: &str| {
        let grant = format!(r#"fs = [{{ host = "{root}", access = "{access}" }}]"#);
        let text = shipped.replace(
            r#"fs = [{ host = "../workspace", access = "read-only" }]"#,
            &grant,
        );
        assert!(text.contains(&grant));
        std::fs::write(&host, text).unwrap();
    };
    // The folder of warden and of the helper it would start (there yet or not).
    {
        granting("../bin", "read-write");
        let out = env.warden_at(&warden, &["--strict", "tools"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "granted read-write: {stderr}");
        assert!(
            stderr.contains("shell-host.toml") && stderr.contains("read-only"),
            "{stderr}"
        );
        assert!(
            stderr.contains("warden's own program") || stderr.contains("host helper"),
            "{stderr}"
        );
    }
    // Reading them is harmless.
    granting("../bin", "read-only");
    let out = env.warden_at(&warden, &["--strict", "tools"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A docker tool's mounts alike.
    std::fs::remove_file(&host).unwrap();
    let docker = format!(
        "[executor]\nkind = \"docker\"\nname = \"d\"\nimage = \"warden-sandbox:latest\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n[grants]\n\
         fs = [{{ host = \"{}\", guest = \"/w\", access = \"read-write\" }}]\n",
        bin.display()
    );
    std::fs::write(policies.join("d.toml"), docker).unwrap();
    let out = env.warden_at(&warden, &["--strict", "tools"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("d.toml"),
        "{stderr}"
    );
    assert!(stderr.contains("warden"), "{stderr}");
}

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

#[test]
fn a_reader_that_stops_early_is_not_a_crash() {
    use std::io::Read;
    use std::process::Stdio;
    let env = Env::new();
    // More than a pipe holds: warden is still writing when the reader goes away.
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["call", "host-shell", r#"{"command": "seq 1 100000"}"#])
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("warden runs");
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}

/// `warden serve` over stdio, spoken to one JSON-RPC line at a time.
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    next_id: i64,
}

impl Mcp {
    fn start(env: &Env) -> Self {
        Self::start_at(env, Path::new(env!("CARGO_BIN_EXE_warden")))
    }

    fn start_at(env: &Env, warden: &Path) -> Self {
        use std::process::Stdio;
        let mut child = Command::new(warden)
            .arg("serve")
            .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
            .env("WARDEN_HOME", env.home())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("warden serve runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut mcp = Mcp {
            child,
            stdin,
            lines: std::io::BufRead::lines(std::io::BufReader::new(stdout)),
            next_id: 0,
        };
        let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {"name": "test", "version": "0"}});
        mcp.request("initialize", init);
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and reads lines up to its answer's `result`.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method,
                                       "params": params}),
        );
        loop {
            let line = self.lines.next().expect("an answer").unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message["result"].clone();
            }
        }
    }

    /// What `host-shell` answered `command`, as the model reads it.
    fn shell(&mut self, command: &str) -> String {
        let params = serde_json::json!({"name": "host-shell", "arguments": {"command": command}});
        let result = self.request("tools/call", params);
        result["content"][0]["text"].as_str().unwrap().to_owned()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a process of `uid` runs with exactly this command line (NUL-separated).
fn runs(uid: u32, cmdline: &str) -> bool {
    pids_of(uid).iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == cmdline)
    })
}

/// The PID namespace of `pid` (`pid:[…]`).
fn pid_namespace(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// Pids of the processes in any of `namespaces` (their `init` too).
fn pids_in(namespaces: &[PathBuf]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid_namespace(pid).is_some_and(|ns| namespaces.contains(&ns)))
        .collect()
}

/// Waits up to `within` for `done`; answers whether it came true.
fn eventually(within: std::time::Duration, done: impl Fn() -> bool) -> bool {
    let until = std::time::Instant::now() + within;
    while !done() {
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

#[test]
fn a_host_session_does_not_outlive_a_killed_warden() {
    // Killed mid-command, with a background job of an earlier command still running.
    const USER: u32 = 65_481;
    let env = Env::session(USER);
    let mut mcp = Mcp::start(&env);
    let started = mcp.shell("sleep 1000 >/dev/null 2>&1 & echo started");
    assert!(started.starts_with("started"), "{started}");
    // The job is forked before the answer, but may not have executed `sleep` yet.
    assert!(
        eventually(std::time::Duration::from_secs(5), || runs(
            USER,
            "sleep\x001000\0"
        )),
        "the background sleep runs: {:?}",
        pids_of(USER)
    );
    let running = pids_of(USER);
    let mut namespaces: Vec<PathBuf> = running.iter().filter_map(|&p| pid_namespace(p)).collect();
    namespaces.dedup();
    assert!(!namespaces.is_empty());
    // A command still running when warden dies: the shell is not reading its stdin, so it
    // does not see warden's end there (an idle shell would, and exit).
    mcp.next_id += 1;
    let params = serde_json::json!({"name": "host-shell", "arguments": {"command": "sleep 999"}});
    mcp.send(
        &serde_json::json!({"jsonrpc": "2.0", "id": mcp.next_id, "method": "tools/call",
                                  "params": params}),
    );
    assert!(eventually(std::time::Duration::from_secs(5), || runs(
        USER,
        "sleep\x00999\0"
    )));
    // No chance to clean up: the kernel alone must take the session down.
    mcp.child.kill().unwrap();
    mcp.child.wait().unwrap();
    let gone = eventually(std::time::Duration::from_secs(5), || {
        pids_of(USER).is_empty() && pids_in(&namespaces).is_empty()
    });
    assert!(
        gone,
        "left behind: {:?} of user {USER}, {:?} in the session's namespace",
        pids_of(USER),
        pids_in(&namespaces)
    );
}

/// A call of a host tool with a read-write root, end to end: its answer lists what it changed,
/// the call log records the change set's digest, the audit counts what the tool wrote, and
/// `warden undo` puts it back.
/// The shipped host shell made a tool per call with its folder read-write, and the folder.
fn read_write_env() -> (Env, PathBuf) {
    let env = Env::new();
    let policy = env.dir.path().join("policies/shell-host.toml");
    let text = std::fs::read_to_string(&policy)
        .unwrap()
        .replace("access = \"read-only\"", "access = \"read-write\"")
        // A call of its own: a session's commands are committed as each ends, unreviewed.
        .replace("\nsession = true", "\n# session = true");
    assert!(text.contains("read-write"), "the shipped grant changed");
    assert!(
        !text.contains("\nsession = true"),
        "the shipped policy changed"
    );
    std::fs::write(&policy, text).unwrap();
    let workspace = env.dir.path().join("workspace");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    (env, workspace)
}

#[test]
fn a_calls_changes_are_answered_logged_and_undone() {
    let (env, workspace) = read_write_env();
    let m = env.shell("echo notes > notes.txt && rm README.txt");
    assert_eq!(m["status"], "success", "{m}");
    let changes = &m["artifact"]["changes"];
    assert_eq!(changes["count"], 2, "{m}");
    let call_id = m["artifact"]["call_id"].as_str().unwrap().to_owned();
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).unwrap(),
        "notes\n"
    );
    let log = std::fs::read_to_string(env.home().join("calls.jsonl")).unwrap();
    let record: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["event"] == "call" && r["call_id"] == call_id.as_str())
        .expect("the call's record");
    assert_eq!(record["changes"]["digest"], changes["digest"]);
    assert_eq!(record["changes"]["count"], 2);
    let audit = env.warden(&["audit", "--usage", "--json"]);
    let audit: Value = serde_json::from_slice(&audit.stdout).unwrap();
    let written = &audit["writes"][0];
    assert_eq!(written["tool"], "host-shell", "{audit}");
    assert_eq!(
        (written["added"].as_u64(), written["removed"].as_u64()),
        (Some(1), Some(1))
    );

    let out = env.warden(&["undo", &call_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!workspace.join("notes.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("README.txt")).unwrap(),
        "granted file\n"
    );
    let again = env.warden(&["undo", &call_id]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("undone already"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let unknown = env.warden(&["undo", "../../etc"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no call ../../etc"));
}

/// `[limits] changes` bounds what a call's changes and what they replace may hold: past it the
/// call is answered `limit_exceeded`, its command's answer quoted, nothing applied.
#[test]
fn a_call_whose_changes_pass_its_limit_is_refused_whole() {
    let (env, workspace) = read_write_env();
    let policy = env.dir.path().join("policies/shell-host.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    let limited = text.replace("[limits]\n", "[limits]\nchanges = \"1KiB\"\n");
    assert_ne!(text, limited, "the shipped policy has no [limits] table");
    std::fs::write(&policy, limited).unwrap();
    let m = env.shell("head -c 2000 /dev/zero > big && echo small > small.txt && echo done");
    assert_eq!(m["status"], "error", "{m}");
    assert_eq!(m["error"]["kind"], "limit_exceeded", "{m}");
    let content = m["content"].as_str().unwrap();
    assert!(
        content.contains("`[limits] changes`") && content.contains("done"),
        "{m}"
    );
    assert!(!workspace.join("big").exists() && !workspace.join("small.txt").exists());
    // Within it, a call commits.
    let m = env.shell("echo small > small.txt");
    assert_eq!(m["status"], "success", "{m}");
    assert!(workspace.join("small.txt").exists());
}

/// An MCP client undoes a call with `warden/undo` (a request, not a tool): what the call
/// changed is put back, and a second undo of it is refused as invalid params.
#[test]
fn an_mcp_client_undoes_a_call_with_a_request_of_its_own() {
    use std::io::Write;
    use std::process::Stdio;
    let (env, workspace) = read_write_env();
    let m = env.shell("echo mcp > by-mcp.txt");
    assert_eq!(m["status"], "success", "{m}");
    let call_id = m["artifact"]["call_id"].as_str().unwrap().to_owned();
    let lines = [
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "warden/undo",
            "params": {"call_id": call_id}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "warden/undo",
            "params": {"call_id": call_id}}),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve")
        .env("WARDEN_TOOLBOX", env.dir.path().join("policies"))
        .env("WARDEN_HOME", env.home())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in &lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}: {answers:?}"))
    };
    // The two requests run at once: one undoes, the other finds it undone already.
    let (done, refused) = match by_id(1).get("result") {
        Some(_) => (by_id(1), by_id(2)),
        None => (by_id(2), by_id(1)),
    };
    assert_eq!(
        done["result"]["undone"][0]["call_id"],
        call_id.as_str(),
        "{done}"
    );
    assert_eq!(done["result"]["undone"][0]["added"], 1);
    assert!(!workspace.join("by-mcp.txt").exists());
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}
