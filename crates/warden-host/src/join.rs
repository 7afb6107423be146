//! A shell beside a session's, for a command that overlaps another: the helper joins the
//! session's live sandbox — the namespaces of its `init` (user, mount, IPC, network, PID) and
//! its root — instead of making one, then forks the command, which is confined exactly as the
//! session's shell was ([`crate::exec::command`]: rlimits, Landlock, seccomp, user). The
//! command is a process of the session's PID namespace: it dies with the session's `init`,
//! and what it leaves running is reaped there.
//!
//! Where the session sees its read-write roots through a view, the shell beside it gets views
//! of its own ([`crate::mounts::view_beside`], in a mount namespace of its own), whose writes
//! are its command's transaction; and it runs in a PID namespace of its own below the
//! session's, under an `init` of its own, so that what it starts ends with it and its view is
//! final once it is gone.

use crate::exec::command;
use crate::failure::{Failure, SETUP_FAILED, fail, send, setup};
use crate::plan::{Join, Plan, Protections, Report, Sandbox};
use crate::received::receive_call;
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, Uid, fork};
use std::fs::File;
use std::os::unix::fs::MetadataExt;

/// Joins the sandbox of `join`, reads the call from `stdin` and runs it there, confined as
/// `sandbox` says; answers the command's exit code (128 + signal when killed).
pub(crate) fn run(
    sandbox: &Sandbox,
    join: &Join,
    stdin: &File,
    reports: &mut File,
) -> Result<i32, Failure> {
    let joined = Joined::open(join, sandbox.host_network)?;
    let plan = Plan {
        sandbox: sandbox.clone(),
        call: receive_call(stdin)?.0,
    };
    // Asked before joining: in the sandbox's user namespace, root is no one.
    let root = Uid::effective().is_root();
    // As root, the views are made of the host's folders before joining.
    let ahead = match &join.view {
        Some(view) if root => Some(crate::mounts::views_ahead(sandbox, view)?),
        _ => None,
    };
    joined.enter()?;
    if let Some(view) = &join.view {
        crate::mounts::view_beside(sandbox, view, ahead)?;
    }
    let protections = Protections {
        user_namespace: true,
        pid_namespace: true,
        network_namespace: !sandbox.host_network,
        private_tmp: true,
        ..Protections::default()
    };
    // SAFETY: this process has a single thread.
    match unsafe { fork() }.map_err(|e| setup(format!("fork: {e}")))? {
        ForkResult::Child => {
            if join.view.is_some() {
                std::process::exit(alone(&plan, reports, protections, root));
            }
            match command(&plan, reports, protections, root) {
                Err(f) => fail(reports, f),
                Ok(never) => match never {},
            }
            std::process::exit(SETUP_FAILED)
        }
        ForkResult::Parent { child } => {
            send(
                reports,
                &Report::Init {
                    pid: child.as_raw(),
                },
            );
            crate::signals::pass_to(child);
            let (code, signal) = ended(child);
            send(reports, &Report::Exited { code, signal });
            Ok(code.or(signal.map(|s| 128 + s)).unwrap_or(SETUP_FAILED))
        }
    }
}

/// Runs the command of `plan` in a PID namespace of its own below the session's, under an
/// `init` of its own ([`crate::init`]: it reaps orphans, and its end ends everything
/// the command started); answers how `init` ended (the command's exit code, 128 + signal
/// when killed). This process passes signals on to `init`, and dies with the helper.
fn alone(plan: &Plan, reports: &mut File, protections: Protections, root: bool) -> i32 {
    let _ = prctl::set_pdeathsig(Signal::SIGKILL);
    if let Err(e) = unshare(CloneFlags::CLONE_NEWPID) {
        fail(reports, setup(format!("a PID namespace of its own: {e}")));
        return SETUP_FAILED;
    }
    // SAFETY: this process has a single thread.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            std::process::exit(crate::init::init(plan, reports, protections, root))
        }
        Ok(ForkResult::Parent { child }) => {
            crate::signals::pass_to(child);
            let (code, signal) = ended(child);
            code.or(signal.map(|s| 128 + s)).unwrap_or(SETUP_FAILED)
        }
        Err(e) => {
            fail(reports, setup(format!("fork: {e}")));
            SETUP_FAILED
        }
    }
}

/// How `child` ended: its exit code, or the signal that killed it.
fn ended(child: Pid) -> (Option<i32>, Option<i32>) {
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return (Some(code), None),
            Ok(WaitStatus::Signaled(_, signal, _)) => return (None, Some(signal as i32)),
            Err(nix::errno::Errno::EINTR) | Ok(_) => {}
            Err(_) => return (None, None),
        }
    }
}

/// The namespaces and root of a live sandbox's `init`, opened.
struct Joined {
    /// In the order they are joined: the user namespace first, which gives the rights to
    /// join the others.
    namespaces: Vec<(File, CloneFlags)>,
    root: File,
}

impl Joined {
    fn open(join: &Join, host_network: bool) -> Result<Joined, Failure> {
        let gone = |e: std::io::Error| {
            Failure::unavailable(format!("the session's sandbox is gone ({e})"))
        };
        let open = |name: &str| File::open(format!("/proc/{}/ns/{name}", join.init)).map_err(gone);
        let pid = open("pid")?;
        if pid.metadata().map_err(gone)?.ino() != join.pid_namespace {
            return Err(Failure::unavailable("the session's sandbox is gone"));
        }
        let mut namespaces = vec![
            (open("user")?, CloneFlags::CLONE_NEWUSER),
            (open("mnt")?, CloneFlags::CLONE_NEWNS),
            (open("ipc")?, CloneFlags::CLONE_NEWIPC),
        ];
        if !host_network {
            namespaces.push((open("net")?, CloneFlags::CLONE_NEWNET));
        }
        namespaces.push((pid, CloneFlags::CLONE_NEWPID));
        let root = File::open(format!("/proc/{}/root", join.init)).map_err(gone)?;
        Ok(Joined { namespaces, root })
    }

    /// Joins the namespaces (the PID namespace for the children forked from here on), then
    /// makes the sandbox's root this process's root and working directory.
    fn enter(self) -> Result<(), Failure> {
        for (namespace, kind) in &self.namespaces {
            setns(namespace, *kind).map_err(|e| setup(format!("joining {kind:?}: {e}")))?;
        }
        nix::unistd::fchdir(&self.root).map_err(|e| setup(format!("entering the root: {e}")))?;
        nix::unistd::chroot(".").map_err(|e| setup(format!("entering the root: {e}")))
    }
}
