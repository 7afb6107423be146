//! The seam between the dispatcher and the sandboxes.

use crate::changes::HeldChanges;
use crate::grants::CallerEnv;
use crate::limits::Limits;
use crate::message::{ErrorKind, ToolError};
use crate::output::OutputSink;
use crate::pipe::{Pipe, Piping};
use crate::program::{Finished, Program};
use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A boxed, sendable future, so `Executor` can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What [`Executor::shell_fifo`] answers: warden's writing end of a FIFO a session's shell
/// holds, an error when it could not be taken, or None where it cannot be.
pub type ShellFifo<'a> = BoxFuture<'a, Option<std::io::Result<std::os::fd::OwnedFd>>>;

/// One checked call handed to an executor.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// warden's own id of the call, the one its answer carries (`details.call_id`): what an
    /// executor names the call's changes by (a transaction's record, see `warden_tx`).
    pub call_id: String,
    /// The parsed arguments object (the executor checks it against its schema).
    pub arguments: Value,
    /// The limits in force for this call.
    pub limits: Limits,
    /// The call's one deadline, its start plus `limits.timeout`: the dispatcher answers a
    /// `timeout` then if the executor has not answered. An executor stops the call by
    /// [`Invocation::answer_by`] to answer the timeout itself.
    pub deadline: Instant,
    /// Where the sandbox reports what it refused.
    pub denials: Denials,
    /// The session the call belongs to (see [`SessionId`]).
    pub session: SessionId,
    /// Where the sandbox reports what the call used.
    pub usage: Meter,
    /// Where the executor hands the call's output as it is written, if the caller asked
    /// (see [`OutputSink`]).
    pub output: Option<OutputSink>,
    /// The variables the session's client set for this tool, checked against its policy's
    /// `env_from_caller` (empty unless the client set some).
    pub caller_env: CallerEnv,
    /// The image the session's client chose for this tool's containers, checked with
    /// [`Executor::check_image`]; `None`: the policy's own.
    pub image: Option<Arc<str>>,
    /// Set when a person reviews the call's effects: an executor that sees the call's writes
    /// holds them there, once its command has ended on its own, instead of committing them.
    pub hold: Option<HeldChanges>,
}

impl Invocation {
    /// When an executor that answers a timeout itself (with the output so far, and what
    /// became of its sandbox) stops the call: a twentieth of the time limit, and at most
    /// 100 ms, before [`Invocation::deadline`], so that its answer, not the dispatcher's bare
    /// one, is the call's.
    pub fn answer_by(&self) -> Instant {
        let margin = (self.limits.timeout / 20).min(Duration::from_millis(100));
        self.deadline.checked_sub(margin).unwrap_or(self.deadline)
    }
}

/// What a call used, as its executor measures it; what it cannot measure stays `None`,
/// never a guess. A session's command reports what was used from just before it to just
/// after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// CPU time of the call's own work: a wasm call's polls, a host command's processes, a
    /// container's cgroup. A session's command: its container's cgroup meanwhile (background
    /// jobs included), or on the host the shell's and every process it or `init` waited for.
    /// Written to the microsecond.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::units::serialize_ms"
    )]
    pub cpu_ms: Option<f64>,
    /// The high-water mark of the call's memory: a wasm call's memories and tables, a host
    /// command's largest resident set, a container's cgroup (page cache and `/tmp` included).
    /// A session's command: only a docker one whose cgroup can start a new peak for it
    /// (cgroup v1, warden as root); a host session has none, as the kernel keeps its
    /// children's peak over the whole session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// Bytes through the sandbox's gate, to its destinations and back, and its connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_bytes_out: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_bytes_in: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_connections: Option<u64>,
}

impl Usage {
    /// Nothing measured.
    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// What the dispatcher hands an executor beside the program: the tool's limits (CPU, memory,
/// processes; the wall clock is the program's own `timeout`) and where the sandbox reports.
#[derive(Debug, Clone)]
pub struct Held {
    /// warden's own id of the program's run, its record's `call_id`: a commit of its changes
    /// is recorded, and undone, under it.
    pub call_id: String,
    pub limits: Limits,
    /// Where the sandbox reports what it refused.
    pub denials: Denials,
    /// Where the sandbox reports what the program used.
    pub usage: Meter,
}

/// Where an executor reports what one call used, shared with the dispatcher like
/// [`Denials`]: a call stopped at its deadline still counts what was measured so far. Its
/// figures are the attempt's; the destinations reached and the roots opened are the whole
/// call's (see [`Meter::attempt`]).
#[derive(Debug, Clone, Default)]
pub struct Meter {
    usage: Arc<Mutex<Usage>>,
    reached: Arc<Mutex<Sample<Reached>>>,
    roots: Arc<Mutex<Sample<String>>>,
    credentials: Arc<Mutex<Sample<String>>>,
}

impl Meter {
    /// A meter for the next attempt of the same call: fresh figures, the same destinations
    /// and roots.
    pub fn attempt(&self) -> Meter {
        Meter {
            usage: Arc::default(),
            reached: self.reached.clone(),
            roots: self.roots.clone(),
            credentials: self.credentials.clone(),
        }
    }

    /// Updates the figures.
    pub fn record(&self, update: impl FnOnce(&mut Usage)) {
        update(
            &mut self
                .usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    /// The figures so far.
    pub fn get(&self) -> Usage {
        *self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A destination the sandbox let the call reach. Kept once however often it is reached
    /// (the first [`Denials::KEPT`] distinct ones), every reach counted.
    pub fn reach(&self, reach: Reached) {
        self.reached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .count_distinct(&reach);
    }

    /// Destinations reached elsewhere (through a gate), with the count of every reach.
    pub fn reach_all(&self, reached: &Sample<Reached>) {
        let mut list = self
            .reached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for reach in &reached.kept {
            list.keep_distinct(reach);
        }
        list.total += reached.total;
    }

    /// The destinations reached so far, and the count of every reach.
    pub fn reached(&self) -> Sample<Reached> {
        self.reached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A granted filesystem root the call used, named by the path the tool sees it at: kept
    /// once (the first [`Denials::KEPT`] distinct ones), every use counted.
    pub fn open_root(&self, root: &str) {
        self.roots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .count_distinct(root);
    }

    /// A request to `host` that the gate set a credential in: the host kept once (the first
    /// [`Denials::KEPT`] distinct ones), every use counted. Never the credential itself.
    pub fn use_credential(&self, host: &str) {
        self.credentials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .count_distinct(host);
    }

    /// Credential uses elsewhere (through a gate), with the count of every use.
    pub fn use_credentials(&self, used: &Sample<String>) {
        let mut list = self
            .credentials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for host in &used.kept {
            list.keep_distinct(host);
        }
        list.total += used.total;
    }

    /// The hosts whose credentials were used so far, and the count of every use.
    pub fn credentials_used(&self) -> Sample<String> {
        self.credentials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The roots opened so far, and the count of every use.
    pub fn roots_opened(&self) -> Sample<String> {
        self.roots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A destination a sandbox let a call reach, in the form denials name them
/// (`http://host:port`, `connect host:port`, `tcp 10.0.0.1:22`): never a path or a query.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Reached {
    pub destination: String,
    /// The address dialled, when the destination names a host: an address grant may be what
    /// let a name's address through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<SocketAddr>,
}

/// One attempt the sandbox refused: a destination and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Denial {
    pub destination: String,
    pub reason: String,
}

/// The refusals of one call, shared between the dispatcher and the sandbox. A tool that
/// retries in a loop must not flood memory or the log: the first [`Denials::KEPT`] are kept,
/// the rest only counted.
#[derive(Debug, Clone, Default)]
pub struct Denials(Arc<Mutex<Sample<Denial>>>);

/// The first few of something a sandbox reports, and the count of all of them: a tool that
/// loops must not flood memory or the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample<T> {
    /// The first [`Denials::KEPT`] of them (for destinations and roots: distinct ones).
    pub kept: Vec<T>,
    /// Every one of them, counted.
    pub total: u64,
}

impl<T> Sample<T> {
    /// Counts `item`, and keeps it while fewer than [`Denials::KEPT`] are kept.
    fn push(&mut self, item: T) {
        self.total += 1;
        if self.kept.len() < Denials::KEPT {
            self.kept.push(item);
        }
    }

    /// Keeps `item` unless it is kept already or [`Denials::KEPT`] are: for what is listed
    /// once however often it happens. The caller counts.
    fn keep_distinct<Q>(&mut self, item: &Q)
    where
        T: std::borrow::Borrow<Q>,
        Q: ToOwned<Owned = T> + PartialEq + ?Sized,
    {
        if self.kept.len() < Denials::KEPT && !self.kept.iter().any(|k| k.borrow() == item) {
            self.kept.push(item.to_owned());
        }
    }

    /// Counts `item`, and keeps it as [`Sample::keep_distinct`] does.
    fn count_distinct<Q>(&mut self, item: &Q)
    where
        T: std::borrow::Borrow<Q>,
        Q: ToOwned<Owned = T> + PartialEq + ?Sized,
    {
        self.keep_distinct(item);
        self.total += 1;
    }
}

impl<T> Default for Sample<T> {
    fn default() -> Self {
        Self {
            kept: Vec::new(),
            total: 0,
        }
    }
}

impl Denials {
    /// How many refusals a call keeps in full.
    pub const KEPT: usize = 100;

    pub fn push(&self, denial: Denial) {
        // Debug, not info: the call's span reports its refusals, redacted, once it is answered.
        tracing::debug!(destination = %denial.destination, "denied: {}", denial.reason);
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(denial);
    }

    /// The refusals kept so far and the count of all of them.
    pub fn snapshot(&self) -> Sample<Denial> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// One session: one `warden agent` run, one MCP connection, one `warden run` batch, one
/// `warden call`. Executors that keep state between calls (the Docker shell) keep it per
/// session and free it in [`Executor::end_session`]; the others ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(u64);

impl SessionId {
    /// A session id never used before in this process.
    pub fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number, for labels and logs.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The key of a command's result as data in a message's artifact (success) or error details
/// (failure): exit code, streams, truncation and notes, so that no client takes the text the
/// model reads apart (`_meta["warden/shell"]` over MCP).
pub const SHELL_DETAIL: &str = "shell";

/// What a tool produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// What the model reads.
    pub content: String,
    /// The structured result, when the tool has one.
    pub structured: Option<Value>,
    /// Captured standard output and error (already capped), when any.
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// Fuel burnt, when the call was metered.
    pub fuel_used: Option<u64>,
    /// More for people, merged into the message's artifact (a host tool's protections).
    pub details: serde_json::Map<String, Value>,
}

/// Runs one tool's calls, each in a fresh sandbox.
///
/// The dispatcher enforces the deadline by dropping the future: an executor must stop its work
/// and free its sandbox when its future is dropped.
pub trait Executor: Send + Sync {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>>;

    /// Runs a whole program in the sandbox a call of this tool gets, its streams passed
    /// through (`warden exec`). Executors that run only calls refuse.
    fn exec(&self, program: Program, held: Held) -> BoxFuture<'_, Result<Finished, ToolError>> {
        drop((program, held));
        Box::pin(async {
            Err(ToolError::new(
                ErrorKind::Unavailable,
                "this tool runs calls, not programs: call it with `warden call`",
            ))
        })
    }

    /// Whether a session's client may have this tool's containers run `image`; why not, for
    /// the client, otherwise. Executors that run no images refuse every one.
    fn check_image(&self, image: &str) -> Result<(), String> {
        Err(format!(
            "this tool runs no container image, so it cannot run {image:?}: choose images \
             only for docker tools"
        ))
    }

    /// The most bytes a client may read from or write to this tool's session sandbox in one
    /// request ([`crate::Dispatcher::read_file`], [`crate::Dispatcher::write_file`]: a shell
    /// session's, whose policy writes `transfer`); `None`, by default: it allows none.
    fn transfer(&self) -> Option<u64> {
        None
    }

    /// Runs a client's `pipe` beside the shell of `session`'s live sandbox, its bytes passed
    /// through raw ([`Pipe`]), where the sandbox can start a shell there;
    /// [`Piping::NotBeside`] by default.
    fn pipe<'a>(&'a self, session: SessionId, pipe: &'a Pipe<'a>) -> BoxFuture<'a, Piping> {
        let _ = (session, pipe);
        Box::pin(async { Piping::NotBeside })
    }

    /// warden's writing end of the FIFO that the shell of `session`'s live sandbox holds on
    /// its descriptor `fd` (a client's command made it there), where warden can take the
    /// shell's descriptors: a client's bytes then reach a command of that shell raw, as a
    /// pipe's would, with no shell started beside it. None where it cannot, and by default.
    fn shell_fifo(&self, session: SessionId, fd: i32) -> ShellFifo<'_> {
        let _ = (session, fd);
        Box::pin(async { None })
    }

    /// Whether the commands of a session are transactions over its read-write roots (each
    /// settled as it ends: `warden_tx`), so what they change can be found and committed
    /// elsewhere; false where they write in place, and by default.
    fn sessions_are_transactions(&self) -> bool {
        false
    }

    /// Gets ready ahead of the first call (a warm pool starts filling). Long-running front
    /// ends call it once the toolbox is loaded, inside a tokio runtime; calling it again does
    /// no more. Nothing by default.
    fn warm(&self) {}

    /// Frees what the executor keeps for `session` (a container, a shell). Called once when
    /// the session ends; calls of that session may follow only as a new start.
    fn end_session(&self, session: SessionId) -> BoxFuture<'_, ()> {
        let _ = session;
        Box::pin(async {})
    }
}
