//! Session mode for command executors: one long-lived shell per session, driven over its
//! stdin, stdout and stderr. The driver knows nothing of containers or namespaces: an executor
//! gives it a [`Launcher`] (how to start a shell in a fresh sandbox) and the driver does the
//! rest — framing each command, reading its output up to its end, the deadline, resets,
//! the answer the model reads.
//!
//! # The session contract
//!
//! - **One shell per session.** A session is one `warden call`, one `warden run` batch, one
//!   MCP connection (or streamable-HTTP session), one agent run, one `Dispatcher` session.
//!   Its first command starts the shell; the session's end kills it with everything it
//!   started, and leaves nothing behind.
//! - **What persists** from one command to the next: the working directory, variables and
//!   functions, shell options, files in `/tmp` (and anywhere else the sandbox may write), and
//!   background jobs (`cmd &`), which keep running between commands.
//! - **Each command** reads `/dev/null` on its stdin (never the commands that follow). The
//!   `timeout` it asks for starts when it gets the shell, not while it waits; the policy's is
//!   the call's, from the dispatcher's deadline, and counts the wait too.
//! - **Concurrency.** Commands of one session that overlap run at once, each its own process
//!   in the same sandbox: a command that comes while the session's shell runs another one
//!   runs in a shell of its own started beside it ([`Siblings`]: the same container; the same
//!   namespaces, mounts, Landlock, seccomp, user and rlimits). It starts from the session's
//!   state as the last command that ended in the session's shell left it (working directory,
//!   exported variables, shell options), and its own `cd` and `export` are not carried back;
//!   its files and background jobs stay in the sandbox. Commands that do not overlap run in
//!   the session's shell, one after another, and keep its `cd` and variables. Each command
//!   has its own deadline, output limit and usage: a command beside the session's counts the
//!   CPU of its own processes (its shell and what it waited for) and no memory peak; one in
//!   the session's shell counts what the executor's counters read while it ran, as before
//!   (a container's cover the commands beside it too, which are then counted in both). A timeout
//!   of a command beside the session's kills that command's shell and processes only. Where
//!   the session sees its read-write roots through a view ([`Launched::view`], settled
//!   command by command), a command beside its shell sees them through a view of its own
//!   ([`Siblings::viewed`]): its own transaction, settled as it ends, whose background jobs
//!   end with it. Where the executor starts no shell beside the session's — a sandbox with
//!   an egress gate (which serves one command at a time), a docker session whose view
//!   another shell cannot join (its roots copied in, warden not root, a container that is
//!   not runc's plain one), gVisor, an engine elsewhere — overlapping commands wait their
//!   turn and run in the order they arrived. Sessions never wait for each other.
//! - **A timeout** ends the command, not the session, where the executor can stop a command's
//!   processes ([`Sandbox::stop_command`]: host shells, and Docker's runc containers on this
//!   machine): the processes the shell started for it are killed, and the working directory,
//!   variables, files and earlier background jobs stay; the answer is a `timeout` with the
//!   output so far and says so. Where it cannot — a loop of the shell's own builtins, a loop
//!   that restarts what it loses, gVisor, an engine elsewhere — the timeout takes the shell
//!   down: the sandbox is killed with everything in it, the answer says so, and the next
//!   command starts a fresh shell.
//! - **The shell's end** (`exit`, `exec`, a failing command under `set -e`, the memory limit
//!   killing the shell itself) ends the session the same way: the answer says so, the next
//!   command starts a fresh shell. A memory kill of a command's own process is an
//!   `out_of_memory` answer and the shell lives on.
//! - **Out of processes.** When the sandbox holds (nearly) as many processes as its limit
//!   allows — a fork bomb, or background jobs that fill it — the session is reset rather than
//!   left to fail: found before a command, the sandbox is replaced and the command runs in the
//!   fresh one; found after a command, the sandbox is replaced at once; found twice in a row
//!   while a command runs (counted from outside every 2 s), the command is stopped with
//!   `limit_exceeded`. Each time, the answer says that the session was reset.
//! - **Output of background jobs** written while a command runs is part of that command's
//!   output, interleaved with its own. Output written between commands — after one command's
//!   end and before the next one's start — is not shown: the next command's answer says how
//!   much there was. A background job whose output matters writes to a file
//!   (`cmd >/tmp/log 2>&1 &`).
//! - **Streaming.** A call that hands the invocation an [`warden_core::OutputSink`] gets the
//!   command's output there as the shell prints it: what its answer will carry, never the
//!   framing (a line's end waits for what follows it, as it could begin a marker).
//! - **`restart: true`** kills the shell: the next command (or the same call's) starts fresh.
//! - **A sandbox's end** inside a call (a reset, `restart`) is told in that call's answer when
//!   the executor has something to say of it ([`Sandbox::close_noting`]: a Docker session's
//!   copied files written back, or why not). A shell lost with no answer to say so (its call
//!   cancelled mid-command, a failure before the answer) is told by the answer of the command
//!   that runs in the fresh one.
//! - **The protocol never shows.** Each command is framed by lines that carry a nonce made
//!   for it alone, printed by shell builtins (so framing needs no fork) on copies of the
//!   shell's stdout and stderr that the command does not hold; only an exact line with the
//!   current nonce counts. Output imitating a marker is output like any other: it cannot end
//!   a command early or move output to another command. Traces (`set -x`) and echoes
//!   (`set -v`) show the command's own lines only.
//!
//! The shell is any POSIX shell (`sh`, `dash`, `bash`, busybox `ash`) reading commands on its
//! stdin. The framing uses the builtins `command`, `eval`, `printf`, `read`, `[`, `set` and
//! `unset`, and `/proc/self/stat` to tell the shell from its subshells: a command that
//! redefines those builtins as functions or aliases breaks the framing, and runs into its
//! deadline (which resets the session).

mod beside;
mod courier;
mod fifo;
mod frames;
mod pipe;
mod script;
mod shell;
mod stop;
mod told;

pub use beside::{NoSiblings, Sibling, Siblings};
pub use frames::Frames;
pub use script::nonce;
pub use stop::{Children, cpu_ms, kill_tree};

use beside::Beside;

use script::Check;
use shell::{Live, Ran};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::time::Instant;
use told::{out_of_date_before, out_of_processes_before, restarted, state};
use warden_core::{Invocation, Limits, Output, SessionId, ToolError};

use crate::{Cause, CommandCall, timed_out};

/// A piece of a shell's output, from one of its two streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// A shell's stdin.
pub type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// A shell's stdout and stderr, as chunks in the order they were read; it ends when the
/// shell's output closes.
pub type Chunks = Pin<Box<dyn futures::Stream<Item = io::Result<Chunk>> + Send>>;

/// Two pipes (a child's stdout and stderr) as one [`Chunks`].
pub fn chunks<O, E>(stdout: O, stderr: E) -> Chunks
where
    O: AsyncRead + Send + 'static,
    E: AsyncRead + Send + 'static,
{
    fn read<R: AsyncRead + Send + 'static>(
        reader: R,
        wrap: fn(Vec<u8>) -> Chunk,
    ) -> impl futures::Stream<Item = io::Result<Chunk>> + Send {
        // One buffer a stream, as large as a pipe holds, each chunk copied out at its size.
        let state = Some((Box::pin(reader), vec![0; 64 << 10]));
        futures::stream::unfold(state, move |state| async move {
            let (mut reader, mut buf) = state?;
            match reader.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    let chunk = wrap(buf[..n].to_vec());
                    Some((Ok(chunk), Some((reader, buf))))
                }
                Err(e) => Some((Err(e), None)),
            }
        })
    }
    Box::pin(futures::stream::select(
        read(stdout, Chunk::Stdout),
        read(stderr, Chunk::Stderr),
    ))
}

/// A shell just started in a fresh sandbox.
pub struct Launched<S> {
    pub sandbox: S,
    pub input: Input,
    pub output: Chunks,
    /// The session's view of its read-write roots, where its writes are transactions: each
    /// command's changes are committed as it ends, or put back
    /// (`warden_tx::settle::settle_command`). None: they write in place.
    pub view: Option<warden_tx::SessionView>,
}

/// The process limit of a shell's sandbox, and where the shell reads how it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processes {
    pub limit: u64,
    /// Directories inside the sandbox where its pids cgroup shows (`pids.current`,
    /// `pids.events`), the first readable one used. None readable: the sandbox is only
    /// counted from outside, while a command runs. None given (a sandbox without a cgroup of
    /// its own): it is counted from outside ([`Sandbox::processes`]) before and after each
    /// command too.
    pub cgroups: Vec<String>,
}

impl Processes {
    /// From this many on the sandbox counts as out of processes: a command needs a few.
    fn full_at(&self) -> u64 {
        self.limit.saturating_sub((self.limit / 8).max(2)).max(1)
    }
}

/// A sandbox's counters at one moment, as [`Sandbox::counters`] reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// CPU used in the sandbox so far, in milliseconds: a running total.
    pub cpu_ms: Option<f64>,
    /// The high-water mark of its memory since the previous reading, when the sandbox can
    /// start a new one at each reading; `None` when it cannot, rather than a figure that
    /// covers more than that.
    pub peak_memory_bytes: Option<u64>,
}

impl Counters {
    /// What a command used, from the reading just before it (`self`) to the one after it:
    /// the CPU between the two, and the peak since the first.
    pub fn used_until(&self, after: &Counters) -> warden_core::Usage {
        warden_core::Usage {
            cpu_ms: after.cpu_ms.zip(self.cpu_ms).map(|(a, b)| (a - b).max(0.0)),
            peak_memory_bytes: after.peak_memory_bytes,
            ..warden_core::Usage::default()
        }
    }
}

/// How an executor starts a session's shell.
pub trait Launcher: Send + Sync + 'static {
    type Sandbox: Sandbox;

    /// What a reset gives, for messages: "a fresh shell in a new container".
    const FRESH: &'static str;

    /// The limit on processes each sandbox has, if any.
    fn processes(&self) -> Option<Processes>;

    /// Starts a shell reading commands on its stdin, in a fresh sandbox with `env` and held
    /// to `limits`; `image`, when the session's client chose one, is what a launcher that
    /// runs images runs (checked by its executor's `check_image`).
    fn launch(
        &self,
        env: &[(String, String)],
        limits: &Limits,
        image: Option<&str>,
    ) -> impl Future<Output = Result<Launched<Self::Sandbox>, ToolError>> + Send;
}

/// What holds one shell: a container, a set of namespaces. Dropped without [`Sandbox::close`]
/// (a call's future dropped mid-command), it must still be released, in the background.
pub trait Sandbox: Send + 'static {
    /// What starts shells beside this one's, for commands that overlap ([`NoSiblings`]:
    /// none, they take turns).
    type Siblings: Siblings;

    /// What starts shells beside this one's in this sandbox, if it can. None by default.
    fn siblings(&self) -> Option<Self::Siblings> {
        None
    }

    /// The shell's process as this machine sees it, where warden may take its descriptors
    /// ([`Sessions::shell_fifo`]). None by default.
    fn shell_pid(&self) -> Option<i32> {
        None
    }

    /// After the shell's output closed: its exit status, and what ended it.
    fn exit_status(&mut self) -> impl Future<Output = Result<(i64, Cause), ToolError>> + Send;

    /// The limit that ended a command of the shell's that ended with `status` having used
    /// `used`, when the sandbox's records show one did (say, the CPU time it measured): the
    /// sentence for the model. None by default.
    fn limit_ended(&mut self, status: i64, used: &warden_core::Usage) -> Option<String> {
        let _ = (status, used);
        None
    }

    /// Whether the memory limit killed a process since this was last asked.
    fn memory_killed(&mut self) -> impl Future<Output = bool> + Send;

    /// How many processes it holds, counted from outside; `None` when unknown.
    fn processes(&mut self) -> impl Future<Output = Option<u64>> + Send;

    /// Kills everything in it and releases it; returns once it is gone.
    fn close(self) -> impl Future<Output = ()> + Send;

    /// [`Sandbox::close`], answering what the answer of the call that closed it should say
    /// about its end, one note each: say, that its copied files were written back, or why
    /// not. Nothing by default.
    fn close_noting(self) -> impl Future<Output = Vec<String>> + Send
    where
        Self: Sized,
    {
        async move {
            self.close().await;
            Vec::new()
        }
    }

    /// Settles what the command `call` changed in the read-write roots the sandbox holds
    /// copies of (a container on an engine elsewhere), once it ended with `answered` and its
    /// shell lives on: committed (its changes within `limit` bytes), or discarded when warden
    /// ended it. Answers the command's answer, and false when the sandbox must start afresh:
    /// its copies hold what the roots do not. Nothing to settle by default.
    fn settle(
        &mut self,
        call: &str,
        limit: u64,
        answered: Result<Output, ToolError>,
    ) -> impl Future<Output = (Result<Output, ToolError>, bool)> + Send {
        let _ = (call, limit);
        async move { (answered, true) }
    }

    /// Whether the sandbox's copies of the roots (a container on an engine elsewhere) still
    /// hold what the roots do, before a command: false when the roots changed since its last
    /// command settled (another call, an undo, a person), and the command needs a fresh
    /// sandbox. True by default.
    fn current(&mut self) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// A command starts: the sandbox's network (its gate, if it has one) works for it until
    /// [`Sandbox::command_ended`], and refuses into `scope`'s denials; and the shell's
    /// processes as they are now are what [`Sandbox::stop_command`] leaves alone.
    fn command_starts(&mut self, scope: warden_net::Scope) {
        let _ = scope;
    }

    /// The command is past its deadline: stops the processes it started and keeps the shell
    /// ([`Children::kill_new`] of what [`Sandbox::command_starts`] saw), where the executor
    /// can. False when it cannot, or the command started none: the shell then goes with it.
    fn stop_command(&mut self) -> bool {
        false
    }

    /// The command ended: its connections are closed, and none are let through until the
    /// next command starts. Answers what went through them, if the sandbox has a gate.
    fn command_ended(&mut self) -> Option<warden_net::Traffic> {
        None
    }

    /// Its counters now, and a new high-water mark of its memory from here (where the
    /// sandbox can start one). Read just before each command and right after it: the
    /// difference is what the command used. Nothing by default.
    fn counters(&mut self) -> Counters {
        Counters::default()
    }

    /// What every answer of a command run in it carries besides its output, in the answer's
    /// details (a success's artifact, an error's details): say, `isolation`, the protections
    /// that were in force. None by default.
    fn details(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

/// A session's shell, or none until its first command (or after a reset), and what a
/// command that overlaps the one it runs starts from.
type Slot<S> = Arc<SlotOf<S>>;

/// What [`Slot`] holds.
struct SlotOf<S: Sandbox> {
    held: tokio::sync::Mutex<Held<S>>,
    /// Set while the shell lives, when its sandbox can start shells beside it.
    beside: tokio::sync::watch::Sender<Option<Beside<S::Siblings>>>,
    /// Shells beside it that carry a client's transfers ([`pipe`]).
    spares: Mutex<pipe::SparesOf<S>>,
    /// None can run in its sandbox: its transfers go through its shell.
    unsuited: std::sync::atomic::AtomicBool,
}

impl<S: Sandbox> Default for SlotOf<S> {
    fn default() -> Self {
        SlotOf {
            held: tokio::sync::Mutex::default(),
            beside: tokio::sync::watch::Sender::new(None),
            spares: Mutex::default(),
            unsuited: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Where a command runs.
enum Turn<'a, S: Sandbox> {
    /// In the session's shell.
    Shell(tokio::sync::MutexGuard<'a, Held<S>>),
    /// Beside it, the session's shell being busy.
    Beside(Beside<S::Siblings>),
}

/// What a session holds between its commands.
struct Held<S> {
    live: Option<Live<S>>,
    /// Its shell was taken out for a command whose answer never said what became of it (the
    /// call was cancelled, or failed before it could say): the next shell's answer says that
    /// the session starts afresh.
    lost_untold: bool,
}

impl<S> Default for Held<S> {
    fn default() -> Self {
        Held {
            live: None,
            lost_untold: false,
        }
    }
}

/// The sessions of one tool, each with its shell.
pub struct Sessions<L: Launcher> {
    launcher: L,
    slots: Mutex<HashMap<SessionId, Slot<L::Sandbox>>>,
}

impl<L: Launcher> Sessions<L> {
    pub fn new(launcher: L) -> Self {
        Sessions {
            launcher,
            slots: Mutex::default(),
        }
    }

    /// Runs `call`, of invocation `inv`, in its session: `restart` first if asked, then
    /// `command` if given, stopped at its deadline; the sandbox's refusals and usage go to
    /// the invocation's.
    pub async fn run(&self, inv: &Invocation, call: &CommandCall) -> Result<Output, ToolError> {
        let CommandCall { request, env, time } = call;
        let slot = self.slot(inv.session);
        let command = request.values.get("command").filter(|_| !request.restart);
        let mut guard = match Self::turn(&slot, command.is_some()).await {
            Turn::Shell(guard) => guard,
            Turn::Beside(beside) => {
                let command = command.map_or("", String::as_str);
                return self.beside(beside, inv, call, command).await;
            }
        };
        let deadline = time.stop_at();
        let mut notes: Vec<String> = Vec::new();
        if request.restart
            && let Some(old) = guard.live.take()
        {
            slot.beside.send_replace(None);
            notes.extend(old.sandbox.close_noting().await);
        }
        let Some(command) = request.values.get("command") else {
            return Ok(restarted(&notes));
        };
        let start = Start {
            env,
            limits: &inv.limits,
            image: inv.image.as_deref(),
            deadline,
            limit: time.named,
            counting: Counting::of(self.launcher.processes()),
        };
        // Taken out while the command runs: if this call's future is dropped, the shell is
        // dropped with it and its sandbox released, rather than kept mid-command.
        let (live, launched) = match guard.live.take() {
            Some(live) => (live, false),
            None => {
                if std::mem::take(&mut guard.lost_untold) {
                    notes.push(format!(
                        "this session's shell was lost after its last answer (a call \
                         cancelled while its command ran, or a sandbox that failed): this \
                         command ran in {}; the working directory, variables, background jobs \
                         and files outside the granted folders of before are gone",
                        L::FRESH
                    ));
                }
                (self.launch(&start).await?, true)
            }
        };
        // Until this command's answer says what became of the shell.
        guard.lost_untold = true;
        if launched {
            Self::offer(&slot, &live);
        }
        let ran = self
            .run_in(live, launched, command, inv, &start, &mut notes)
            .await;
        let (ran, used, mut live) = ran.inspect_err(|_| {
            slot.beside.send_replace(None);
        })?;
        if let Some(traffic) = live.sandbox.command_ended() {
            traffic.count_in(&inv.usage);
        }
        // Taken before the sandbox may be closed below: they describe the one that ran it.
        let details = live.sandbox.details();
        // Kept apart while the answer is told: a shell that ended has its changes committed
        // all the same.
        let view = live.view.take();
        let told = self.told(ran, live, &used, &start, notes).await;
        let (answered, kept) = told.inspect_err(|_| {
            slot.beside.send_replace(None);
        })?;
        let (answered, kept) = settled(view, inv, answered, kept).await;
        match &kept {
            Some(live) => Self::offer(&slot, live),
            None => {
                slot.beside.send_replace(None);
            }
        }
        guard.live = kept;
        // Every answer says whether the shell lives on or what the next one is.
        guard.lost_untold = false;
        match answered {
            Ok(mut output) => {
                output.details.extend(details);
                Ok(output)
            }
            Err(e) => Err(details
                .into_iter()
                .fold(e, |e, (key, value)| e.with_detail(&key, value))),
        }
    }

    /// Where a call runs: in the session's shell when it is free, else (with a `command`)
    /// beside it once the sandbox can start a shell there; else it waits for the shell, its
    /// turn in the order of arrival (tokio's mutex is fair).
    async fn turn(slot: &SlotOf<L::Sandbox>, command: bool) -> Turn<'_, L::Sandbox> {
        if !command {
            return Turn::Shell(slot.held.lock().await);
        }
        let mut offered = slot.beside.subscribe();
        loop {
            if let Ok(guard) = slot.held.try_lock() {
                return Turn::Shell(guard);
            }
            if let Some(beside) = offered.borrow_and_update().clone() {
                return Turn::Beside(beside);
            }
            tokio::select! {
                guard = slot.held.lock() => return Turn::Shell(guard),
                // The sender lives as long as the slot.
                _ = offered.changed() => {}
            }
        }
    }

    /// Lets commands that overlap the next one run beside the shell of `live`, from the
    /// state it is in now.
    fn offer(slot: &SlotOf<L::Sandbox>, live: &Live<L::Sandbox>) {
        let Some(siblings) = live.sandbox.siblings() else {
            return;
        };
        slot.beside.send_replace(Some(Beside {
            siblings: Arc::new(siblings),
            sandbox: live.id,
            state: live.state.clone(),
            options: live.options().to_owned(),
            details: live.sandbox.details(),
        }));
    }

    /// Runs `command` in `live` (`launched` for this call), after replacing a sandbox found
    /// out of processes; once more in a fresh one when the shell finds it so before running.
    async fn run_in(
        &self,
        mut live: Live<L::Sandbox>,
        launched: bool,
        command: &str,
        inv: &Invocation,
        start: &Start<'_>,
        notes: &mut Vec<String>,
    ) -> Result<(Ran, warden_core::Usage, Live<L::Sandbox>), ToolError> {
        let counting = &start.counting;
        let mut fresh = false;
        if let (true, false, Some(c)) = (counting.outside, launched, &counting.check)
            && let Some(n) = live.sandbox.processes().await
            && n >= c.full_at
        {
            let ended = live.sandbox.close_noting().await;
            notes.push(out_of_processes_before(
                &state(Some(n), 0, counting.limit),
                L::FRESH,
            ));
            notes.extend(ended);
            live = self.launch(start).await?;
            fresh = true;
        }
        if !launched && !live.sandbox.current().await {
            let ended = live.sandbox.close_noting().await;
            notes.push(out_of_date_before(L::FRESH));
            notes.extend(ended);
            live = self.launch(start).await?;
            fresh = true;
        }
        loop {
            if let Some(view) = live.view.as_mut() {
                view.begin().map_err(|e| {
                    ToolError::internal(format!("the session's view of its roots: {e}"))
                })?;
            }
            live.sandbox.command_starts(warden_net::Scope {
                denials: inv.denials.clone(),
                deadline: start.deadline.into_std(),
            });
            let before = live.sandbox.counters();
            let ran = live
                .run(
                    command,
                    start.limits.output,
                    start.deadline,
                    counting.check.as_ref(),
                    inv.output.as_ref(),
                )
                .await;
            // Read while the sandbox still stands: a timeout closes it below.
            let used = before.used_until(&live.sandbox.counters());
            inv.usage.record(|u| {
                u.cpu_ms = used.cpu_ms;
                u.peak_memory_bytes = used.peak_memory_bytes;
            });
            match ran {
                // Out of processes before it ran: once, in a fresh sandbox.
                Ran::NotRun { processes, refused } if !fresh => {
                    let ended = live.sandbox.close_noting().await;
                    let state = state(processes, refused, counting.limit);
                    notes.push(out_of_processes_before(&state, L::FRESH));
                    notes.extend(ended);
                    live = self.launch(start).await?;
                    fresh = true;
                }
                ran => return Ok((ran, used, live)),
            }
        }
    }

    /// Starts a shell for a session, by its deadline.
    async fn launch(&self, start: &Start<'_>) -> Result<Live<L::Sandbox>, ToolError> {
        let launching = self.launcher.launch(start.env, start.limits, start.image);
        match tokio::time::timeout_at(start.deadline, launching).await {
            Ok(launched) => {
                let l = launched?;
                let mut live = Live::new(l.sandbox, l.input, l.output);
                live.view = l.view;
                Ok(live)
            }
            Err(_) => Err(timed_out(start.limit, "", "", "the shell did not start")),
        }
    }

    fn slot(&self, id: SessionId) -> Slot<L::Sandbox> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.entry(id).or_default().clone()
    }

    /// warden's writing end of the FIFO that the shell of session `id` holds on its
    /// descriptor `fd` (a client's command made it there), taken from the shell's process
    /// ([`fifo::writer`]) while the shell is between commands. None when the session has no
    /// shell, or its sandbox does not show the shell's process here; an error when warden may
    /// not take it, or it is no FIFO.
    pub async fn shell_fifo(&self, id: SessionId, fd: i32) -> Option<io::Result<OwnedFd>> {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .cloned()?;
        let held = slot.held.lock().await;
        let pid = held.live.as_ref()?.sandbox.shell_pid()?;
        Some(fifo::writer(pid, fd))
    }

    /// Ends session `id`: its shell and sandbox are gone when this returns.
    pub async fn end(&self, id: SessionId) {
        let slot = {
            let mut slots = self
                .slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slots.remove(&id)
        };
        if let Some(slot) = slot {
            slot.beside.send_replace(None);
            pipe::end_spares(&slot).await;
            if let Some(live) = slot.held.lock().await.live.take() {
                live.sandbox.close().await;
            }
        }
    }
}

/// `answered`, once the command's changes in `view` are settled; the shell kept with its
/// view, unless the view could not be settled (the shell is then closed: the session starts
/// afresh).
async fn settled<S: Sandbox>(
    view: Option<warden_tx::SessionView>,
    inv: &Invocation,
    answered: Result<Output, ToolError>,
    kept: Option<Live<S>>,
) -> (Result<Output, ToolError>, Option<Live<S>>) {
    let (call, limit) = (&inv.call_id, inv.limits.changes);
    let Some(mut view) = view else {
        let Some(mut live) = kept else {
            return (answered, None);
        };
        return match live.sandbox.settle(call, limit, answered).await {
            (answered, true) => (answered, Some(live)),
            (answered, false) => {
                live.sandbox.close().await;
                (answered, None)
            }
        };
    };
    let live = kept.is_some();
    let (answered, settled) =
        warden_tx::settle::settle_command(&mut view, live, call, limit, answered);
    match kept {
        Some(mut live) if settled => {
            live.view = Some(view);
            (answered, Some(live))
        }
        Some(live) => {
            live.sandbox.close().await;
            (answered, None)
        }
        None => (answered, None),
    }
}

/// What one command of a session starts from: the shell's environment and limits, its
/// deadline and the timeout an answer names, and how its sandbox's processes are counted.
struct Start<'a> {
    env: &'a [(String, String)],
    limits: &'a Limits,
    image: Option<&'a str>,
    deadline: Instant,
    limit: Duration,
    counting: Counting,
}

/// How a session's sandbox is watched for running out of processes.
struct Counting {
    /// What the shell checks before and after each command, when there is a limit.
    check: Option<Check>,
    /// The limit (0: none).
    limit: u64,
    /// Counted from outside (no cgroup the shell can read), before and after each command.
    outside: bool,
}

impl Counting {
    fn of(processes: Option<Processes>) -> Self {
        Counting {
            check: processes.as_ref().map(|p| Check {
                dirs: p.cgroups.clone(),
                full_at: p.full_at(),
                refused: None,
            }),
            limit: processes.as_ref().map_or(0, |p| p.limit),
            outside: processes.as_ref().is_some_and(|p| p.cgroups.is_empty()),
        }
    }
}
