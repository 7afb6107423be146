//! The command's own process, forked by `init`: confined step by step while still privileged
//! in its namespaces, then executed. Every step that fails is reported and nothing runs.

use crate::failure::{Failure, send, setup};
use crate::landlock::restrict;
use crate::plan::{CA_BUNDLE, Plan, Protections, REPORT_FD, Report, Rlimits, Stdin};
use nix::sys::prctl;
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The command's own process: confine, then exec. Returns only on failure.
/// `root`: warden ran as root, so the command's user is switched to the policy's.
pub(crate) fn command(
    plan: &Plan,
    reports: &mut File,
    mut protections: Protections,
    root: bool,
) -> Result<std::convert::Infallible, Failure> {
    let _ = prctl::set_pdeathsig(Signal::SIGKILL);
    nix::unistd::setsid().map_err(|e| setup(format!("setsid: {e}")))?;
    let program = find_program(plan)?;
    let limits = plan.call.rlimits;
    set_limits(&limits)?;
    std::env::set_current_dir(&plan.sandbox.cwd)
        .map_err(|e| setup(format!("entering {}: {e}", plan.sandbox.cwd.display())))?;
    connect_stdin(plan.sandbox.stdin)?;
    close_other_fds();
    // Landlock opens the roots while still privileged, then the user is dropped.
    let ruleset = crate::landlock::ruleset(plan, &mut protections)?;
    if root {
        switch_user(
            Uid::from_raw(plan.sandbox.uid),
            Gid::from_raw(plan.sandbox.gid),
        )?;
    }
    if let Some(bundle) = &plan.call.ca_bundle {
        write_bundle(bundle)?;
    }
    protections.user = format!("{}:{}", Uid::current(), Gid::current());
    prctl::set_no_new_privs().map_err(|e| setup(format!("no-new-privileges: {e}")))?;
    restrict(ruleset, &mut protections)?;
    crate::seccomp::apply(plan.sandbox.best_effort, &mut protections)?;
    protections.rlimits = true;
    let argv = cstrings(plan.call.argv.iter().map(std::string::String::as_bytes))?;
    let env = cstrings(
        plan.call
            .env
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
            plan.sandbox.uid, limits.processes
        ))),
        Err(e) => Err(setup(format!("cannot execute {}: {e}", program.display()))),
        Ok(never) => match never {},
    }
}

/// Limits every process of the command as the plan says, and lets none dump core.
fn set_limits(limits: &Rlimits) -> Result<(), Failure> {
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
    )
}

/// Points the command's stdin at what the plan says it reads.
fn connect_stdin(stdin: Stdin) -> Result<(), Failure> {
    match stdin {
        Stdin::Nothing => {
            let devnull = File::open("/dev/null").map_err(|e| setup(format!("/dev/null: {e}")))?;
            nix::unistd::dup2_stdin(&devnull).map_err(|e| setup(format!("stdin: {e}")))?;
        }
        // A session's shell reads its commands there, a program of `warden exec` its input.
        Stdin::Helper => {}
        Stdin::Terminal => {
            // SAFETY: dup2 of our own descriptors.
            if unsafe { nix::libc::dup2(1, 0) } < 0 {
                return Err(setup(format!("stdin: {}", std::io::Error::last_os_error())));
            }
            // The session this process leads (`command`'s setsid) takes the terminal as its
            // own, so ^C and job control reach its foreground process group.
            // SAFETY: TIOCSCTTY on our own descriptor, with no argument to read.
            if unsafe { nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) } < 0 {
                let e = std::io::Error::last_os_error();
                return Err(setup(format!("taking the terminal: {e}")));
            }
        }
    }
    Ok(())
}

/// Becomes the policy's user, `uid` and `gid` with no supplementary groups: warden ran as
/// root.
fn switch_user(uid: Uid, gid: Gid) -> Result<(), Failure> {
    nix::unistd::setgroups(&[]).map_err(|e| setup(format!("setgroups: {e}")))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| setup(format!("setgid: {e}")))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| setup(format!("setuid: {e}")))
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
        .call
        .argv
        .first()
        .ok_or_else(|| setup("an empty command line"))?;
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = plan
        .call
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

/// The bundle the command trusts, read-only at [`CA_BUNDLE`]; written as the command's user
/// (see the helper's `private_mounts`).
fn write_bundle(bundle: &str) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::path::Path::new(CA_BUNDLE);
    let written = match path.parent() {
        Some(folder) => std::fs::create_dir_all(folder),
        None => Ok(()),
    };
    written
        .and_then(|()| std::fs::write(path, bundle))
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)))
        .map_err(|e| setup(format!("writing {CA_BUNDLE}: {e}")))
}
