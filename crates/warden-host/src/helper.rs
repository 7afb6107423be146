//! The helper: the small, single-threaded process that warden re-executes to confine one
//! command. Between `fork` and `exec` a threaded process may only make async-signal-safe
//! calls, so warden itself never forks; this process has one thread and may do as it likes.
//!
//! Three processes, from outside in:
//! - the helper (started by warden) reads the plan, leaves warden's namespaces and forks;
//! - `init`, PID 1 of the new PID namespace, dies with the helper (parent-death signal) and
//!   reaps orphans; when the command ends, it reports and exits, and the kernel kills whatever
//!   the command left behind;
//! - the command: its own session, rlimits, an unprivileged user, no-new-privileges, a
//!   Landlock domain, stdin on `/dev/null`, the granted environment only.

use crate::landlock::restrict;
use crate::plan::{Plan, Protections, REPORT_FD, Report};
use nix::sched::CloneFlags;
use nix::sys::prctl;
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, fork};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Exit code of the helper when it could not start the command (the report says why).
pub(crate) const SETUP_FAILED: i32 = 125;

/// A setup step that failed: `unavailable` when this machine lacks the protection.
pub(crate) struct Failure {
    pub(crate) unavailable: bool,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn setup(message: impl Into<String>) -> Self {
        Self {
            unavailable: false,
            message: message.into(),
        }
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self {
            unavailable: true,
            message: message.into(),
        }
    }
}

fn setup(message: impl Into<String>) -> Failure {
    Failure::setup(message)
}

/// Runs the helper: call it first thing in `main` of the process warden re-executes, before
/// any thread starts. Never returns.
pub fn main() -> ! {
    // SAFETY: warden passes the write end of its report pipe as fd 3; nothing else here owns
    // it. If it is missing the writes fail, which only loses the reports.
    let mut reports = unsafe { File::from_raw_fd(REPORT_FD) };
    let code = match read_plan().and_then(|plan| run(&plan, &mut reports)) {
        Ok(code) => code,
        Err(f) => {
            send(
                &mut reports,
                &Report::Failed {
                    unavailable: f.unavailable,
                    message: f.message,
                },
            );
            SETUP_FAILED
        }
    };
    std::process::exit(code)
}

fn read_plan() -> Result<Plan, Failure> {
    let mut text = Vec::new();
    std::io::stdin()
        .read_to_end(&mut text)
        .map_err(|e| setup(format!("reading the plan: {e}")))?;
    serde_json::from_slice(&text).map_err(|e| setup(format!("a malformed plan: {e}")))
}

fn send(reports: &mut File, report: &Report) {
    if let Ok(mut line) = serde_json::to_vec(report) {
        line.push(b'\n');
        let _ = reports.write_all(&line);
    }
}

/// Starts `init` in new namespaces and waits for it; the helper's exit code is the command's
/// (128 + signal when killed).
fn run(plan: &Plan, reports: &mut File) -> Result<i32, Failure> {
    // Should warden die without killing us, the command still ends.
    nix::unistd::alarm::set(plan.deadline_secs.clamp(1, u32::MAX as u64) as u32);
    let root = Uid::effective().is_root();
    let mut protections = Protections::default();
    // A user namespace of its own even as root: the kernel counts RLIMIT_NPROC per namespace,
    // so a fork bomb in one call cannot use up the processes of another call of the same user.
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWNS;
    if !plan.host_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| setup(format!("pipe: {e}")))?;
    protections.user_namespace = true;
    protections.pid_namespace = true;
    protections.network_namespace = !plan.host_network;
    let mut stack = vec![0u8; 1 << 20];
    let child = {
        let (protections, go_read) = (protections.clone(), &go_read);
        let reports = &mut *reports;
        let init_in_namespaces = Box::new(move || {
            // Wait until the parent has mapped our user: until then we are nobody here.
            let mut go = [0u8; 1];
            if nix::unistd::read(go_read, &mut go) != Ok(1) {
                std::process::exit(SETUP_FAILED);
            }
            let mut protections = protections.clone();
            if plan.tmp > 0 {
                if let Err(f) = private_tmp(plan.tmp) {
                    fail(reports, f);
                    std::process::exit(SETUP_FAILED);
                }
                protections.private_tmp = true;
            }
            std::process::exit(init(plan, reports, protections, root))
        });
        // SAFETY: this process has a single thread; the child runs on its own copy of memory.
        unsafe {
            nix::sched::clone(
                init_in_namespaces,
                &mut stack,
                flags,
                Some(Signal::SIGCHLD as i32),
            )
        }
    };
    let child = match child {
        Ok(pid) => {
            let mapped = if root {
                map_user(pid, Uid::from_raw(plan.uid), Gid::from_raw(plan.gid), false)
            } else {
                map_user(pid, Uid::current(), Gid::current(), true)
            };
            if let Err(f) = mapped {
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                return Err(f);
            }
            nix::unistd::write(&go_write, b"g").map_err(|e| setup(format!("pipe: {e}")))?;
            pid
        }
        Err(e) if plan.best_effort => {
            protections = Protections::default();
            protections
                .missing
                .push(format!("namespaces (the kernel refused them: {e})"));
            if !plan.host_network {
                protections
                    .missing
                    .push("network isolation: the host's network is reachable".into());
            }
            // SAFETY: this process has a single thread.
            match unsafe { fork() }.map_err(|e| setup(format!("fork: {e}")))? {
                ForkResult::Child => std::process::exit(init(plan, reports, protections, root)),
                ForkResult::Parent { child } => child,
            }
        }
        Err(e) => {
            return Err(Failure::unavailable(format!(
                "this machine does not let warden create namespaces ({e}): {}",
                if root {
                    "run warden where it may unshare (outside a restricted container)"
                } else {
                    "unprivileged user namespaces are disabled; run warden as root or enable \
                     them (sysctl kernel.unprivileged_userns_clone=1)"
                }
            )));
        }
    };
    drop((go_read, go_write));
    // Only init and the command report from here on.
    let _ = nix::unistd::close(std::mem::replace(reports, null_file()));
    Ok(wait_code(child))
}

fn fail(reports: &mut File, f: Failure) {
    send(
        reports,
        &Report::Failed {
            unavailable: f.unavailable,
            message: f.message,
        },
    );
}

fn null_file() -> File {
    // The descriptor was handed on; a placeholder keeps `reports` valid to drop.
    File::open("/dev/null").unwrap_or_else(|_| std::process::exit(SETUP_FAILED))
}

/// Mounts of this namespace stay in it; `/tmp` becomes the call's own tmpfs.
fn private_tmp(size: u64) -> Result<(), Failure> {
    use nix::mount::{MsFlags, mount};
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| setup(format!("making the mounts private: {e}")))?;
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("size={size},mode=1777").as_str()),
    )
    .map_err(|e| setup(format!("mounting a tmpfs at /tmp: {e}")))
}

/// Maps `uid` and `gid` into the user namespace of `child` as themselves: the command's user
/// when warden is root, else warden's own (which then may not call setgroups). Only a process
/// outside the namespace may map ids other than its own.
fn map_user(child: Pid, uid: Uid, gid: Gid, deny_setgroups: bool) -> Result<(), Failure> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/{child}/{file}"), text)
            .map_err(|e| setup(format!("writing /proc/{child}/{file}: {e}")))
    };
    if deny_setgroups {
        write("setgroups", "deny".into())?;
    }
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))
}

/// PID 1 of the namespace: starts the command, reaps every orphan, reports how the command
/// ended and exits, which kills every process left in the namespace.
fn init(plan: &Plan, reports: &mut File, protections: Protections, root: bool) -> i32 {
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL) {
        send(
            reports,
            &Report::Failed {
                unavailable: false,
                message: format!("parent-death signal: {e}"),
            },
        );
        return SETUP_FAILED;
    }
    // SAFETY: this process has a single thread.
    let command = match unsafe { fork() } {
        Err(e) => {
            send(
                reports,
                &Report::Failed {
                    unavailable: false,
                    message: format!("fork: {e}"),
                },
            );
            return SETUP_FAILED;
        }
        Ok(ForkResult::Child) => {
            let failure = match command(plan, reports, protections, root) {
                Err(f) => f,
                Ok(never) => match never {},
            };
            send(
                reports,
                &Report::Failed {
                    unavailable: failure.unavailable,
                    message: failure.message,
                },
            );
            std::process::exit(SETUP_FAILED)
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    let report = loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                break Report::Exited {
                    code: Some(code),
                    signal: None,
                };
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                break Report::Exited {
                    code: None,
                    signal: Some(signal as i32),
                };
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                break Report::Exited {
                    code: None,
                    signal: None,
                };
            }
        }
    };
    // Without a PID namespace, the command's session is what can be reached.
    let _ = kill(Pid::from_raw(-command.as_raw()), Signal::SIGKILL);
    send(reports, &report);
    match report {
        Report::Exited {
            code: Some(code), ..
        } => code,
        Report::Exited {
            signal: Some(sig), ..
        } => 128 + sig,
        _ => SETUP_FAILED,
    }
}

fn wait_code(child: Pid) -> i32 {
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Err(nix::errno::Errno::EINTR) | Ok(_) => {}
            Err(_) => return SETUP_FAILED,
        }
    }
}

/// The command's own process: confine, then exec. Returns only on failure.
/// `root`: warden ran as root, so the command's user is switched to the policy's.
fn command(
    plan: &Plan,
    reports: &mut File,
    mut protections: Protections,
    root: bool,
) -> Result<std::convert::Infallible, Failure> {
    let _ = prctl::set_pdeathsig(Signal::SIGKILL);
    nix::unistd::setsid().map_err(|e| setup(format!("setsid: {e}")))?;
    let program = find_program(plan)?;
    let limits = plan.rlimits;
    let set = |r: Resource, soft: u64, hard: u64, name: &str| {
        setrlimit(r, soft, hard).map_err(|e| setup(format!("setting {name}: {e}")))
    };
    set(
        Resource::RLIMIT_CPU,
        limits.cpu_secs,
        limits.cpu_secs + 1,
        "RLIMIT_CPU",
    )?;
    set(
        Resource::RLIMIT_AS,
        limits.address_space,
        limits.address_space,
        "RLIMIT_AS",
    )?;
    set(
        Resource::RLIMIT_FSIZE,
        limits.file_size,
        limits.file_size,
        "RLIMIT_FSIZE",
    )?;
    set(
        Resource::RLIMIT_NOFILE,
        limits.open_files,
        limits.open_files,
        "RLIMIT_NOFILE",
    )?;
    set(Resource::RLIMIT_CORE, 0, 0, "RLIMIT_CORE")?;
    set(
        Resource::RLIMIT_NPROC,
        limits.processes,
        limits.processes,
        "RLIMIT_NPROC",
    )?;
    std::env::set_current_dir(&plan.cwd)
        .map_err(|e| setup(format!("entering {}: {e}", plan.cwd.display())))?;
    let devnull = File::open("/dev/null").map_err(|e| setup(format!("/dev/null: {e}")))?;
    nix::unistd::dup2_stdin(&devnull).map_err(|e| setup(format!("stdin: {e}")))?;
    drop(devnull);
    close_other_fds();
    // Landlock opens the roots while still privileged, then the user is dropped.
    let ruleset = crate::landlock::ruleset(plan, &mut protections)?;
    if root {
        let (uid, gid) = (Uid::from_raw(plan.uid), Gid::from_raw(plan.gid));
        nix::unistd::setgroups(&[]).map_err(|e| setup(format!("setgroups: {e}")))?;
        nix::unistd::setresgid(gid, gid, gid).map_err(|e| setup(format!("setgid: {e}")))?;
        nix::unistd::setresuid(uid, uid, uid).map_err(|e| setup(format!("setuid: {e}")))?;
    }
    protections.user = format!("{}:{}", Uid::current(), Gid::current());
    prctl::set_no_new_privs().map_err(|e| setup(format!("no-new-privileges: {e}")))?;
    restrict(ruleset, &mut protections)?;
    crate::seccomp::apply(plan.best_effort, &mut protections)?;
    protections.rlimits = true;
    let argv = cstrings(plan.argv.iter().map(|a| a.as_bytes()))?;
    let env = cstrings(
        plan.env
            .iter()
            .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat()),
    )?;
    let path = CString::new(program.as_os_str().as_bytes())
        .map_err(|_| setup("the program's path has a NUL byte"))?;
    nix::fcntl::fcntl(
        &*reports,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|e| setup(format!("report descriptor: {e}")))?;
    send(reports, &Report::Ready(protections));
    match nix::unistd::execve(&path, &argv, &env) {
        // Linux checks RLIMIT_NPROC at execve, against every process of the user.
        Err(nix::errno::Errno::EAGAIN) => Err(setup(format!(
            "user {} already has {} processes (the policy's `processes`), counting other \
             calls' and the machine's: give this tool a `user` of its own or raise `processes`",
            plan.uid, limits.processes
        ))),
        Err(e) => Err(setup(format!("cannot execute {}: {e}", program.display()))),
        Ok(never) => match never {},
    }
}

fn cstrings<I, B>(items: I) -> Result<Vec<CString>, Failure>
where
    I: Iterator<Item = B>,
    B: Into<Vec<u8>>,
{
    items
        .map(|b| CString::new(b).map_err(|_| setup("an argument has a NUL byte")))
        .collect()
}

/// `argv[0]` as a path, or looked up in the granted `PATH` (a shell's default when none).
fn find_program(plan: &Plan) -> Result<PathBuf, Failure> {
    let name = plan
        .argv
        .first()
        .ok_or_else(|| setup("an empty command line"))?;
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = plan
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| setup(format!("`{name}` is not found in PATH={path}")))
}

/// Every descriptor above the report pipe closes before the command starts: warden's
/// descriptors are not the command's to inherit.
fn close_other_fds() {
    // SAFETY: no live Rust object in this process owns a descriptor above REPORT_FD.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_close_range,
            (REPORT_FD + 1) as nix::libc::c_uint,
            nix::libc::c_uint::MAX,
            0 as nix::libc::c_uint,
        );
    }
}
