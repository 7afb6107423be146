//! Starting a tool's sandboxes: a helper forked and handed the sandbox part of the plan,
//! which sets the sandbox up (namespaces, user mapping, private `/tmp`, the gate) and then
//! waits for its one call.
//!
//! Most of a call's cost is that set-up, so each tool keeps a few sandboxes prepared ahead,
//! off the call's path: a call takes one (or starts one now when none is ready), and another
//! is prepared in the background. A sandbox serves exactly one call and is never reused; a
//! sandbox prepared for a tool is only ever taken by that tool's calls, so a reloaded policy
//! (a new tool) never meets a sandbox of the old one. A prepared helper waits with no
//! deadline; like every helper it dies with the fork server, which dies with warden, and
//! dropped with its tool, it is killed.

use crate::failure::unavailable;
use crate::forks::{Forked, Forker};
use crate::plan::{Call, Sandbox, frame};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use warden_core::ToolError;

/// A helper just forked with the sandbox part of its plan: its process, its stdin (for the
/// call part and a session's commands), stdout, stderr and reports.
pub(crate) struct Started {
    pub helper: Forked,
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    pub reports: pipe::Receiver,
    /// Where the helper hands over the gate's listener, when the plan has one.
    pub gate: Option<tokio::net::UnixStream>,
}

/// A tool's sandboxes prepared ahead, each for one call.
struct Prepared {
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
    fn new(depth: usize) -> Self {
        Self {
            depth,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ready> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A prepared sandbox whose helper still runs, if one is ready, and how many to start in
    /// the background to make up the depth again (counted as starting from now).
    fn take(&self) -> (Option<Started>, usize) {
        let mut ready = self.lock();
        let mut taken = None;
        while let Some(sandbox) = ready.sandboxes.pop_front() {
            // One that failed its set-up (or was killed) is dropped: the call starts one now,
            // whose report says what went wrong.
            if sandbox.helper.running() {
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

/// What starts one tool's sandboxes: the sandbox part of its plans, the fork server, the
/// sandboxes prepared ahead.
pub(crate) struct Sandboxes {
    forker: Arc<Forker>,
    /// The sandbox part of every plan of this tool, made once at load.
    sandbox: Sandbox,
    prepared: Prepared,
}

impl Sandboxes {
    /// Starts `sandbox`es through `forker`, keeping `prepared` of them ready ahead.
    pub(crate) fn new(forker: Arc<Forker>, sandbox: Sandbox, prepared: usize) -> Self {
        Self {
            forker,
            sandbox,
            prepared: Prepared::new(prepared),
        }
    }

    /// A sandbox for one call: a prepared one when ready, else one started now; either way the
    /// tool's prepared sandboxes are made up again in the background.
    pub(crate) async fn for_call(self: &Arc<Self>) -> Result<Started, ToolError> {
        let (taken, wanted) = self.prepared.take();
        for _ in 0..wanted {
            let sandboxes = self.clone();
            tokio::spawn(async move {
                let started = sandboxes.start(false).await;
                if let Err(e) = &started {
                    tracing::debug!("preparing a host sandbox: {}", e.message);
                }
                sandboxes.prepared.ready(started.ok());
            });
        }
        match taken {
            Some(sandbox) => Ok(sandbox),
            None => self.start(false).await,
        }
    }

    /// Forks a helper and hands it the sandbox part of the plan; its stdin stays open, for
    /// the call part ([`Started::send_call`]) and, when the command `reads_stdin`, what it
    /// reads (a session's commands, a program's input).
    pub(crate) async fn start(&self, reads_stdin: bool) -> Result<Started, ToolError> {
        let sandbox = Sandbox {
            reads_stdin,
            ..self.sandbox.clone()
        };
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| ToolError::internal(format!("a pipe for the sandbox's helper: {e}")))
        };
        let ((stdin, stdin_ours), (stdout_ours, stdout), (stderr_ours, stderr)) =
            (pipe()?, pipe()?, pipe()?);
        let (reports_ours, reports) = pipe()?;
        let gate = if sandbox.gate {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| ToolError::internal(format!("a socket for the gate: {e}")))?;
            Some((ours, OwnedFd::from(theirs)))
        } else {
            None
        };
        let mut theirs = vec![&stdin, &stdout, &stderr, &reports];
        theirs.extend(gate.as_ref().map(|(_, theirs)| theirs));
        let helper = self
            .forker
            .fork(&theirs)
            .map_err(|e| unavailable(&e.to_string()))?;
        drop(theirs);
        drop((stdin, stdout, stderr, reports));
        let gate = match gate {
            Some((ours, theirs)) => {
                drop(theirs);
                ours.set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(ours))
                    .map(Some)
                    .map_err(|e| ToolError::internal(format!("the gate's socket: {e}")))?
            }
            None => None,
        };
        let ours = |e: std::io::Error| ToolError::internal(format!("the helper's pipes: {e}"));
        let mut started = Started {
            helper,
            stdin: pipe::Sender::from_owned_fd(stdin_ours).map_err(ours)?,
            stdout: pipe::Receiver::from_owned_fd(stdout_ours).map_err(ours)?,
            stderr: pipe::Receiver::from_owned_fd(stderr_ours).map_err(ours)?,
            reports: pipe::Receiver::from_owned_fd(reports_ours).map_err(ours)?,
            gate,
        };
        let framed = frame(&sandbox).map_err(|e| ToolError::internal(e.to_string()))?;
        // A helper that died early shows up as a missing report.
        let _ = started.stdin.write_all(&framed).await;
        Ok(started)
    }
}

impl Started {
    /// Hands a started sandbox its one call: the helper starts the call's deadline now.
    pub(crate) async fn send_call(&mut self, call: &Call) -> Result<(), ToolError> {
        let framed = frame(call).map_err(|e| ToolError::internal(e.to_string()))?;
        // A helper that died early shows up as a missing report.
        let _ = self.stdin.write_all(&framed).await;
        let _ = self.stdin.flush().await;
        Ok(())
    }
}
