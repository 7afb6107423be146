//! The executor of a docker tool: a container per call, or one shell per session; from its
//! warm pool when it keeps one.

use crate::files::Copied;
use crate::launch::{Recipe, Started};
use crate::per_call::{Ended, OneCall, Ran, run_once};
use crate::pool::Pool;
use crate::session::DockerShells;
use std::borrow::Cow;
use tokio::time::Instant;
use warden_command::session::Sessions;
use warden_command::{Cause, CommandCall, Template, answer, shell, timed_out};
use warden_core::{
    BoxFuture, ErrorKind, Executor, Finished, Held, Invocation, Output, Pipe, Piping, Program,
    SHELL_DETAIL, SessionId, ShellFifo, ToolError,
};
use warden_net::Scope;
use warden_tx::View;
use warden_tx::settle::Settling;

/// One docker tool.
pub(crate) struct DockerTool {
    recipe: Recipe,
    template: Template,
    /// `Some` in session mode: the shells of its sessions.
    sessions: Option<Sessions<DockerShells>>,
    /// Containers started ahead of their calls, when the policy keeps a pool.
    pool: Option<Pool>,
    /// The most bytes a client may read from or write to a session's container in one
    /// request.
    transfer: Option<u64>,
}

impl DockerTool {
    /// `recipe.shell` is the session's shell in session mode (`session` true), else the
    /// shell of a per-call container.
    pub(crate) fn new(
        recipe: Recipe,
        template: Template,
        session: bool,
        pool: Option<Pool>,
        transfer: Option<u64>,
    ) -> Self {
        let sessions = session.then(|| {
            Sessions::new(DockerShells {
                recipe: recipe.clone(),
                pool: pool.clone(),
            })
        });
        Self {
            recipe,
            template,
            sessions,
            pool,
            transfer,
        }
    }

    async fn run(&self, inv: Invocation) -> Result<Output, ToolError> {
        let session = self.sessions.is_some();
        let call = CommandCall::of(&inv, &self.template, &self.recipe.grants, session)?;
        match &self.sessions {
            Some(sessions) => sessions.run(&inv, &call).await,
            None => self.run_once(&inv, call).await,
        }
    }

    /// Runs `call` in a container of its own, and answers how it ended.
    async fn run_once(&self, inv: &Invocation, call: CommandCall) -> Result<Output, ToolError> {
        let argv = self.template.render(&call.request.values);
        let (
            Ran {
                ended,
                traffic,
                used,
                files,
            },
            (view, gone),
        ) = self
            .in_container(inv, &argv, &call.env, call.time.stop_at())
            .await?;
        inv.usage.record(|u| {
            u.cpu_ms = used.cpu_ms;
            u.peak_memory_bytes = used.peak_memory_bytes;
        });
        // The command ran, but what it wrote to its read-write roots did not come back: that
        // is the answer, with its output beside.
        let notes = match files {
            Ok(notes) => notes,
            Err(e) => {
                let (code, stdout, stderr) = match &ended {
                    Ended::Exited {
                        code,
                        stdout,
                        stderr,
                        ..
                    } => (Some(*code), stdout, stderr),
                    Ended::TimedOut { stdout, stderr } => (None, stdout, stderr),
                };
                let mut e = e.with_detail(SHELL_DETAIL, shell(code, stdout, stderr, &[]));
                // A transaction's `details.changes` says that nothing of it was kept.
                if self.recipe.views.is_some() {
                    e.set_detail("changes", warden_core::changes::discarded_detail());
                }
                return Err(e);
            }
        };
        let answered = match ended {
            Ended::Exited {
                code,
                oom,
                stdout,
                stderr,
            } => answer(
                code,
                &Cause::of_memory(oom),
                &stdout,
                &stderr,
                &inv.limits,
                &notes,
            ),
            // Its view, if it had one, goes with its container, and the answer says so.
            Ended::TimedOut { stdout, stderr } if self.recipe.views.is_some() => {
                let what = "its container was killed and removed";
                let e = timed_out(call.time.named, &stdout, &stderr, what);
                Err(warden_core::changes::discarded(e))
            }
            Ended::TimedOut { stdout, stderr } => {
                let what = if self
                    .recipe
                    .plan
                    .copied
                    .as_ref()
                    .is_some_and(Copied::writes_back)
                {
                    "its container was killed and removed, with what it wrote to its \
                     read-write roots: nothing was written back"
                } else {
                    "its container was killed and removed"
                };
                Err(timed_out(call.time.named, &stdout, &stderr, what))
            }
        };
        if let Some(t) = traffic {
            t.count_in(&inv.usage);
        }
        let whose = Settling {
            call: &inv.call_id,
            tool: &self.recipe.plan.tool,
            limit: inv.limits.changes,
        };
        warden_tx::settle::settle(view, gone, whose, inv.hold.as_ref(), answered)
    }

    /// Runs `argv` with `env` in a container, the pool's when it has one waiting (and the
    /// next, should that one have died while it waited), else a fresh one; stopped at
    /// `deadline`. The container is gone or going when this returns; with it, its view when
    /// that is final (see [`removed`]).
    async fn in_container(
        &self,
        inv: &Invocation,
        argv: &[String],
        env: &[(String, String)],
        deadline: Instant,
    ) -> Result<(Ran, (Option<View>, bool)), ToolError> {
        let recipe = self.recipe.for_image(inv.image.as_deref());
        let plan = &recipe.plan;
        // The pool's containers run the policy's own image.
        let pool = self
            .pool
            .as_ref()
            .filter(|_| matches!(recipe, Cow::Borrowed(_)));
        loop {
            let taken = pool.and_then(|p| p.take(env, inv.limits.memory));
            let pooled = taken.is_some();
            let mut started = match taken {
                Some(started) => started,
                None => recipe.start(env, inv.limits.memory, "call").await?,
            };
            let call = OneCall {
                argv,
                output_limit: inv.limits.output,
                deadline,
                scope: Scope {
                    denials: inv.denials.clone(),
                    deadline: deadline.into_std(),
                },
                copied: plan.copied.as_ref().map(|c| (c, plan.tool.as_str())),
            };
            let ran = run_once(&recipe.engine, &mut started, call).await;
            let view = removed(&ran, started, pool.filter(|_| pooled)).await;
            match ran? {
                Some(ran) => return Ok((ran, view)),
                // It died while it waited in the pool: the next one runs the command.
                None if pooled => continue,
                None => {
                    return Err(ToolError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "the container's shell ({}) ended before it took the command: \
                             the image {} needs a POSIX shell there",
                            self.recipe.shell, plan.image
                        ),
                    ));
                }
            }
        }
    }

    async fn end(&self, id: SessionId) {
        if let Some(sessions) = &self.sessions {
            sessions.end(id).await;
        }
    }
}

/// Removes a per-call container once its command is done, off the call's path (back to the
/// pool to be removed, or in a task). Its view, when its command ended on its own, is final
/// once every process of the container has been killed: answered with `true` when they were.
/// Any other view goes after the container, uncommitted: nothing writes into a view as it goes.
async fn removed(
    ran: &Result<Option<Ran>, ToolError>,
    mut started: Started,
    pool: Option<&Pool>,
) -> (Option<View>, bool) {
    let ended = matches!(ran, Ok(Some(r)) if matches!(r.ended, Ended::Exited { .. }));
    let settled = match started.view.take_if(|_| ended) {
        Some(view) => {
            let gone = match &started.init {
                Some(init) => init.end().await,
                // gVisor's file server, or an engine whose processes are not seen here.
                None => started.container.stop_all().await,
            };
            (Some(view), gone)
        }
        None => (None, false),
    };
    match pool {
        Some(pool) => pool.dispose(started),
        None if started.view.is_some() || settled.0.is_some() => {
            tokio::spawn(async move {
                let Started {
                    container, view, ..
                } = started;
                container.remove().await;
                drop(view);
            });
        }
        None => started.container.remove().await,
    }
    settled
}

impl Executor for DockerTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.run(invocation))
    }

    fn exec(&self, mut program: Program, held: Held) -> BoxFuture<'_, Result<Finished, ToolError>> {
        Box::pin(async move {
            let argv = self.template.program(std::mem::take(&mut program.argv))?;
            crate::passthrough::run(&self.recipe, argv, program, held).await
        })
    }

    fn end_session(&self, session: SessionId) -> BoxFuture<'_, ()> {
        Box::pin(self.end(session))
    }

    fn pipe<'a>(&'a self, session: SessionId, pipe: &'a Pipe<'a>) -> BoxFuture<'a, Piping> {
        Box::pin(async move {
            match &self.sessions {
                Some(sessions) => sessions.pipe(session, pipe).await,
                None => Piping::NotBeside,
            }
        })
    }

    fn shell_fifo(&self, session: SessionId, fd: i32) -> ShellFifo<'_> {
        Box::pin(async move { self.sessions.as_ref()?.shell_fifo(session, fd).await })
    }

    fn transfer(&self) -> Option<u64> {
        self.sessions.as_ref().and(self.transfer)
    }

    fn sessions_are_transactions(&self) -> bool {
        self.sessions.is_some() && (self.recipe.views.is_some() || self.recipe.copies.is_some())
    }

    fn check_image(&self, image: &str) -> Result<(), String> {
        let plan = &self.recipe.plan;
        if image == plan.image || plan.images.iter().any(|i| i == image) {
            return Ok(());
        }
        let allowed: Vec<&str> = std::iter::once(plan.image.as_str())
            .chain(plan.images.iter().map(String::as_str))
            .collect();
        Err(format!(
            "its policy lets its containers run {allowed:?}, not {image:?}: choose one of \
             those, or add it to the policy's `images`"
        ))
    }

    fn warm(&self) {
        if let Some(pool) = &self.pool {
            pool.fill();
        }
    }
}
