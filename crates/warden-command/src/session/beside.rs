//! Commands that overlap: a command that comes while its session's shell runs another one
//! runs at once, in a shell of its own started beside the session's, in the same sandbox
//! (the same container; the same namespaces, mounts, Landlock domain, seccomp filter, user
//! and rlimits). It starts from the session's state as the last command that ended in the
//! session's shell left it — its working directory, exported variables and shell options —
//! and what it changes there is not carried back: its shell ends with it. Its files, and
//! the background jobs it leaves, stay in the sandbox like any command's; but where it sees
//! the session's read-write roots through a view of its own ([`Siblings::viewed`]), its
//! writes there are its command's transaction, and its background jobs end with it.

use super::script::replay;
use super::shell::{Live, Ran};
use super::{Chunks, Input, Launched, Sandbox, Sessions};
use crate::{Cause, CommandCall, answer, timed_out};
use std::future::Future;
use std::sync::Arc;
use warden_core::{Invocation, Output, ToolError};

/// Starts shells beside a session's own, in its live sandbox.
pub trait Siblings: Send + Sync + 'static {
    type Sibling: Sibling;

    /// Starts a shell reading commands on its stdin, beside the session's, with the
    /// session's environment as the sandbox started it.
    fn start(&self) -> impl Future<Output = Result<Launched<Self::Sibling>, ToolError>> + Send;

    /// Whether another process (an engine) relays its shells' stdio: a client's transfers
    /// then go through a pipe of the courier's own where warden can take it
    /// (`super::fifo`).
    fn relayed(&self) -> bool {
        false
    }

    /// Whether each of its shells sees the session's read-write roots through a view of its
    /// own, its one command's transaction ([`Sibling::close_settled`]): such a shell carries
    /// no client's transfers, which go through the session's shell.
    fn viewed(&self) -> bool {
        false
    }
}

/// One shell beside a session's own, for one command.
pub trait Sibling: Send + 'static {
    /// Its shell's pid on this machine: its CPU is read from `/proc`, and a command of its
    /// past its deadline is stopped by killing it with everything below it.
    fn pid(&self) -> i32;

    /// After its output closed: its exit status, when known.
    fn exit_status(&mut self) -> impl Future<Output = Option<i64>> + Send;

    /// Its stdin is closed (its shell ends, the background jobs it started live on):
    /// releases what is left of it.
    fn close(self) -> impl Future<Output = ()> + Send;

    /// Closes it once its command was `answered`, and answers that once what the command
    /// wrote is settled: where the shell saw the session's read-write roots through a view of
    /// its own, its changes are committed or discarded as a call's are
    /// (`warden_tx::settle::settle`). By default, there is none to settle.
    fn close_settled(
        self,
        inv: &Invocation,
        answered: Result<Output, ToolError>,
    ) -> impl Future<Output = Result<Output, ToolError>> + Send
    where
        Self: Sized,
    {
        let _ = inv;
        async move {
            self.close().await;
            answered
        }
    }
}

/// For executors whose sandboxes start no shell beside the session's: their commands take
/// turns.
pub enum NoSiblings {}

impl Siblings for NoSiblings {
    type Sibling = NoSiblings;

    async fn start(&self) -> Result<Launched<NoSiblings>, ToolError> {
        match *self {}
    }
}

impl Sibling for NoSiblings {
    fn pid(&self) -> i32 {
        match *self {}
    }

    async fn exit_status(&mut self) -> Option<i64> {
        match *self {}
    }

    async fn close(self) {}
}

/// What a command that overlaps another starts from: where to start its shell, the
/// session's state, and what every answer of the sandbox carries.
pub(super) struct Beside<T> {
    pub siblings: Arc<T>,
    /// The sandbox's [`Live::id`].
    pub sandbox: u64,
    /// The state the last command that ended in the session's shell left.
    pub state: Option<String>,
    /// The shell options it left on (`set -x`), restored inside the command.
    pub options: String,
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl<T> Clone for Beside<T> {
    fn clone(&self) -> Self {
        Beside {
            siblings: self.siblings.clone(),
            sandbox: self.sandbox,
            state: self.state.clone(),
            options: self.options.clone(),
            details: self.details.clone(),
        }
    }
}

/// A sibling as the driver's [`Live`] holds it: none of a session shell's resets apply.
struct Held<T>(T);

impl<T: Sibling> Sandbox for Held<T> {
    type Siblings = super::NoSiblings;

    async fn exit_status(&mut self) -> Result<(i64, Cause), ToolError> {
        Ok((self.0.exit_status().await.unwrap_or(1), Cause::Exited))
    }

    async fn memory_killed(&mut self) -> bool {
        false
    }

    async fn processes(&mut self) -> Option<u64> {
        None
    }

    async fn close(self) {
        self.0.close().await;
    }
}

impl<L: super::Launcher> Sessions<L> {
    /// Runs `call`'s command in a shell beside the session's (see the module), which ends
    /// with it.
    pub(super) async fn beside<T: Siblings>(
        &self,
        beside: Beside<T>,
        inv: &Invocation,
        call: &CommandCall,
        command: &str,
    ) -> Result<Output, ToolError> {
        let deadline = call.time.stop_at();
        let started = tokio::time::timeout_at(deadline, beside.siblings.start()).await;
        let Launched {
            sandbox,
            input,
            output,
            ..
        } = match started {
            Ok(started) => started?,
            Err(_) => {
                let why = "a shell beside the session's did not start";
                return Err(timed_out(call.time.named, "", "", why));
            }
        };
        let pid = sandbox.pid();
        let prelude = beside.state.as_deref().map(replay).unwrap_or_default();
        let mut live = shell(sandbox, input, output).starting_with(prelude, beside.options);
        let ran = live
            .run(
                command,
                inv.limits.output,
                deadline,
                None,
                inv.output.as_ref(),
            )
            .await;
        // Read before its shell ends: the CPU of the processes it waited for, its command's.
        let cpu_ms = super::cpu_ms(pid, None);
        inv.usage.record(|u| u.cpu_ms = cpu_ms);
        let limits = &inv.limits;
        let answered = match ran {
            Ran::Finished(f) => answer(f.status, &Cause::Exited, &f.stdout, &f.stderr, limits, &[]),
            Ran::ShellEnded { stdout, stderr } => {
                let status = live.sandbox.0.exit_status().await.unwrap_or(1);
                let note = "the command's own shell ended (it ran beside the session's, which \
                            lives on)"
                    .to_owned();
                answer(status, &Cause::Exited, &stdout, &stderr, limits, &[note])
            }
            Ran::TimedOut { stdout, stderr }
            | Ran::Stopped { stdout, stderr }
            | Ran::OutOfProcesses { stdout, stderr, .. } => {
                super::kill_tree(pid);
                let what = "it ran beside the session's shell, alongside another command: its \
                            processes were stopped; the session lives on";
                Err(timed_out(call.time.named, &stdout, &stderr, what))
            }
            Ran::NotRun { .. } => Err(ToolError::internal(
                "a shell beside the session's did not run the command",
            )),
        };
        let answered = live.into_sandbox().0.close_settled(inv, answered).await;
        match answered {
            Ok(mut output) => {
                output.details.extend(beside.details);
                Ok(output)
            }
            Err(e) => Err(beside
                .details
                .into_iter()
                .fold(e, |e, (key, value)| e.with_detail(&key, value))),
        }
    }
}

/// A sibling's shell as the driver runs it.
fn shell<T: Sibling>(sibling: T, input: Input, output: Chunks) -> Live<Held<T>> {
    Live::new(Held(sibling), input, output)
}
