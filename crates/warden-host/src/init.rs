//! `init`, PID 1 of a sandbox's PID namespace (a call's or a session's, made by the helper;
//! a shell's beside a session's with a view, made by the helper that joins it): it starts the
//! command, reaps every orphan, reports how the command ended and exits, which ends every
//! process left in the namespace.

use crate::exec::command;
use crate::failure::{SETUP_FAILED, fail, send, setup};
use crate::plan::{Plan, Protections, Report};
use nix::sys::prctl;
use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use std::fs::File;

/// PID 1 of the namespace: starts the command, reaps every orphan, reports how the command
/// ended and exits, which kills every process left in the namespace.
pub(crate) fn init(plan: &Plan, reports: &mut File, protections: Protections, root: bool) -> i32 {
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL) {
        fail(reports, setup(format!("parent-death signal: {e}")));
        return SETUP_FAILED;
    }
    // SAFETY: this process has a single thread.
    let command = match unsafe { fork() } {
        Err(e) => {
            fail(reports, setup(format!("fork: {e}")));
            return SETUP_FAILED;
        }
        Ok(ForkResult::Child) => {
            match command(plan, reports, protections, root) {
                Err(f) => fail(reports, f),
                Ok(never) => match never {},
            }
            std::process::exit(SETUP_FAILED)
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    // The command leads its own session, so its process group has its pid.
    crate::signals::pass_to(Pid::from_raw(-command.as_raw()));
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
    if let Ok(used) = getrusage(UsageWho::RUSAGE_CHILDREN) {
        let cpu = used.user_time() + used.system_time();
        send(
            reports,
            &Report::Used {
                cpu_ms: cpu.tv_sec() as f64 * 1e3 + cpu.tv_usec() as f64 / 1e3,
                // Linux counts ru_maxrss in KiB.
                max_rss_bytes: u64::try_from(used.max_rss()).unwrap_or(0) * 1024,
            },
        );
    }
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
