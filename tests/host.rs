//! The shipped host shell policy end to end through the `warden` binary, which re-executes
//! itself as the sandbox helper: usable as it is, confined, and honest in the audit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

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
        Command::new(env!("CARGO_BIN_EXE_warden"))
            .args(args)
            .env("WARDEN_TOOLBOX", self.dir.path().join("policies"))
            .env("WARDEN_HOME", self.home())
            .env("WARDEN_TEST_MARKER", "MARKER-env-51d")
            .output()
            .expect("warden runs")
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
    let m = env.shell(&format!("cat {}; echo x > ../planted", secret.display()));
    assert_eq!(m["status"], "error", "{m}");
    let content = m["content"].as_str().unwrap();
    assert!(!content.contains("MARKER-host-9c1"), "{content}");
    assert!(!env.dir.path().join("planted").exists());
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
    assert_eq!(details["stdout"], format!("{USER}\ngranted file\n"), "{m}");
    assert!(!m.to_string().contains("MARKER-host-9c1"), "{m}");
    let isolation = m["error"]["details"]["isolation"].clone();
    assert_eq!(isolation["user_namespace"], true, "{m}");
    assert_eq!(isolation["pid_namespace"], true, "{m}");
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
