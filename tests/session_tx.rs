//! A session's commands as transactions, on the shipped host and docker shell policies
//! (session policies) with their grant made read-write, driven over MCP one command at a time:
//! each command's changes are committed as it ends, a command warden ends leaves nothing in
//! the root nor in the session's view, what others commit meanwhile is what the session sees
//! next, and a path another process changed while a command ran is a `conflict`.

use crate::common::pids_of;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The user the host session's shell runs as: this test's own, so its processes can be found.
const UID: u32 = 65_486;

/// The user the docker session's container runs as: the root's owner, as the shipped policy
/// takes it.
const DOCKER_UID: u32 = 65_485;

/// The user warden itself runs as in [`Shell::HostNotRoot`] (its shell runs as warden's user).
const WARDEN_UID: u32 = 65_484;

/// Which shipped shell policy a session runs, and as whom.
#[derive(Clone, Copy, PartialEq)]
enum Shell {
    Host,
    /// The host shell, warden not root: its overlays are mounted in a user namespace that
    /// maps warden's own user alone.
    HostNotRoot,
    Docker,
    /// The docker shell under gVisor (the engine's `runsc-nonet`).
    Gvisor,
}

impl Shell {
    fn policy(self) -> &'static str {
        match self {
            Shell::Host | Shell::HostNotRoot => "shell-host.toml",
            Shell::Docker | Shell::Gvisor => "shell-docker.toml",
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Shell::Host | Shell::HostNotRoot => "host-shell",
            Shell::Docker | Shell::Gvisor => "shell",
        }
    }

    /// Whose processes the session's are.
    fn uid(self) -> u32 {
        match self {
            Shell::Host => UID,
            Shell::HostNotRoot => WARDEN_UID,
            Shell::Docker | Shell::Gvisor => DOCKER_UID,
        }
    }
}

struct Session {
    dir: tempfile::TempDir,
    shell: Shell,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Session {
    /// A session of `shell`'s shipped policy, its grant made read-write, over MCP.
    fn start(shell: Shell) -> Self {
        Self::with(shell, false)
    }

    /// As [`Session::start`], with two roots seen inside the workspace: its folder `ro`,
    /// read-only, holding `seen`, and at its folder `rw` the folder `other` beside it,
    /// read-write.
    fn nested(shell: Shell) -> Self {
        Self::with(shell, true)
    }

    fn with(shell: Shell, nested: bool) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["policies", "workspace"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let workspace = dir.path().join("workspace");
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(workspace.join("README.txt"), "granted file\n").unwrap();
        let inner = [
            workspace.join("ro"),
            workspace.join("rw"),
            dir.path().join("other"),
        ];
        if nested {
            for folder in &inner {
                std::fs::create_dir(folder).unwrap();
                std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o777)).unwrap();
            }
            std::fs::write(workspace.join("ro/seen"), "seen\n").unwrap();
        }
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("policies")
            .join(shell.policy());
        let text = std::fs::read_to_string(shipped).unwrap();
        let mut writable = text.replace("access = \"read-only\"", "access = \"read-write\"");
        if nested {
            let one = "fs = [{ host = \"../workspace\", access = \"read-write\" }]";
            assert!(writable.contains(one), "the shipped policy's grant");
            let rw = workspace.join("rw");
            writable = writable.replace(
                one,
                &format!(
                    "fs = [{{ host = \"../workspace\", access = \"read-write\" }},\n  \
                     {{ host = \"../workspace/ro\", access = \"read-only\" }},\n  \
                     {{ host = \"../other\", guest = \"{}\", access = \"read-write\" }}]",
                    rw.display()
                ),
            );
        }
        match shell {
            Shell::Host => {
                writable = writable.replace(
                    "# user = \"65534:65534\"",
                    &format!("user = \"{UID}:{UID}\""),
                );
                assert!(writable.contains(&format!("\nuser = \"{UID}")));
            }
            // The container runs as the root's owner, who must not be root; warden's own
            // user owns what it works on, and runs a copy of warden it can reach.
            Shell::Docker | Shell::Gvisor | Shell::HostNotRoot => {
                let uid = shell.uid();
                let home = dir.path().join("home");
                std::fs::create_dir(&home).unwrap();
                let made = inner.iter().filter(|_| nested).cloned();
                for entry in [workspace.clone(), workspace.join("README.txt"), home]
                    .into_iter()
                    .chain(made)
                {
                    std::os::unix::fs::chown(&entry, Some(uid), Some(uid)).unwrap();
                }
                std::fs::copy(env!("CARGO_BIN_EXE_warden"), dir.path().join("warden")).unwrap();
            }
        }
        if shell == Shell::Gvisor {
            writable = writable.replace("[executor]\n", "[executor]\nruntime = \"runsc-nonet\"\n");
        }
        assert!(writable.contains("read-write") && writable.contains("\nsession = true"));
        std::fs::write(dir.path().join("policies").join(shell.policy()), writable).unwrap();
        let mut child = warden(dir.path(), shell)
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut session = Self {
            dir,
            shell,
            child,
            stdin,
            stdout,
            next: 0,
        };
        session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}),
        );
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        writeln!(session.stdin, "{note}").unwrap();
        session
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params);
        self.answer()
    }

    fn send(&mut self, method: &str, params: Value) {
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to the last request sent.
    fn answer(&mut self) -> Value {
        self.answer_to(self.next)
    }

    /// The answer to request `id` (answers to others that come first are dropped).
    fn answer_to(&mut self, id: u64) -> Value {
        loop {
            let mut line = String::new();
            assert_ne!(self.stdout.read_line(&mut line).unwrap(), 0, "warden ended");
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["id"] == id {
                return v["result"].clone();
            }
        }
    }

    /// Runs `command` in the session, answered with its text and its error kind, if any.
    fn run(&mut self, command: &str) -> (String, Option<String>) {
        self.send_command(command);
        self.told()
    }

    /// Runs `command` with a timeout of `seconds`, which must end it: its answer's text.
    fn timed_out(&mut self, command: &str, seconds: u64) -> String {
        let arguments = json!({"command": command, "timeout": seconds});
        self.send(
            "tools/call",
            json!({"name": self.shell.tool(), "arguments": arguments}),
        );
        let (text, error) = self.told();
        assert!(error.is_some_and(|e| e.contains("timeout")), "{text}");
        text
    }

    fn send_command(&mut self, command: &str) {
        let args = json!({"name": self.shell.tool(), "arguments": {"command": command}});
        self.send("tools/call", args);
    }

    fn told(&mut self) -> (String, Option<String>) {
        self.told_to(self.next)
    }

    /// Request `id`'s answer: its text and its error kind, if any.
    fn told_to(&mut self, id: u64) -> (String, Option<String>) {
        let result = self.answer_to(id);
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let kind = result["isError"]
            .as_bool()
            .unwrap_or(false)
            .then(|| format!("{result}"));
        (text, kind)
    }

    /// warden's own id of the last call whose changes were committed, from the call log.
    fn last_call_with_changes(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("home/calls.jsonl")).unwrap();
        log.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["event"] == "call" && r["changes"]["count"].as_u64() > Some(0))
            .and_then(|r| r["call_id"].as_str().map(str::to_owned))
            .expect("a call with changes in the log")
    }

    /// `warden undo` of `call_id`, in the session's home.
    fn undo(&self, call_id: &str) {
        let undo = warden(self.dir.path(), self.shell)
            .args(["undo", call_id])
            .output()
            .unwrap();
        assert!(
            undo.status.success(),
            "{}",
            String::from_utf8_lossy(&undo.stderr)
        );
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.workspace().join(name)).ok()
    }

    /// The upper layer of the session's view of its root, in warden's home.
    fn upper(&self) -> Option<PathBuf> {
        let views = self.dir.path().join("home/transactions/views");
        let view = std::fs::read_dir(views).ok()?.flatten().next()?;
        Some(view.path().join("0/upper"))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// warden, on the toolbox and home in `dir`, as `shell` runs it.
fn warden(dir: &Path, shell: Shell) -> Command {
    use std::os::unix::process::CommandExt;
    let mut command = match shell {
        Shell::HostNotRoot => {
            let mut command = Command::new(dir.join("warden"));
            command.env_clear().uid(WARDEN_UID).gid(WARDEN_UID);
            command
        }
        _ => Command::new(env!("CARGO_BIN_EXE_warden")),
    };
    command
        .env("WARDEN_TOOLBOX", dir.join("policies"))
        .env("WARDEN_HOME", dir.join("home"));
    command
}

/// Replaces `path` by a rename, as an editor or another warden's commit does.
fn replace(path: &Path, text: &str) {
    let temp = path.with_extension("new");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

/// The processes of `uid` but warden's own (which runs as that user when it is not root).
fn sandboxed(uid: u32) -> Vec<u32> {
    pids_of(uid)
        .into_iter()
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            !exe.to_string_lossy().contains("warden")
        })
        .collect()
}

/// Signals `USR1` to the sandbox's processes of `uid`: a command waiting for it goes on.
fn release(uid: u32) {
    for pid in sandboxed(uid) {
        let _ = Command::new("kill")
            .args(["-USR1", &pid.to_string()])
            .status();
    }
}

/// Waits for `path` to be there (a minute at most: a hang is a failure, not a stuck suite).
fn appears(path: &Path) {
    let by = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < by,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_host_sessions_commands_are_transactions_over_its_read_write_root() {
    commands_are_transactions(Session::start(Shell::Host));
}

#[test]
fn a_host_sessions_commands_are_transactions_where_warden_is_not_root() {
    if let Some(s) = not_root() {
        commands_are_transactions(s);
    }
}

/// A host session whose warden is not root, where this test may start one (as root).
fn not_root() -> Option<Session> {
    if !std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
    {
        eprintln!("SKIPPED: only root can start warden as another user here");
        return None;
    }
    Some(Session::start(Shell::HostNotRoot))
}

#[test]
fn a_docker_sessions_commands_are_transactions_over_its_read_write_root() {
    if let Some(s) = docker(Shell::Docker) {
        commands_are_transactions(s);
    }
}

/// A docker session of `shell` that ran its first command; `None` without an engine, gVisor
/// or the Debian image here (CI has them): nothing to test.
fn docker(shell: Shell) -> Option<Session> {
    let mut s = Session::start(shell);
    let (text, error) = s.run("true");
    if error.is_some() && !std::env::var("CI").is_ok_and(|v| v == "true") {
        eprintln!("SKIPPED: {text}");
        return None;
    }
    assert_eq!(error, None, "{text}");
    Some(s)
}

/// Under gVisor the session's processes are not this machine's: warden reaches its view
/// through the engine's mount of it, which the sandbox's file server serves. A command that
/// ends commits; what others change is what it sees next; a command its timeout ends takes
/// the shell with it (its processes cannot be stopped alone) and leaves nothing.
#[test]
fn a_gvisor_docker_sessions_commands_are_transactions_over_its_read_write_root() {
    let Some(mut s) = docker(Shell::Gvisor) else {
        return;
    };
    // gVisor's own kernel answers.
    let (text, _) = s.run("dmesg 2>&1 | head -n 1; cat /proc/version");
    assert!(text.contains("gVisor") || text.contains("4.4.0"), "{text}");
    let (text, error) = s.run("echo one > a.txt && export KEPT=yes");
    assert_eq!(error, None, "{text}");
    assert_eq!(s.read("a.txt").as_deref(), Some("one\n"));

    replace(&s.workspace().join("a.txt"), "outside\n");
    std::fs::write(s.workspace().join("new.txt"), "new\n").unwrap();
    std::fs::remove_file(s.workspace().join("README.txt")).unwrap();
    let (text, error) = s.run("cat a.txt new.txt; ls; echo $KEPT");
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("outside\nnew\n"), "{text}");
    assert!(
        !text.contains("README.txt") && text.contains("yes"),
        "{text}"
    );

    let (text, error) = s.run("echo two > b.txt");
    assert_eq!(error, None, "{text}");
    assert_eq!(s.read("b.txt").as_deref(), Some("two\n"));
    let call_id = s.last_call_with_changes();
    s.undo(&call_id);
    let (text, error) = s.run("ls");
    assert_eq!(error, None, "{text}");
    assert!(!text.contains("b.txt"), "{text}");

    let script = "echo lost > lost.txt; echo gone > a.txt; sleep 100";
    s.timed_out(script, 2);
    assert_eq!(s.read("lost.txt"), None);
    assert_eq!(s.read("a.txt").as_deref(), Some("outside\n"));
    let (text, error) = s.run("cat a.txt; ls");
    assert_eq!(error, None, "{text}");
    assert!(
        text.starts_with("outside\n") && !text.contains("lost.txt"),
        "{text}"
    );
}

#[test]
fn a_host_sessions_commands_beside_its_shell_are_transactions_of_their_own() {
    commands_beside_are_transactions(Session::start(Shell::Host));
}

#[test]
fn a_host_sessions_commands_beside_its_shell_are_transactions_where_warden_is_not_root() {
    if let Some(s) = not_root() {
        commands_beside_are_transactions(s);
    }
}

#[test]
fn a_docker_sessions_commands_beside_its_shell_are_transactions_of_their_own() {
    if let Some(s) = docker(Shell::Docker) {
        commands_beside_are_transactions(s);
    }
}

/// A docker shell beside the session's joins its container from this machine rather than
/// through the engine: it runs as the session's shell does (user, groups, capabilities,
/// seccomp filters, no new privileges, cgroups, limits, umask, namespaces but its mounts and
/// PID, the engine's masks over `/proc`), and nothing it can read shows warden's command
/// line.
#[test]
fn a_docker_sessions_commands_beside_its_shell_run_as_its_shell_does() {
    let Some(mut s) = docker(Shell::Docker) else {
        return;
    };
    let probe = "grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs|Seccomp|Seccomp_filters):' \
                 /proc/self/status; cat /proc/self/cgroup /proc/self/limits; umask; hostname; \
                 for n in net ipc uts cgroup; do readlink /proc/self/ns/$n; done; \
                 wc -c </proc/timer_list; wc -c </proc/keys; ls /proc/acpi | wc -l; \
                 env | grep -v -E '^(PWD|OLDPWD|_|SHLVL)=' | sort; \
                 cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'warden[ ]serve' || true";
    let probe = format!("readlink /proc/self/ns/pid; {probe}");
    let (alone, error) = s.run(&probe);
    assert_eq!(error, None, "{alone}");
    assert!(alone.contains("Seccomp:\t2") && alone.contains("CapBnd:\t0000000000000000"));
    s.send_command(
        "trap 'go=1' USR1; i=0; while [ -z \"$go\" ] && [ $i -lt 1200 ]; do sleep 0.05; \
         i=$((i+1)); done; trap - USR1",
    );
    let holding = s.next;
    let (beside, error) = s.run(&probe);
    assert_eq!(error, None, "{beside}");
    // What the probe printed, without the notes warden adds (`[exit code 0]`, …).
    let printed = |text: &str| -> Vec<String> {
        text.lines()
            .take_while(|l| !l.starts_with('['))
            .map(str::to_owned)
            .collect()
    };
    let (alone, beside) = (printed(&alone), printed(&beside));
    assert_ne!(beside[0], alone[0], "a PID namespace of its own");
    assert_eq!(beside[1..], alone[1..]);
    assert_eq!(
        alone.last().map(String::as_str),
        Some("0"),
        "no command line shows"
    );
    release(s.shell.uid());
    let (text, error) = s.told_to(holding);
    assert_eq!(error, None, "{text}");
}

#[test]
fn a_host_sessions_commands_beside_its_shell_see_the_roots_inside_its_root() {
    commands_beside_see_nested_roots(Session::nested(Shell::Host));
}

#[test]
fn a_host_sessions_commands_beside_its_shell_see_the_roots_inside_its_root_where_warden_is_not_root()
 {
    if not_root().is_some() {
        commands_beside_see_nested_roots(Session::nested(Shell::HostNotRoot));
    }
}

/// A command beside the session's shell, where roots are seen inside its read-write root:
/// the read-only one as the session has it, the read-write one through a view of its own,
/// each write committed to the folder it was made in while the shell's command runs on.
fn commands_beside_see_nested_roots(mut s: Session) {
    s.send_command(
        "echo session > a.txt; trap 'go=1' USR1; i=0; \
         while [ -z \"$go\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; trap - USR1",
    );
    let holding = s.next;
    appears(&s.dir.path().join("home/transactions/views"));
    let (text, error) = s.run(
        "cat ro/seen; echo outer > outer.txt; echo inner > rw/inner.txt; \
         (echo no > ro/no.txt) 2>/dev/null || echo ro-refused; [ -e a.txt ] || echo no-a",
    );
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("seen\nro-refused\nno-a"), "{text}");
    assert_eq!(s.read("outer.txt").as_deref(), Some("outer\n"));
    let other = s.dir.path().join("other/inner.txt");
    assert_eq!(
        std::fs::read_to_string(other).ok().as_deref(),
        Some("inner\n")
    );
    assert_eq!(
        s.read("rw/inner.txt"),
        None,
        "the write went to the root seen there"
    );
    assert_eq!(s.read("ro/no.txt"), None);
    assert_eq!(s.read("a.txt"), None, "the shell's command has not ended");
    release(s.shell.uid());
    let (text, error) = s.told_to(holding);
    assert_eq!(error, None, "{text}");
    let (text, error) = s.run("cat a.txt outer.txt rw/inner.txt ro/seen");
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("session\nouter\ninner\nseen\n"), "{text}");
}

/// Commands that overlap the one the session's shell runs: each sees the roots through a view
/// of its own, commits as it ends (while the shell's command still runs), leaves nothing when
/// warden ends it, ends the jobs it started with it, and counts for conflicts as any call.
fn commands_beside_are_transactions(mut s: Session) {
    let uid = s.shell.uid();
    // The session's shell runs a command that wrote in its view and waits (a minute at
    // most: commands that took turns would run after it, and fail below, not hang).
    s.send_command(
        "echo session > a.txt; echo session > shared.txt; echo kept > /tmp/mark; \
         trap 'go=1' USR1; i=0; while [ -z \"$go\" ] && [ $i -lt 1200 ]; do \
         sleep 0.05; i=$((i+1)); done; trap - USR1",
    );
    let holding = s.next;
    appears(&s.dir.path().join("home/transactions/views"));
    let upper = loop {
        match s.upper() {
            Some(upper) => break upper,
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    appears(&upper.join("shared.txt"));

    // Beside it: the session's /tmp, the roots as committed (not the shell's command's
    // writes), and its own writes committed as it ends; the job it started ends with it.
    let (text, error) = s.run(
        "cat /tmp/mark; [ -e a.txt ] || echo no-a; echo beside > b.txt; \
         echo beside > shared.txt; sleep 1000 & echo started",
    );
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("kept\nno-a\nstarted"), "{text}");
    assert_eq!(s.read("b.txt").as_deref(), Some("beside\n"));
    assert_eq!(s.read("shared.txt").as_deref(), Some("beside\n"));
    assert_eq!(s.read("a.txt"), None, "the shell's command has not ended");
    let jobs: Vec<u32> = sandboxed(uid)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x001000\x00")
        })
        .collect();
    assert!(jobs.is_empty(), "its job outlived it: {jobs:?}");

    // What warden keeps for those views is out of reach of a command beside the shell.
    let probe = "ls -A /.warden/views /.warden/roots/0 2>/dev/null; \
                 umount /.warden 2>/dev/null && echo unmounted; echo probed";
    let (text, error) = s.run(probe);
    assert_eq!(
        (text.lines().next(), error),
        (Some("probed"), None),
        "{text}"
    );

    // One its timeout ends leaves nothing.
    let script = "echo lost > lost.txt; rm b.txt; sleep 100";
    s.timed_out(script, 1);
    assert_eq!(s.read("lost.txt"), None);
    assert_eq!(s.read("b.txt").as_deref(), Some("beside\n"));

    // The shell's command wrote a path a command beside it committed meanwhile: a conflict.
    release(uid);
    let (text, error) = s.told_to(holding);
    assert!(error.is_some_and(|e| e.contains("conflict")), "{text}");
    assert_eq!(s.read("a.txt"), None);
    assert_eq!(s.read("shared.txt").as_deref(), Some("beside\n"));
    // What the commands beside committed is what the session's shell sees next, which
    // reaches nothing warden keeps for their views either.
    let (text, error) = s.run("cat b.txt shared.txt; ls");
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("beside\nbeside\n"), "{text}");
    assert!(!text.contains("lost.txt"), "{text}");
    let (text, error) = s.run(probe);
    assert_eq!(
        (text.lines().next(), error),
        (Some("probed"), None),
        "{text}"
    );
}

fn commands_are_transactions(mut s: Session) {
    let uid = s.shell.uid();

    // A command that ends commits; the shell lives on with its view.
    let (text, error) =
        s.run("echo one > a.txt && mkdir old && echo f > old/f.txt && export KEPT=yes");
    assert_eq!(error, None, "{text}");
    assert_eq!(s.read("a.txt").as_deref(), Some("one\n"));
    assert_eq!(s.read("old/f.txt").as_deref(), Some("f\n"));

    // A command its timeout ends leaves nothing, in the root or in what the session sees.
    // Its link where a file was is replaced when the file is put back, never written through.
    let script = "echo two > b.txt; echo lost > lost.txt; rm README.txt; ln -s a.txt README.txt; \
                  echo two > a.txt; sleep 100";
    s.timed_out(script, 1);
    assert_eq!(s.read("a.txt").as_deref(), Some("one\n"));
    assert_eq!(s.read("lost.txt"), None);
    let (text, error) = s.run("cat a.txt README.txt; ls; [ -L README.txt ] || echo $KEPT");
    assert_eq!(error, None, "{text}");
    assert_eq!(
        text.lines().take(2).collect::<Vec<_>>(),
        ["one", "granted file"]
    );
    assert!(!text.contains("lost.txt") && text.contains("yes"), "{text}");

    // What another process changed meanwhile (a file replaced by a rename, the session having
    // read it; a file added; a file removed; folders made, with files in them) is what the
    // session sees next.
    replace(&s.workspace().join("a.txt"), "outside\n");
    std::fs::write(s.workspace().join("new.txt"), "new\n").unwrap();
    std::fs::remove_file(s.workspace().join("README.txt")).unwrap();
    std::fs::create_dir_all(s.workspace().join("made/below")).unwrap();
    std::fs::write(s.workspace().join("made/below/deep.txt"), "deep\n").unwrap();
    let (text, error) = s.run("cat a.txt new.txt made/below/deep.txt; ls");
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("outside\nnew\ndeep\n"), "{text}");
    assert!(!text.contains("README.txt"), "{text}");
    // What the view was brought up to is no change of the command's: the files stay root's.
    for name in ["a.txt", "new.txt"] {
        let owner = std::fs::metadata(s.workspace().join(name)).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&owner), 0, "{name}");
    }
    // A folder moved (which the kernel's events cannot follow by path) too.
    std::fs::rename(s.workspace().join("old"), s.workspace().join("moved")).unwrap();
    let (text, error) = s.run("cat moved/f.txt; ls");
    assert_eq!(error, None, "{text}");
    assert!(text.starts_with("f\n") && !text.contains("old"), "{text}");

    // A path another process changes while a command runs is a conflict: the command's
    // changes are not applied, and the session sees the root's.
    s.send_command(
        "trap 'go=1' USR1; echo mine > d.txt; echo mine > e.txt; \
         while [ -z \"$go\" ]; do sleep 0.05; done; trap - USR1",
    );
    let upper = s.upper().expect("the session's view");
    appears(&upper.join("e.txt"));
    std::fs::write(s.workspace().join("d.txt"), "theirs\n").unwrap();
    // The shell's trap lets the command end (a `sleep` the signal ends is waited for anew).
    release(uid);
    let (text, error) = s.told();
    assert!(error.is_some_and(|e| e.contains("conflict")), "{text}");
    assert_eq!(s.read("d.txt").as_deref(), Some("theirs\n"));
    assert_eq!(s.read("e.txt"), None);
    let (text, error) = s.run("cat d.txt; ls");
    assert_eq!(error, None, "{text}");
    assert!(
        text.starts_with("theirs\n") && !text.contains("e.txt"),
        "{text}"
    );

    // What a background job writes after an answer is the next command's change; an undo
    // of that command is what the session sees next.
    let script = "sh -c 'trap \"echo bg > bg.txt; exit\" USR2; while :; do sleep 0.05; done' &";
    let (text, error) = s.run(script);
    assert_eq!(error, None, "{text}");
    // The job's shell may not have run its `exec` yet when the answer comes.
    let by = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let job = loop {
        let found = sandboxed(uid).into_iter().find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("USR2")
        });
        match found {
            Some(pid) => break pid.to_string(),
            None if std::time::Instant::now() < by => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            None => panic!("the background job never showed"),
        }
    };
    Command::new("kill").args(["-USR2", &job]).status().unwrap();
    appears(&upper.join("bg.txt"));
    assert_eq!(s.read("bg.txt"), None, "written while no command ran");
    let (text, error) = s.run("true");
    assert_eq!(error, None, "{text}");
    assert_eq!(s.read("bg.txt").as_deref(), Some("bg\n"));
    let call_id = s.last_call_with_changes();
    s.undo(&call_id);
    assert_eq!(s.read("bg.txt"), None);
    let (text, error) = s.run("ls");
    assert_eq!(error, None, "{text}");
    assert!(!text.contains("bg.txt"), "{text}");

    // What no transaction can hold (a pipe) is refused, and the session starts afresh.
    let (text, error) = s.run("mkfifo pipe; export GONE=1");
    assert!(error.is_some_and(|e| e.contains("denied")), "{text}");
    assert!(text.contains("fresh sandbox"), "{text}");
    assert!(!s.workspace().join("pipe").exists());
    let (text, error) = s.run("ls; echo \"[$GONE]\"");
    assert_eq!(error, None, "{text}");
    assert!(!text.contains("pipe") && text.contains("[]"), "{text}");

    // The shell's own end commits what its last command wrote.
    let (_, error) = s.run("echo bye > bye.txt; exit 0");
    assert_eq!(error, None);
    assert_eq!(s.read("bye.txt").as_deref(), Some("bye\n"));
}
