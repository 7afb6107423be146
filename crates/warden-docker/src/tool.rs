//! The executor of a docker tool: a container per call, or one shell per session.

use crate::container::{Ended, run_once};
use crate::engine::Engine;
use crate::plan::Plan;
use crate::session::{Outcome, Session};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use warden_command::{Request, Template, answer, effective_timeout, timed_out};
use warden_core::{BoxFuture, Executor, Grants, Invocation, Limits, Output, SessionId, ToolError};

/// A session's shell, or none until its first command (or after it ended).
type Slot = Arc<tokio::sync::Mutex<Option<Session>>>;

/// One docker tool.
pub(crate) struct DockerTool {
    engine: Arc<Engine>,
    plan: Plan,
    template: Template,
    grants: Grants,
    /// `Some` in session mode: the shell that drives every session.
    shell: Option<String>,
    sessions: Mutex<HashMap<SessionId, Slot>>,
}

impl DockerTool {
    pub(crate) fn new(
        engine: Arc<Engine>,
        plan: Plan,
        template: Template,
        grants: Grants,
        shell: Option<String>,
    ) -> Self {
        Self {
            engine,
            plan,
            template,
            grants,
            shell,
            sessions: Mutex::default(),
        }
    }

    async fn run(&self, inv: Invocation) -> Result<Output, ToolError> {
        let session = self.shell.is_some();
        let request = Request::parse(&inv.arguments, &self.template, session)
            .map_err(ToolError::invalid_arguments)?;
        // `limit` is what messages name; `timeout` is when this executor stops.
        let limit = request
            .timeout
            .map_or(inv.limits.timeout, |t| t.min(inv.limits.timeout));
        let timeout = effective_timeout(request.timeout, inv.limits.timeout);
        let env: Vec<String> = self
            .grants
            .resolve_env()?
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if session {
            return self
                .in_session(inv.session, request, env, &inv.limits, (timeout, limit))
                .await;
        }
        let deadline = Instant::now() + timeout;
        let docker = self.engine.client().await?;
        self.engine.ensure_image(&docker, &self.plan.image).await?;
        let argv = self.template.render(&request.values);
        let body = self.plan.container(
            argv,
            env,
            inv.limits.memory,
            self.engine.labels(&self.plan.tool, "call"),
            false,
        );
        let ended = run_once(
            &self.engine,
            &docker,
            &self.plan.image,
            body,
            inv.limits.output,
            deadline,
        )
        .await?;
        match ended {
            Ended::Exited {
                code,
                oom,
                stdout,
                stderr,
            } => answer(code, oom, &stdout.text(), &stderr.text(), &inv.limits, None),
            Ended::TimedOut { stdout, stderr } => Err(timed_out(
                limit,
                &stdout.text(),
                &stderr.text(),
                "its container was killed and removed",
            )),
        }
    }

    async fn in_session(
        &self,
        id: SessionId,
        request: Request,
        env: Vec<String>,
        limits: &Limits,
        (timeout, limit): (Duration, Duration),
    ) -> Result<Output, ToolError> {
        let slot = self.slot(id);
        let mut guard = slot.lock().await;
        // Each command's deadline starts once it has the shell, not while it queues.
        let deadline = Instant::now() + timeout;
        if request.restart
            && let Some(old) = guard.take()
        {
            old.close().await;
        }
        let Some(command) = request.values.get("command") else {
            return Ok(Output {
                content: "the session was restarted: the next command runs in a fresh shell".into(),
                ..Output::default()
            });
        };
        // Taken out while the command runs: if this call's future is dropped, the session
        // drops with it and its container is removed, rather than left mid-command.
        let mut live = match guard.take() {
            Some(s) => s,
            None => {
                let docker = self.engine.client().await?;
                self.engine.ensure_image(&docker, &self.plan.image).await?;
                let shell = self.shell.clone().unwrap_or_else(|| "/bin/sh".into());
                let body = self.plan.container(
                    vec![shell],
                    env,
                    limits.memory,
                    self.engine.labels(&self.plan.tool, "session"),
                    true,
                );
                let start = Session::start(&self.engine, &docker, &self.plan.image, body);
                match tokio::time::timeout_at(deadline, start).await {
                    Ok(started) => started?,
                    Err(_) => return Err(timed_out(limit, "", "", "the shell did not start")),
                }
            }
        };
        let outcome = live
            .run(&self.engine, command, limits.output, deadline)
            .await;
        match outcome {
            Ok(Outcome::Finished {
                code,
                oom,
                stdout,
                stderr,
            }) => {
                *guard = Some(live);
                answer(code, oom, &stdout, &stderr, limits, None)
            }
            Ok(Outcome::ShellEnded {
                code,
                oom,
                stdout,
                stderr,
            }) => {
                live.close().await;
                let note = "the shell ended, and with it the session: the next command starts a \
                            fresh one";
                answer(code, oom, &stdout, &stderr, limits, Some(note))
            }
            Ok(Outcome::TimedOut { stdout, stderr }) => {
                live.close().await;
                Err(timed_out(
                    limit,
                    &stdout,
                    &stderr,
                    "the session's shell was killed; the next command starts a fresh one \
                     (working directory, variables and files outside granted folders are lost)",
                ))
            }
            Err(e) => {
                live.close().await;
                Err(e)
            }
        }
    }

    fn slot(&self, id: SessionId) -> Slot {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.entry(id).or_default().clone()
    }

    async fn end(&self, id: SessionId) {
        let slot = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            sessions.remove(&id)
        };
        if let Some(slot) = slot
            && let Some(session) = slot.lock().await.take()
        {
            session.close().await;
        }
    }
}

impl Executor for DockerTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.run(invocation))
    }

    fn end_session(&self, session: SessionId) -> BoxFuture<'_, ()> {
        Box::pin(self.end(session))
    }
}
