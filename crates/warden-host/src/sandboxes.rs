//! Starting a tool's sandboxes: a helper spawned and handed the sandbox part of the plan,
//! which sets the sandbox up (namespaces, user mapping, private `/tmp`, the gate) and then
//! waits for its one call.
//!
//! Most of a call's cost is that set-up, so each tool keeps a few sandboxes prepared ahead,
//! off the call's path: a call takes one (or starts one now when none is ready), and another
//! is prepared in the background. A sandbox serves exactly one call and is never reused; a
//! sandbox prepared for a tool is only ever taken by that tool's calls, so a reloaded policy
//! (a new tool) never meets a sandbox of the old one. A prepared helper waits with no
//! deadline, so it is spawned from warden's long-lived spawning thread and takes a
//! parent-death signal (it dies with warden); dropped with its tool, it is killed.

use crate::plan::{Call, GATE_FD, REPORT_FD, Sandbox, frame};
use crate::tool::{Starter, internal, unavailable};
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use warden_core::ToolError;

/// A helper just started with the sandbox part of its plan: its process, and the read end of
/// its report pipe.
pub(crate) struct Started {
    pub child: tokio::process::Child,
    pub reports: tokio::net::unix::pipe::Receiver,
    /// Where the helper hands over the gate's listener, when the plan has a gate.
    pub gate: Option<tokio::net::UnixStream>,
}

/// A tool's sandboxes prepared ahead, each for one call.
pub(crate) struct Prepared {
    /// How many to keep ready; 0 starts every call's sandbox on the call's path.
    depth: usize,
    state: Mutex<Ready>,
}

#[derive(Default)]
struct Ready {
    sandboxes: VecDeque<Started>,
    /// Being prepared in the background.
    starting: usize,
}

impl Prepared {
    pub(crate) fn new(depth: usize) -> Self {
        Self {
            depth,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ready> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A prepared sandbox whose helper still runs, if one is ready, and how many to start in
    /// the background to make up the depth again (counted as starting from now).
    fn take(&self) -> (Option<Started>, usize) {
        let mut ready = self.lock();
        let mut taken = None;
        while let Some(mut sandbox) = ready.sandboxes.pop_front() {
            // One that failed its set-up (or was killed) is dropped: the call starts one now,
            // whose report says what went wrong.
            if matches!(sandbox.child.try_wait(), Ok(None)) {
                taken = Some(sandbox);
                break;
            }
        }
        let wanted = self
            .depth
            .saturating_sub(ready.sandboxes.len() + ready.starting);
        ready.starting += wanted;
        (taken, wanted)
    }

    fn ready(&self, sandbox: Option<Started>) {
        let mut ready = self.lock();
        ready.starting = ready.starting.saturating_sub(1);
        ready.sandboxes.extend(sandbox);
    }
}

impl Starter {
    /// A sandbox for one call: a prepared one when ready, else one started now; either way the
    /// tool's prepared sandboxes are made up again in the background.
    pub(crate) async fn sandbox_for_call(self: &Arc<Self>) -> Result<Started, ToolError> {
        let (taken, wanted) = self.prepared.take();
        for _ in 0..wanted {
            let starter = self.clone();
            tokio::spawn(async move {
                let started = starter.start(true).await;
                if let Err(e) = &started {
                    tracing::debug!("preparing a host sandbox: {}", e.message);
                }
                starter.prepared.ready(started.ok());
            });
        }
        match taken {
            Some(sandbox) => Ok(sandbox),
            None => self.start(false).await,
        }
    }

    /// Starts a helper and hands it the sandbox part of the plan; its stdin stays open, for
    /// the call part ([`Starter::send_call`]) and a session's commands. `ahead`: the helper
    /// may wait long for its call (prepared ahead, or a session's), so it must die with
    /// warden and is spawned from the long-lived spawning thread.
    pub(crate) async fn start(&self, ahead: bool) -> Result<Started, ToolError> {
        let sandbox = Sandbox {
            dies_with_warden: ahead,
            ..self.sandbox.clone()
        };
        let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| internal(format!("a pipe for the helper's reports: {e}")))?;
        let gate = if sandbox.gate {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| internal(format!("a socket for the gate: {e}")))?;
            Some((ours, theirs))
        } else {
            None
        };
        let gate_raw = gate.as_ref().map(|(_, theirs)| theirs.as_raw_fd());
        let mut command = tokio::process::Command::new(&self.helper.program);
        command
            .args(&self.helper.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let raw = report_write.as_raw_fd();
        // SAFETY: between fork and exec only dup2 and fcntl run, both async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                inherit_as(raw, REPORT_FD)?;
                if let Some(raw) = gate_raw {
                    inherit_as(raw, GATE_FD)?;
                }
                Ok(())
            });
        }
        // A helper that waits for its call dies with the thread that spawned it (its
        // parent-death signal): that must be a thread that lives as long as warden. A helper
        // started for a call at hand has its alarm instead, and is spawned here.
        let spawned = if ahead {
            crate::spawner::spawn(command).await
        } else {
            command.spawn()
        };
        let mut child = spawned.map_err(|e| {
            unavailable(&format!(
                "cannot start the sandbox helper {}: {e}",
                self.helper.shown().display()
            ))
        })?;
        drop(report_write);
        let gate = match gate {
            Some((ours, theirs)) => {
                drop(theirs);
                ours.set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(ours))
                    .map(Some)
                    .map_err(|e| internal(format!("the gate's socket: {e}")))?
            }
            None => None,
        };
        let framed = frame(&sandbox).map_err(internal)?;
        if let Some(stdin) = child.stdin.as_mut() {
            // A helper that died early shows up as a missing report.
            let _ = stdin.write_all(&framed).await;
        }
        let reports = tokio::net::unix::pipe::Receiver::from_owned_fd(report_read)
            .map_err(|e| internal(format!("the helper's report pipe: {e}")))?;
        Ok(Started {
            child,
            reports,
            gate,
        })
    }

    /// Hands a started sandbox its one call: the helper starts the call's deadline now.
    pub(crate) async fn send_call(sandbox: &mut Started, call: &Call) -> Result<(), ToolError> {
        let framed = frame(call).map_err(internal)?;
        if let Some(stdin) = sandbox.child.stdin.as_mut() {
            // A helper that died early shows up as a missing report.
            let _ = stdin.write_all(&framed).await;
            let _ = stdin.flush().await;
        }
        Ok(())
    }
}

/// In the child, between fork and exec: `raw` becomes `target`, kept across exec.
fn inherit_as(raw: i32, target: i32) -> std::io::Result<()> {
    // SAFETY: fcntl and dup2 are async-signal-safe and touch only these descriptors.
    unsafe {
        if raw == target {
            let flags = nix::libc::fcntl(raw, nix::libc::F_GETFD);
            nix::libc::fcntl(raw, nix::libc::F_SETFD, flags & !nix::libc::FD_CLOEXEC);
        } else if nix::libc::dup2(raw, target) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
