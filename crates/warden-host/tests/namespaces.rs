//! No nested namespaces: a command can neither create namespaces (user, network, mount, PID
//! or any other) nor join one with `setns`; threads and forks still work.
//!
//! Several attempts are made so that the kernel itself would answer differently were the
//! filter not there (a flag combination it calls invalid, a bad descriptor): EPERM then comes
//! from the filter alone.

use crate::common::*;
use serde_json::json;

const PYTHON: &str = "[executor]\nkind = \"host\"\nname = \"py\"\n\
                      argv = [\"/usr/bin/python3\", \"-c\", \"{code}\"]\n\
                      [limits]\ntimeout = \"20s\"\nmemory = \"1GiB\"\n";

/// Python that makes each attempt in a forked child of its own (a namespace it created must
/// not change the next attempt) and prints `name: result`, the result being `ok` or the
/// errno's name. The system calls go through ctypes: python 3.11 has no `os.unshare` or
/// `os.setns`, and `clone` and `clone3` have no wrapper at all.
const ATTEMPTS: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
MACHINE = os.uname().machine
NR = {'x86_64': dict(unshare=272, setns=308, clone=56, clone3=435),
      'aarch64': dict(unshare=97, setns=268, clone=220, clone3=435)}[MACHINE]
X32 = 0x40000000 if MACHINE == 'x86_64' else None
USER, NET, NS, PID = 0x10000000, 0x40000000, 0x20000, 0x20000000
IPC, UTS, CGROUP, TIME = 0x8000000, 0x4000000, 0x2000000, 0x80
NAMES = dict(USER=USER, NET=NET, NS=NS, PID=PID, IPC=IPC, UTS=UTS, CGROUP=CGROUP, TIME=TIME)
SIGCHLD, CLONE_PTRACE, CLONE_SIGHAND, CLONE_FILES = 17, 0x2000, 0x800, 0x400

def attempt(name, call):
    pid = os.fork()
    if pid == 0:
        r = call()
        os._exit(0 if r >= 0 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(f'{name}: ' + ('ok' if code == 0 else errno.errorcode.get(code, str(code))), flush=True)

def raw(nr, *args):
    return libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))

def raw_clone(flags, nr=NR['clone']):
    r = raw(nr, flags, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)  # the new process, in its new namespaces
    return r
"#;

/// `code` without the indentation its lines share.
fn dedent(code: &str) -> String {
    let indent = code
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    code.lines()
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or("")))
        .collect()
}

/// Runs `code` (after [`ATTEMPTS`]) in the sandbox and returns what it printed, line by line.
async fn attempts(code: &str) -> Vec<String> {
    let place = Place::new();
    let (tool, limits) = place.tool(PYTHON);
    let code = format!("{ATTEMPTS}{}", dedent(code));
    let r = call(&tool, &limits, json!({ "code": code })).await;
    let out = r.unwrap_or_else(|e| panic!("{}: {}", e.kind, e.message));
    out.content
        .lines()
        .filter(|l| !l.starts_with('['))
        .map(str::to_owned)
        .collect()
}

fn expect(lines: &[String], name: &str, result: &str) {
    let want = format!("{name}: {result}");
    assert!(lines.contains(&want), "wanted `{want}` in {lines:#?}");
}

#[tokio::test]
async fn unshare_of_any_namespace_is_refused() {
    let lines = attempts(
        r#"
        for name, flags in [('USER', USER), ('USER|NET', USER | NET), ('USER|NS', USER | NS),
                            ('USER|PID', USER | PID), ('NET', NET), ('NS', NS), ('PID', PID)]:
            attempt(name, lambda: libc.unshare(flags))
        for name, flag in NAMES.items():
            attempt('alone ' + name, lambda: libc.unshare(flag | CLONE_PTRACE))
        attempt('files', lambda: libc.unshare(CLONE_FILES))
        if X32:
            attempt('x32 USER', lambda: raw(X32 | NR['unshare'], USER))
        "#,
    )
    .await;
    // A user namespace needs no privilege (and gives it for the others): without the filter
    // the first four succeed.
    for name in [
        "USER", "USER|NET", "USER|NS", "USER|PID", "NET", "NS", "PID",
    ] {
        expect(&lines, name, "EPERM");
    }
    // Each flag on its own is refused by the filter, before the kernel would call the flags
    // invalid (CLONE_PTRACE means nothing to unshare: EINVAL without the filter).
    for name in ["USER", "NET", "NS", "PID", "IPC", "UTS", "CGROUP", "TIME"] {
        expect(&lines, &format!("alone {name}"), "EPERM");
    }
    // Unsharing what the process already has (its descriptor table) stays.
    expect(&lines, "files", "ok");
    // So is the x32 entry point (without the filter: ENOSYS, or ok where the kernel has x32).
    if cfg!(target_arch = "x86_64") {
        expect(&lines, "x32 USER", "EPERM");
    }
}

#[tokio::test]
async fn clone_into_new_namespaces_and_clone3_are_refused() {
    let lines = attempts(
        r#"
        attempt('clone USER', lambda: raw_clone(USER | SIGCHLD))
        attempt('clone USER|NET', lambda: raw_clone(USER | NET | SIGCHLD))
        for name, flag in NAMES.items():
            if flag != TIME:  # in clone's flags, that bit belongs to the exit signal
                attempt('alone ' + name, lambda: raw_clone(flag | CLONE_SIGHAND))
        attempt('clone3', lambda: raw(NR['clone3'], 0, 0))
        attempt('fork', lambda: raw_clone(SIGCHLD))
        if X32:
            attempt('x32 clone USER', lambda: raw_clone(USER | SIGCHLD, X32 | NR['clone']))
        "#,
    )
    .await;
    // Without the filter both succeed.
    expect(&lines, "clone USER", "EPERM");
    expect(&lines, "clone USER|NET", "EPERM");
    // CLONE_SIGHAND without CLONE_VM is invalid: EINVAL, were the filter not first.
    for name in ["USER", "NET", "NS", "PID", "IPC", "UTS", "CGROUP"] {
        expect(&lines, &format!("alone {name}"), "EPERM");
    }
    // clone3's flags are out of the filter's sight: ENOSYS, on which libc falls back to clone
    // (without the filter, a null argument is EINVAL).
    expect(&lines, "clone3", "ENOSYS");
    // A plain clone is a fork.
    expect(&lines, "fork", "ok");
    if cfg!(target_arch = "x86_64") {
        expect(&lines, "x32 clone USER", "EPERM");
    }
}

#[tokio::test]
async fn setns_is_refused() {
    // The namespaces named by a pidfd of the process, and by its /proc file (Landlock leaves
    // nsfs files alone, so that open succeeds).
    let lines = attempts(
        r#"
        fd = os.pidfd_open(os.getpid())
        attempt('setns NET', lambda: libc.setns(fd, NET))
        attempt('setns any', lambda: libc.setns(fd, 0))
        attempt('setns bad fd', lambda: libc.setns(-1, 0))
        if X32:
            attempt('x32 setns', lambda: raw(X32 | NR['setns'], -1, 0))
        try:
            ns = os.open('/proc/self/ns/net', os.O_RDONLY)
            attempt('setns /proc', lambda: libc.setns(ns, NET))
        except OSError as e:
            print('setns /proc:', errno.errorcode[e.errno])
        "#,
    )
    .await;
    expect(&lines, "setns NET", "EPERM");
    // Without the filter: EINVAL (a pidfd needs a namespace type) and EBADF.
    expect(&lines, "setns any", "EPERM");
    expect(&lines, "setns bad fd", "EPERM");
    if cfg!(target_arch = "x86_64") {
        expect(&lines, "x32 setns", "EPERM");
    }
    assert!(
        lines
            .iter()
            .any(|l| l == "setns /proc: EPERM" || l == "setns /proc: EACCES"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn unshare_from_util_linux_fails() {
    if !std::path::Path::new("/usr/bin/unshare").exists() {
        eprintln!("no /usr/bin/unshare here: skipped");
        return;
    }
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    let r = call(
        &tool,
        &limits,
        json!({"command": "for f in -U -n -Un -Um -Up; do unshare $f --fork true 2>&1; echo \"$f=$?\"; done; \
                           unshare -U true && echo INSIDE; true"}),
    )
    .await;
    let t = text(&r);
    // Without the filter, -U, -Un and -Up succeed.
    for f in ["-U", "-n", "-Un", "-Um", "-Up"] {
        assert!(
            t.lines()
                .any(|l| l.starts_with(&format!("{f}=")) && l != format!("{f}=0")),
            "unshare {f} succeeded: {t}"
        );
    }
    assert!(t.contains("Operation not permitted"), "{t}");
    assert!(!t.contains("INSIDE"), "{t}");
}

#[tokio::test]
async fn threads_and_forks_still_work() {
    let place = Place::new();
    // Threads: glibc tries clone3 first and falls back to clone on ENOSYS.
    let (py, limits) = place.tool(PYTHON);
    let code = dedent(
        r#"
        import os, subprocess, threading
        done = []
        def work(i): done.append(sum(range(10000 * i)))
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print('threads', len(done))
        pid = os.fork()
        if pid == 0: os._exit(7)
        print('fork', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        out = subprocess.run(['/bin/echo', 'spawned'], capture_output=True, text=True).stdout
        print('spawn', out.strip())
        "#,
    );
    let r = call(&py, &limits, json!({ "code": code })).await;
    let t = text(&r);
    assert!(t.contains("threads 8"), "{t}");
    assert!(t.contains("fork 7"), "{t}");
    assert!(t.contains("spawn spawned"), "{t}");

    let (sh, limits) = place.tool(&shell("", "", ""));
    let r = call(
        &sh,
        &limits,
        json!({"command": "for i in 1 2 3; do (true) & done; wait; echo forked; echo $(echo sub)shell"}),
    )
    .await;
    let t = text(&r);
    assert!(t.contains("forked\nsubshell"), "{t}");
}

#[tokio::test]
async fn the_answer_says_new_namespaces_are_refused() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    let out = call(&tool, &limits, json!({"command": "true"}))
        .await
        .expect("true runs");
    let isolation = &out.details["isolation"];
    assert_eq!(isolation["seccomp"], true, "{isolation}");
    assert_eq!(isolation["new_namespaces_denied"], true, "{isolation}");
}
