//! The helper: the small, single-threaded process, forked by the fork server (`crate::forks`),
//! that confines one command. Between `fork` and `exec` a threaded process may only make
//! async-signal-safe calls, so warden itself never forks; this process has one thread and may
//! do as it likes.
//!
//! Three processes, from outside in:
//! - the helper (forked for warden) reads the sandbox's part of the plan, clones `init` into
//!   new namespaces and maps its user from outside, then (perhaps much later: a sandbox
//!   prepared ahead) reads the call's part, starts the call's deadline and hands it to `init`;
//! - `init` ([`crate::init`]), PID 1 of the new PID namespace, dies with the helper
//!   (parent-death signal) and reaps orphans; when the command ends, it reports and exits, and
//!   the kernel kills whatever the command left behind;
//! - the command ([`crate::exec`]): confined, then executed.

use crate::failure::{Failure, SETUP_FAILED, fail, send, setup};
use crate::mounts::Detached;
use crate::plan::{Plan, Protections, REPORT_FD, Report, Sandbox};
use crate::received::{read_frame, receive_call};
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::prctl;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, fork};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// Runs one helper, in a process of its own (a fork server's child). Never returns.
pub(crate) fn main() -> ! {
    // SAFETY: warden passes the write end of its report pipe as fd 3; nothing else here owns
    // it. If it is missing the writes fail, which only loses the reports.
    let mut reports = unsafe { File::from_raw_fd(REPORT_FD) };
    // SAFETY: fd 0 stays open; ManuallyDrop keeps this File from closing it.
    let stdin = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    let code = match read_frame(&stdin).and_then(|(sandbox, _)| run(&sandbox, &stdin, &mut reports))
    {
        Ok(code) => code,
        Err(f) => {
            fail(&mut reports, f);
            SETUP_FAILED
        }
    };
    std::process::exit(code)
}

/// Sets `sandbox` up — `init` cloned into new namespaces, which maps its user, enters its own
/// root (`crate::mounts`) and binds the gate — then reads the call from `stdin` and hands it
/// to `init`, which starts the command. Waits for `init`; the helper's exit code is the
/// command's (128 + signal when killed).
fn run(sandbox: &Sandbox, stdin: &File, reports: &mut File) -> Result<i32, Failure> {
    tie_to_warden()?;
    if let Some(join) = &sandbox.join {
        return crate::join::run(sandbox, join, stdin, reports);
    }
    let sandboxing = Sandboxing {
        sandbox,
        root: Uid::effective().is_root(),
        stdin,
    };
    // As root, the roots are copied here, where every folder above them can be passed through;
    // else `init` copies them as warden's user.
    let detached = if sandboxing.root {
        Some(crate::mounts::detach(sandbox, false)?)
    } else {
        None
    };
    // `init` reads one byte once its user is mapped, then the call's frame.
    let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| setup(format!("pipe: {e}")))?;
    let (go_read, mut go_write) = (File::from(go_read), File::from(go_write));
    let child = match sandboxing.clone_init(detached, &go_read, &go_write, reports) {
        Ok(pid) => {
            // Only `init` reads: with it gone, a call larger than the pipe fails rather than
            // blocks.
            drop(go_read);
            sandboxing.hand_over(pid, &mut go_write, reports)?
        }
        // Net grants are kept by the namespace's gate: without one they would be the host's
        // whole network; a call's view of its roots is a mount of the namespace: without one
        // it would write the roots in place. So no best effort for either.
        Err(e)
            if sandbox.best_effort
                && !sandbox.gate
                && !sandbox.roots.iter().any(|r| r.view.is_some()) =>
        {
            sandboxing.without_namespaces(e, reports)?
        }
        Err(e) => return Err(sandboxing.namespaces_refused(e)),
    };
    crate::signals::pass_to(child);
    drop(go_write);
    if sandbox.gate {
        // `init` holds its own copy; warden must see the socket close if `init` dies early.
        let _ = nix::unistd::close(crate::plan::GATE_FD);
    }
    // Only init and the command report from here on.
    let _ = nix::unistd::close(std::mem::replace(reports, null_file()));
    Ok(wait_code(child))
}

/// A sandbox lives as long as warden wants it, and no longer: should the fork server end (it
/// ends with warden, however warden ended: `crate::spawner`), the helper is killed, and `init`
/// with it (its own parent-death signal), which ends everything in the namespace. The fork
/// server keeps out of the terminal's process group, so a person's ^C reaches warden alone,
/// which passes it on to a program of `warden exec` or ends.
fn tie_to_warden() -> Result<(), Failure> {
    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| setup(format!("parent-death signal: {e}")))?;
    if nix::unistd::getppid() == Pid::from_raw(1) {
        return Err(setup("warden ended before the sandbox was set up"));
    }
    Ok(())
}

/// What the helper's steps share: the sandbox it sets up, whether warden runs as root (then
/// the command runs as the policy's user), and the stdin the call's frame comes on.
#[derive(Clone, Copy)]
struct Sandboxing<'a> {
    sandbox: &'a Sandbox,
    root: bool,
    stdin: &'a File,
}

impl Sandboxing<'_> {
    /// Clones `init` into new namespaces, where it goes on as [`Self::init_in_namespaces`]
    /// says. `Err`: the kernel refused the namespaces.
    fn clone_init(
        self,
        mut detached: Option<Detached>,
        go_read: &File,
        go_write: &File,
        reports: &mut File,
    ) -> nix::Result<Pid> {
        // A user namespace of its own even as root: the kernel counts RLIMIT_NPROC per namespace,
        // so a fork bomb in one call cannot use up the processes of another call of the same user.
        let mut flags = CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWNS;
        if !self.sandbox.host_network {
            flags |= CloneFlags::CLONE_NEWNET;
        }
        let protections = Protections {
            user_namespace: true,
            pid_namespace: true,
            network_namespace: !self.sandbox.host_network,
            ..Protections::default()
        };
        let theirs = go_write.as_raw_fd();
        let mut stack = vec![0u8; 1 << 20];
        let init_in_namespaces = Box::new(move || {
            self.init_in_namespaces(detached.take(), go_read, theirs, &protections, reports)
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
    }

    /// `init`'s first steps, in its new namespaces: waits on `go_read` until the helper has
    /// mapped its user, enters its root and binds the gate, then waits there for the call and
    /// runs [`init`]. Exits with `init`'s code.
    fn init_in_namespaces(
        self,
        detached: Option<Detached>,
        go_read: &File,
        go_write: RawFd,
        protections: &Protections,
        reports: &mut File,
    ) -> ! {
        // A prepared sandbox may wait long for its call: it must not outlive the helper.
        // Dead before this line, the helper leaves the pipe without a writer (our copy
        // closed), so the read below ends.
        let _ = prctl::set_pdeathsig(Signal::SIGKILL);
        let _ = nix::unistd::close(go_write);
        // Wait until the parent has mapped our user: until then we are nobody here.
        let mut go = [0u8; 1];
        if (&*go_read).read_exact(&mut go).is_err() {
            std::process::exit(SETUP_FAILED);
        }
        let mut protections = protections.clone();
        let sandbox = self.sandbox;
        let user = self
            .root
            .then(|| (Uid::from_raw(sandbox.uid), Gid::from_raw(sandbox.gid)));
        let entered = match detached {
            Some(roots) => Ok(roots),
            None => crate::mounts::detach(sandbox, true),
        }
        .and_then(|roots| crate::mounts::enter(sandbox, roots, user));
        if let Err(f) = entered {
            fail(reports, f);
            std::process::exit(SETUP_FAILED);
        }
        protections.private_tmp = true;
        if sandbox.gate {
            if let Err(f) = crate::gate::open_in_namespace() {
                fail(reports, f);
                std::process::exit(SETUP_FAILED);
            }
            protections.gate = true;
        }
        // Set up: from here on this sandbox waits for its one call.
        let plan = match read_frame(go_read) {
            Ok((call, _)) => Plan {
                sandbox: sandbox.clone(),
                call,
            },
            // The helper is gone or failed, and has said so.
            Err(_) => std::process::exit(SETUP_FAILED),
        };
        std::process::exit(crate::init::init(&plan, reports, protections, self.root))
    }

    /// Maps the user of `init` (cloned), lets it go on, and hands it the call on `go` once
    /// warden sends it. Answers `init`.
    fn hand_over(self, init: Pid, go: &mut File, reports: &mut File) -> Result<Pid, Failure> {
        let mapped = if self.root {
            map_user(
                init,
                Uid::from_raw(self.sandbox.uid),
                Gid::from_raw(self.sandbox.gid),
                false,
            )
        } else {
            map_user(init, Uid::current(), Gid::current(), true)
        };
        if let Err(f) = mapped {
            let _ = kill(init, Signal::SIGKILL);
            let _ = waitpid(init, None);
            return Err(f);
        }
        go.write_all(b"g")
            .map_err(|e| setup(format!("pipe: {e}")))?;
        send(reports, &Report::Init { pid: init.as_raw() });
        // `init` gone meanwhile shows in its exit status and reports.
        let _ = receive_call(self.stdin).map(|(_, framed)| go.write_all(&framed));
        Ok(init)
    }

    /// The policy's best effort when the kernel `refused` namespaces: `init` forked as it is,
    /// once the call has come, unless a root is to be seen elsewhere than at its own path.
    /// Answers `init`.
    fn without_namespaces(self, refused: Errno, reports: &mut File) -> Result<Pid, Failure> {
        let sandbox = self.sandbox;
        if let Some(root) = sandbox.roots.iter().find(|r| r.guest != r.host) {
            return Err(Failure::unavailable(format!(
                "this machine does not let warden create namespaces ({refused}), and the root \
                 {} is to be seen at {}, which takes a mount namespace: run warden where it may \
                 unshare, or drop the grant's `guest`",
                root.host.display(),
                root.guest.display()
            )));
        }
        let protections =
            Protections::without_namespaces(&refused.to_string(), sandbox.host_network);
        let plan = Plan {
            sandbox: sandbox.clone(),
            call: receive_call(self.stdin)?.0,
        };
        // SAFETY: this process has a single thread.
        match unsafe { fork() }.map_err(|e| setup(format!("fork: {e}")))? {
            ForkResult::Child => {
                std::process::exit(crate::init::init(&plan, reports, protections, self.root))
            }
            ForkResult::Parent { child } => {
                send(
                    reports,
                    &Report::Init {
                        pid: child.as_raw(),
                    },
                );
                Ok(child)
            }
        }
    }

    /// Why the sandbox cannot be had when the kernel `refused` namespaces, and what to do.
    fn namespaces_refused(self, refused: Errno) -> Failure {
        Failure::unavailable(format!(
            "this machine does not let warden create namespaces ({refused}): {}",
            if self.root {
                "run warden where it may unshare (outside a restricted container)"
            } else {
                "unprivileged user namespaces are disabled; run warden as root or enable \
                 them (sysctl kernel.unprivileged_userns_clone=1)"
            }
        ))
    }
}

fn null_file() -> File {
    // The descriptor was handed on; a placeholder keeps `reports` valid to drop.
    File::open("/dev/null").unwrap_or_else(|_| std::process::exit(SETUP_FAILED))
}

/// Maps `uid` and `gid` into the user namespace of `child` as themselves: the command's user
/// when warden is root, else warden's own (which then may not call setgroups). Only a process
/// outside the namespace may map ids other than its own.
pub(crate) fn map_user(
    child: Pid,
    uid: Uid,
    gid: Gid,
    deny_setgroups: bool,
) -> Result<(), Failure> {
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
