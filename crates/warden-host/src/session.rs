//! Session mode's host side: a session's shell is the command of one helper, in namespaces
//! of its own (user, PID, mount with its private /tmp, network), under the tool's rlimits,
//! Landlock and seccomp, for as long as the session lasts. It reads its commands on the
//! helper's stdin, and the shared session driver (`warden_command::session`) frames them,
//! keeps deadlines and resets. Killing `init`, PID 1 of the namespace, kills everything the
//! session started.
//!
//! A command's CPU and memory peak are read before and after it from a cgroup of warden's own
//! that `init` and the shell join as the session starts, so everything they start counts
//! ([`warden_command::cgroup::Owned`]: where warden may make one, on cgroup v1 as root), as a
//! docker session's are read from its container's. Elsewhere the CPU is read from outside, in
//! `/proc`: the shell's own CPU and its waited-for children's, and `init`'s waited-for
//! children's (orphans), at the clock tick's grain; and there is no memory peak per command:
//! the kernel keeps a shell's children's largest resident set (`ru_maxrss`) as one maximum
//! over the whole session, which no reading can start anew. A job still running when a
//! command ends counts with the command that sees it end.

use crate::beside::HostSiblings;
use crate::failure::unavailable;
use crate::forks::Forked;
use crate::plan::{Call, Join, Protections, Report, Rlimits};
use crate::reports::{CLOSE_WAIT, next_report};
use crate::sandboxes::Started;
use crate::starter::Starter;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::net::unix::pipe::Receiver;
use warden_command::Cause;
use warden_command::cgroup::{Owned, Readings};
use warden_command::session::{
    Children, Counters, Launched, Launcher, Processes, Sandbox, chunks, cpu_ms,
};
use warden_core::{Limits, ToolError, Usage};
use warden_net::{Proxy, Scope, Traffic};
use warden_tx::SessionView;

/// How many more times a busy namespace is counted, how far apart, and how many equal counts
/// in a row show it holding still.
const RECOUNTS: usize = 60;
const STEADY: usize = 3;
const RECOUNT_EVERY: Duration = Duration::from_millis(5);

/// How much of a CPU time limit `/proc` shows a process used when the limit killed it: its
/// figures are sampled at the clock tick and scaled, and run up to a tenth short of the
/// runtime the kernel holds the limit against (910–990 ms seen for a 1 s limit on two busy
/// cores). A program that exits with 152 itself, having used four fifths of the limit, is
/// the one it cannot tell apart.
const CPU_SEEN_AT_LEAST: f64 = 0.8;

/// Starts a tool's session shells, each through the helper, in namespaces of its own.
pub(crate) struct HostShells {
    pub starter: Arc<Starter>,
    /// The shell of the tool's template (`/bin/sh`).
    pub shell: String,
}

impl Launcher for HostShells {
    type Sandbox = ShellNamespace;
    const FRESH: &'static str = "a fresh shell in new namespaces";

    fn processes(&self) -> Option<Processes> {
        // No cgroup of its own: the driver counts the namespace from outside.
        Some(Processes {
            limit: u64::from(self.starter.config().processes),
            cgroups: Vec::new(),
        })
    }

    async fn launch(
        &self,
        env: &[(String, String)],
        limits: &Limits,
        // A host shell runs no image (its executor refuses every choice of one).
        _image: Option<&str>,
    ) -> Result<Launched<ShellNamespace>, ToolError> {
        // A session's own credentials: its placeholders and CA last as long as its shell.
        let credentials = self.starter.credentials()?;
        let plan =
            self.starter
                .session_plan(self.shell.clone(), env.to_vec(), limits, &credentials)?;
        let mut started = self.starter.sandboxes.for_session().await?;
        started.send_call(&plan).await?;
        let Started {
            helper,
            stdin: input,
            stdout,
            stderr,
            reports,
            gate,
            view,
            guests,
            ..
        } = started;
        // The helper hands the gate over before it starts the shell.
        let gate = match gate {
            Some(socket) => {
                let by = tokio::time::Instant::now() + CLOSE_WAIT;
                self.starter.serve_gate(socket, by, credentials).await?
            }
            None => None,
        };
        let mut sandbox = ShellNamespace {
            limit: u64::from(self.starter.config().processes),
            rlimits: plan.rlimits,
            helper,
            init: None,
            shell: None,
            namespace: None,
            reports: BufReader::new(reports),
            gate,
            protections: None,
            cgroup: None,
            readings: Readings::default(),
            children: None,
            siblings: None,
        };
        // Until the shell is confined and executed: `init`'s pid, then `ready` or a failure.
        loop {
            match sandbox.report().await {
                Some(Report::Init { pid }) => sandbox.init = Some(pid),
                Some(Report::Ready(p)) => {
                    sandbox.protections = Some(p);
                    break;
                }
                Some(Report::Failed { message, .. }) => {
                    sandbox.close().await;
                    return Err(unavailable(&message));
                }
                Some(Report::Used { .. }) => {}
                Some(Report::Exited { .. }) | None => {
                    sandbox.close().await;
                    return Err(unavailable("the session's shell ended before it started"));
                }
            }
        }
        sandbox.namespace = sandbox
            .init
            .and_then(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok());
        // The shell is `init`'s one child: it reported ready just before it was executed.
        sandbox.shell = sandbox.init.and_then(|pid| {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"));
            children.ok()?.split_whitespace().next()?.parse().ok()
        });
        // Before the first command: whatever the shell starts is born in it.
        sandbox.cgroup = Owned::create().filter(|cgroup| {
            let pids = [sandbox.init, sandbox.shell];
            pids.iter().all(Option::is_some) && pids.into_iter().flatten().all(|p| cgroup.join(p))
        });
        // The view is written through where the shell sees it (its `/proc/PID/root`); a
        // command beside the shell gets a view of its own, where the sandbox keeps a stash to
        // make one from, else commands take turns.
        let viewed = view.is_some();
        let view = match (view, sandbox.shell) {
            (Some(view), Some(shell)) => {
                let tool = &self.starter.config().name;
                Some(SessionView::new(view, tool, shell, guests))
            }
            (Some(_), None) => {
                sandbox.close().await;
                return Err(unavailable(
                    "the session's shell could not be found in its sandbox",
                ));
            }
            (None, _) => None,
        };
        if !viewed || self.starter.sandboxes.stashes() {
            sandbox.siblings = self.siblings(&sandbox, plan, viewed);
        }
        Ok(Launched {
            sandbox,
            input: Box::pin(input),
            output: chunks(stdout, stderr),
            view,
        })
    }
}

impl HostShells {
    /// What starts shells beside `sandbox`'s, run with its `call`: where it has namespaces of
    /// its own to join and no gate (which serves one command at a time).
    fn siblings(&self, sandbox: &ShellNamespace, call: Call, viewed: bool) -> Option<HostSiblings> {
        let namespaces = sandbox.protections.as_ref()?.pid_namespace;
        let init = sandbox.init?;
        if !namespaces || sandbox.gate.is_some() {
            return None;
        }
        let pid_namespace = std::fs::metadata(format!("/proc/{init}/ns/pid"))
            .ok()?
            .ino();
        Some(HostSiblings {
            starter: self.starter.clone(),
            // Written once, by the session's shell.
            call: Call {
                ca_bundle: None,
                ..call
            },
            join: Join {
                init,
                pid_namespace,
                view: None,
            },
            viewed,
        })
    }
}

/// The namespaces of one session shell: the helper, and `init` inside. Dropped without
/// [`Sandbox::close`], both are killed (the helper on drop, `init` here).
pub(crate) struct ShellNamespace {
    /// The tool's process limit (`RLIMIT_NPROC`, counted in the session's user namespace).
    limit: u64,
    /// The limits every process of the session has, the shell among them.
    rlimits: Rlimits,
    helper: Forked,
    /// `init`'s pid, as warden sees it; `None` once it is known gone.
    init: Option<i32>,
    /// The shell's pid, as warden sees it.
    shell: Option<i32>,
    /// `init`'s PID namespace (`pid:[…]`), to count its processes from outside.
    namespace: Option<std::path::PathBuf>,
    reports: BufReader<Receiver>,
    /// The session's gate, when the policy grants hosts: open only while a command runs.
    gate: Option<Proxy>,
    /// What the helper put in force for the shell, as it reported: every answer says so.
    protections: Option<Protections>,
    /// The cgroup `init` and the shell joined, where warden could make one.
    cgroup: Option<Owned>,
    readings: Readings,
    /// The shell's children as the running command began: what a stop leaves alone.
    children: Option<Children>,
    /// What starts shells beside this one, where it can (namespaces of its own, no gate).
    siblings: Option<HostSiblings>,
}

impl ShellNamespace {
    /// The next report, `None` at the end of the pipe.
    async fn report(&mut self) -> Option<Report> {
        next_report(&mut self.reports).await
    }

    /// Kills `init`, and with it the namespace, while the helper (its parent, which has not
    /// reaped it) still runs: the pid cannot have been reused.
    fn kill_init(&mut self) {
        if let Some(pid) = self.init.take()
            && self.helper.running()
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Sandbox for ShellNamespace {
    type Siblings = HostSiblings;

    fn siblings(&self) -> Option<HostSiblings> {
        self.siblings.clone()
    }

    fn shell_pid(&self) -> Option<i32> {
        self.shell
    }

    /// As `init` saw the shell end: a signal a limit sends (its CPU time, counted over every
    /// command it ran itself, or a file too large) is that limit.
    async fn exit_status(&mut self) -> Result<(i64, Cause), ToolError> {
        let read = async {
            while let Some(report) = self.report().await {
                if let Report::Exited { code, signal } = report {
                    return Some((code, signal));
                }
            }
            None
        };
        match tokio::time::timeout(CLOSE_WAIT, read).await {
            Ok(Some((Some(code), _))) => Ok((i64::from(code), Cause::Exited)),
            Ok(Some((None, Some(signal)))) => {
                let broken = self.rlimits.broken_by(signal, "the session's shell");
                Ok((
                    128 + i64::from(signal),
                    broken.map_or(Cause::Exited, Cause::Limit),
                ))
            }
            Ok(Some((None, None))) => Ok((1, Cause::Exited)),
            _ => Err(ToolError::internal(
                "the session's shell ended without saying how",
            )),
        }
    }

    /// A command the shell waited for ended with the status a shell gives a process that
    /// SIGXCPU (or, past the soft limit's second of grace, SIGKILL) ended, having used its CPU
    /// time as the kernel counted it: the CPU time limit. A program that exits with 152 itself
    /// has not used the time.
    fn limit_ended(&mut self, status: i64, used: &Usage) -> Option<String> {
        let cpu_ms = used.cpu_ms?;
        let soft_ms = self.rlimits.cpu_secs as f64 * 1e3;
        let at = match status {
            s if s == 128 + i64::from(nix::libc::SIGXCPU) => soft_ms,
            137 => soft_ms + 1e3,
            _ => return None,
        };
        (cpu_ms >= at * CPU_SEEN_AT_LEAST).then(|| self.rlimits.cpu_time_used("the command"))
    }

    /// No memory killer here: the address-space limit makes allocations fail instead.
    async fn memory_killed(&mut self) -> bool {
        false
    }

    /// A fork bomb churns: while it grows, and once at the limit, its processes die on
    /// refused forks and others take their place, so one count can fall far short of the
    /// limit. A namespace with background processes is therefore counted again, 5 ms apart,
    /// until it reaches what the driver counts as full, holds still for [`STEADY`] counts in
    /// a row (background jobs, not a bomb), or [`RECOUNTS`] counts are made; the highest is
    /// answered.
    async fn processes(&mut self) -> Option<u64> {
        let namespace = self.namespace.clone()?;
        // As the session driver reckons it: a command needs a few.
        let full = self.limit.saturating_sub((self.limit / 8).max(2)).max(1);
        tokio::task::spawn_blocking(move || {
            let mut last = count_in(&namespace)?;
            let (mut most, mut same) = (last, 1);
            // The shell alone is 1; a job it left running makes 2.
            if last >= 3 {
                for _ in 0..RECOUNTS {
                    if most >= full || same >= STEADY {
                        break;
                    }
                    std::thread::sleep(RECOUNT_EVERY);
                    let now = count_in(&namespace)?;
                    same = if now == last { same + 1 } else { 1 };
                    (last, most) = (now, most.max(now));
                }
            }
            Some(most)
        })
        .await
        .ok()
        .flatten()
    }

    /// From the session's cgroup, else CPU only, from `/proc` (see the module's comment).
    fn counters(&mut self) -> Counters {
        if let Some(cgroup) = &self.cgroup {
            return self.readings.read(cgroup.counters());
        }
        let namespace = self.namespace.as_deref();
        let cpu = |pid: Option<i32>| cpu_ms(pid?, Some(namespace?));
        Counters {
            cpu_ms: cpu(self.init).zip(cpu(self.shell)).map(|(a, b)| a + b),
            peak_memory_bytes: None,
        }
    }

    fn command_starts(&mut self, scope: Scope) {
        if let Some(gate) = &self.gate {
            gate.begin(scope);
        }
        self.children = self.shell.and_then(Children::of);
    }

    fn stop_command(&mut self) -> bool {
        match (self.shell, &self.children) {
            (Some(shell), Some(children)) => children.kill_new(shell),
            _ => false,
        }
    }

    fn command_ended(&mut self) -> Option<Traffic> {
        self.gate.as_ref().map(Proxy::end)
    }

    /// `isolation`, as a call's answer has it: the helper's report of what was in force.
    fn details(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut details = serde_json::Map::new();
        if let Some(p) = &self.protections
            && let Ok(isolation) = serde_json::to_value(p)
        {
            details.insert("isolation".into(), isolation);
        }
        details
    }

    async fn close(mut self) {
        self.kill_init();
        // The helper exits once `init` and everything in its namespace are gone.
        if tokio::time::timeout(CLOSE_WAIT, self.helper.ended())
            .await
            .is_err()
        {
            self.helper.kill();
            let _ = tokio::time::timeout(CLOSE_WAIT, self.helper.ended()).await;
        }
    }
}

impl Drop for ShellNamespace {
    fn drop(&mut self) {
        // The helper is killed on drop too (`Forked`), and `init` dies with it.
        self.kill_init();
    }
}

/// Processes in the PID namespace `namespace` but its `init`.
fn count_in(namespace: &std::path::Path) -> Option<u64> {
    let mut n: u64 = 0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        if std::fs::read_link(entry.path().join("ns/pid")).is_ok_and(|l| l == namespace) {
            n += 1;
        }
    }
    Some(n.saturating_sub(1))
}
