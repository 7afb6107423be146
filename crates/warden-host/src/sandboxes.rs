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
use crate::layout::viewed;
use crate::plan::{Call, Join, Root, Sandbox, Stdin, ViewLayer, frame};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use warden_command::spares::{Spare, Spares, Taken};
use warden_core::{ToolError, WindowSize};
use warden_tx::{Store, View};

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
    /// A command at a terminal: the terminal's side where its input goes, and whose size
    /// warden sets ([`resize`]).
    pub terminal: Option<pipe::Sender>,
    /// A call's view of its writable roots, discarded unless committed.
    pub view: Option<View>,
    /// Where the sandbox sees each root of `view`, in its order.
    pub guests: Vec<PathBuf>,
}

/// Sets the size of the terminal whose warden side is `terminal`; the kernel tells the
/// program's foreground process group (`SIGWINCH`).
pub(crate) fn resize(terminal: &impl AsRawFd, size: WindowSize) {
    let size = winsize(size);
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
    unsafe {
        nix::libc::ioctl(terminal.as_raw_fd(), nix::libc::TIOCSWINSZ, &raw const size);
    }
}

fn winsize(size: WindowSize) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A new pseudo-terminal of `size`, both sides closed on exec.
fn open_terminal(size: WindowSize) -> Result<nix::pty::OpenptyResult, ToolError> {
    let pty = nix::pty::openpty(&winsize(size), None)
        .map_err(|e| ToolError::internal(format!("a pseudo-terminal for the program: {e}")))?;
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|e| ToolError::internal(format!("the terminal: {e}")))?;
    }
    Ok(pty)
}

/// Makes warden's side of a helper's stream non-blocking, as tokio requires of what it
/// polls. A blocking one hangs: tokio keeps a stream readable when a wake-up comes in while
/// it reads, and its next read, finding nothing, would block the runtime's thread until the
/// program writes again, while the program waits for the input that thread should relay.
fn nonblocking(fd: &OwnedFd) -> Result<(), ToolError> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(fd, FcntlArg::F_GETFL)
        .and_then(|flags| {
            let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
            fcntl(fd, FcntlArg::F_SETFL(flags))
        })
        .map(drop)
        .map_err(|e| ToolError::internal(format!("a stream of the sandbox's helper: {e}")))
}

impl Spare for Started {
    /// One that failed its set-up (or was killed) is not: the call starts one now, whose
    /// report says what went wrong.
    fn alive(&self) -> bool {
        self.helper.running()
    }
}

/// What starts one tool's sandboxes: the sandbox part of its plans, the fork server, the
/// sandboxes prepared ahead.
pub(crate) struct Sandboxes {
    forker: Arc<Forker>,
    /// The sandbox part of every plan of this tool, made once at load.
    sandbox: Sandbox,
    prepared: Spares<Started>,
    /// Where each call's view of its writable roots is made; `None`: roots are written in
    /// place.
    views: Option<Arc<Store>>,
}

impl Sandboxes {
    /// Starts `sandbox`es through `forker`, keeping `prepared` of them ready ahead; a call's
    /// writable roots are seen through a view made in `views`.
    pub(crate) fn new(
        forker: Arc<Forker>,
        sandbox: Sandbox,
        prepared: usize,
        views: Option<Arc<Store>>,
    ) -> Self {
        Self {
            forker,
            sandbox,
            prepared: Spares::new(prepared),
            views,
        }
    }

    /// Whether its sandboxes see their writable roots through views (else they write them in
    /// place).
    pub(crate) fn viewed(&self) -> bool {
        self.views.is_some()
    }

    /// A sandbox for one call: a prepared one when ready, else one started now; either way the
    /// tool's prepared sandboxes are made up again in the background.
    pub(crate) async fn for_call(self: &Arc<Self>) -> Result<Started, ToolError> {
        let Taken { spare, make, .. } = self.prepared.take();
        for _ in 0..make {
            let sandboxes = self.clone();
            tokio::spawn(async move {
                let started = sandboxes.start_at(Stdin::Nothing, None, None).await;
                if let Err(e) = &started {
                    tracing::debug!("preparing a host sandbox: {}", e.message);
                }
                sandboxes.prepared.made(started.ok());
            });
        }
        match spare {
            Some(sandbox) => Ok(sandbox),
            None => self.start_at(Stdin::Nothing, None, None).await,
        }
    }

    /// A sandbox for a session's shell, its writable roots seen through a view that lives
    /// as long as the shell (see `warden_tx::SessionView`), with a stash for views of shells
    /// beside it where [`Sandboxes::stashes`].
    pub(crate) async fn for_session(&self) -> Result<Started, ToolError> {
        let stash = self
            .stashes()
            .then(|| self.views.as_ref().map(|s| s.views()))
            .flatten();
        self.start_at(Stdin::Helper, None, stash).await
    }

    /// Whether a session's sandbox keeps a stash ([`crate::layout::STASH`]) from which shells
    /// beside its own make views of their own: its writable roots are seen through views.
    pub(crate) fn stashes(&self) -> bool {
        self.views.is_some() && self.sandbox.roots.iter().any(viewed)
    }

    /// A sandbox for a program of `warden exec`, at a terminal of `size` when given, its
    /// writable roots seen through a view as a call's are.
    pub(crate) async fn for_program(&self, size: Option<WindowSize>) -> Result<Started, ToolError> {
        let input = match size {
            Some(_) => Stdin::Terminal,
            None => Stdin::Helper,
        };
        self.start_at(input, size, None).await
    }

    /// A view of the session's viewed roots for a shell beside its own, with its layers
    /// relative to the store's views folder (which the session's stash holds).
    pub(crate) fn view_beside(&self) -> Result<(View, Vec<ViewLayer>), ToolError> {
        let failed = |e: String| ToolError::internal(format!("a view for a shell beside: {e}"));
        let store = self
            .views
            .as_ref()
            .ok_or_else(|| failed("no store".into()))?;
        let roots = self.sandbox.roots.iter().filter(|r| viewed(r));
        let hosts: Vec<PathBuf> = roots.map(|r| r.host.clone()).collect();
        let view = store.view(&hosts).map_err(|e| failed(e.to_string()))?;
        let views = store.views();
        let relative = |path: PathBuf| {
            path.strip_prefix(&views)
                .map(PathBuf::from)
                .map_err(|_| failed(format!("{} is not in {}", path.display(), views.display())))
        };
        let layers = (0..hosts.len())
            .map(|n| {
                let layer = view.layer(n);
                Ok(ViewLayer {
                    upper: relative(layer.upper)?,
                    work: relative(layer.work)?,
                })
            })
            .collect::<Result<_, ToolError>>()?;
        Ok((view, layers))
    }

    /// A helper that joins the live sandbox of `join` (a session's) instead of making one,
    /// and runs its call there reading the helper's stdin: a shell beside the session's.
    pub(crate) async fn join(&self, join: Join) -> Result<Started, ToolError> {
        // A view's folders are in the store's views folder.
        let stash = join
            .view
            .as_ref()
            .and(self.views.as_ref())
            .map(|store| store.views());
        let sandbox = Sandbox {
            stdin: Stdin::Helper,
            gate: false,
            join: Some(join),
            stash,
            ..self.sandbox.clone()
        };
        self.start_with(sandbox, None, None).await
    }

    /// Forks a helper and hands it the sandbox part of the plan, its writable roots seen
    /// through a view where there is a store; its stdin stays open, for the call part
    /// ([`Started::send_call`]) and what the command reads from it ([`Stdin::Helper`]: a
    /// session's commands, a program's input). A command at a terminal ([`Stdin::Terminal`])
    /// gets a new pseudo-terminal of `size` as its stdin, stdout and stderr, whose other side
    /// is [`Started::terminal`] and [`Started::stdout`].
    async fn start_at(
        &self,
        input: Stdin,
        size: Option<WindowSize>,
        stash: Option<PathBuf>,
    ) -> Result<Started, ToolError> {
        let mut sandbox = Sandbox {
            stdin: input,
            stash,
            ..self.sandbox.clone()
        };
        let view = match &self.views {
            Some(store) => view_of(store, &mut sandbox.roots)?,
            None => None,
        };
        self.start_with(sandbox, size, view).await
    }

    async fn start_with(
        &self,
        sandbox: Sandbox,
        size: Option<WindowSize>,
        view: Option<(View, Vec<PathBuf>)>,
    ) -> Result<Started, ToolError> {
        let (view, guests) = view.unzip();
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| ToolError::internal(format!("a pipe for the sandbox's helper: {e}")))
        };
        let (stdin, stdin_ours) = pipe()?;
        let ((stdout_ours, stdout), (stderr_ours, stderr), terminal) = match size {
            None => (pipe()?, pipe()?, None),
            // The terminal is the command's stdout and stderr; warden reads it on stdout's
            // side, and nothing comes on stderr's (a pipe whose writer is gone).
            Some(size) => {
                let pty = open_terminal(size)?;
                let ours = |e: std::io::Error| ToolError::internal(format!("the terminal: {e}"));
                let reader = pty.master.try_clone().map_err(ours)?;
                let slave2 = pty.slave.try_clone().map_err(ours)?;
                let (nothing, _) = pipe()?;
                ((reader, pty.slave), (nothing, slave2), Some(pty.master))
            }
        };
        // Made unchecked below (a terminal's side is no pipe), which keeps their blocking mode.
        nonblocking(&stdout_ours)?;
        if let Some(master) = &terminal {
            nonblocking(master)?;
        }
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
            // A terminal's side is no pipe, but reads and polls like one.
            stdout: pipe::Receiver::from_owned_fd_unchecked(stdout_ours).map_err(ours)?,
            stderr: pipe::Receiver::from_owned_fd(stderr_ours).map_err(ours)?,
            reports: pipe::Receiver::from_owned_fd(reports_ours).map_err(ours)?,
            gate,
            terminal: terminal
                .map(pipe::Sender::from_owned_fd_unchecked)
                .transpose()
                .map_err(ours)?,
            view,
            guests: guests.unwrap_or_default(),
        };
        let framed = frame(&sandbox).map_err(|e| ToolError::internal(e.to_string()))?;
        // A helper that died early shows up as a missing report.
        let _ = started.stdin.write_all(&framed).await;
        Ok(started)
    }
}

/// A view of the writable roots the sandbox mounts (those in a system folder are seen as they
/// are), each root's layer set in `roots`, with where the sandbox sees each; `None` when there
/// are none.
fn view_of(
    store: &Arc<Store>,
    roots: &mut [Root],
) -> Result<Option<(View, Vec<PathBuf>)>, ToolError> {
    let viewed: Vec<usize> = (0..roots.len()).filter(|&i| viewed(&roots[i])).collect();
    if viewed.is_empty() {
        return Ok(None);
    }
    let hosts: Vec<PathBuf> = viewed.iter().map(|&i| roots[i].host.clone()).collect();
    let view = store
        .view(&hosts)
        .map_err(|e| ToolError::internal(format!("a view of the call's roots: {e}")))?;
    for (n, &i) in viewed.iter().enumerate() {
        let layer = view.layer(n);
        roots[i].view = Some(ViewLayer {
            upper: layer.upper,
            work: layer.work,
        });
    }
    let guests = viewed.iter().map(|&i| roots[i].guest.clone()).collect();
    Ok(Some((view, guests)))
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
