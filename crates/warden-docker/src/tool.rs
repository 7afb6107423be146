//! The executor of a docker tool: a container per call, or one shell per session.

use crate::container::{Ended, OneCall, Ran, run_once, wrapped};
use crate::engine::Engine;
use crate::files::Copied;
use crate::gate::Sandboxed;
use crate::passthrough::Made;
use crate::plan::Plan;
use crate::session::DockerShells;
use std::sync::Arc;
use tokio::time::Instant;
use warden_command::session::Sessions;
use warden_command::{Request, Template, answer, effective_timeout, timed_out};
use warden_core::{
    BoxFuture, Executor, Exit, Grants, Held, Invocation, Output, Program, SessionId, ToolError,
};
use warden_net::{Gate, Scope};

/// One docker tool.
pub(crate) struct DockerTool {
    engine: Arc<Engine>,
    plan: Plan,
    template: Template,
    grants: Grants,
    /// `Some` in session mode: the shells of its sessions.
    sessions: Option<Sessions<DockerShells>>,
    /// The net grants' gate, when the policy grants hosts (and not every host).
    gate: Option<Gate>,
}

impl DockerTool {
    /// `shell` is `Some` in session mode: the shell that drives every session.
    pub(crate) fn new(
        engine: Arc<Engine>,
        plan: Plan,
        template: Template,
        grants: Grants,
        shell: Option<String>,
        gate: Option<Gate>,
    ) -> Self {
        let sessions = shell.map(|shell| {
            Sessions::new(DockerShells {
                engine: engine.clone(),
                plan: plan.clone(),
                shell,
                gate: gate.clone(),
                grants: grants.clone(),
            })
        });
        Self {
            engine,
            plan,
            template,
            grants,
            sessions,
            gate,
        }
    }

    async fn run(&self, inv: Invocation) -> Result<Output, ToolError> {
        let session = self.sessions.is_some();
        let request = Request::parse(&inv.arguments, &self.template, session)
            .map_err(ToolError::invalid_arguments)?;
        // `limit` is what messages name; `timeout` is when this executor stops.
        let limit = request
            .timeout
            .map_or(inv.limits.timeout, |t| t.min(inv.limits.timeout));
        let timeout = effective_timeout(request.timeout, inv.limits.timeout);
        let env = self.grants.resolve_env()?;
        if let Some(sessions) = &self.sessions {
            return sessions.run(&inv, &request, &env, (timeout, limit)).await;
        }
        let sandboxed = self
            .gate
            .as_ref()
            .map(|_| Sandboxed::new(&self.grants))
            .transpose()?;
        let env = env
            .into_iter()
            .chain(sandboxed.iter().flat_map(Sandboxed::env))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let deadline = Instant::now() + timeout;
        let docker = self.engine.client().await?;
        self.engine.ensure_image(&docker, &self.plan.image).await?;
        let mut body = self.plan.container(
            wrapped(self.template.render(&request.values)),
            env,
            inv.limits.memory,
            self.engine.labels(&self.plan.tool, "call"),
            true,
        );
        if let Some(s) = &sandboxed {
            s.mount_into(&mut body);
        }
        let scope = Scope {
            denials: inv.denials.clone(),
            deadline: deadline.into_std(),
        };
        let call = OneCall {
            image: &self.plan.image,
            body,
            output_limit: inv.limits.output,
            deadline,
            gate: self
                .gate
                .clone()
                .zip(sandboxed.as_ref())
                .map(|(g, s)| (g, scope, s.credentials.clone())),
            copied: self
                .plan
                .copied
                .as_ref()
                .map(|c| (c, self.plan.tool.as_str())),
        };
        let Ran {
            ended,
            traffic,
            used,
            files,
        } = run_once(&self.engine, &docker, call).await?;
        inv.usage.record(|u| {
            u.cpu_ms = used.cpu_ms;
            u.peak_memory_bytes = used.peak_memory_bytes;
        });
        let (stdout, stderr) = match &ended {
            Ended::Exited { stdout, stderr, .. } | Ended::TimedOut { stdout, stderr } => {
                (stdout, stderr)
            }
        };
        // The command ran, but what it wrote to its read-write roots did not come back: that
        // is the answer, with its output beside.
        let notes = match files {
            Ok(notes) => notes.join("]\n["),
            Err(e) => {
                return Err(e
                    .with_detail("stdout", stdout.clone())
                    .with_detail("stderr", stderr.clone()));
            }
        };
        let note = Some(notes.as_str()).filter(|n| !n.is_empty());
        let answered = match ended {
            Ended::Exited {
                code,
                oom,
                stdout,
                stderr,
            } => answer(code, oom, &stdout, &stderr, &inv.limits, note),
            Ended::TimedOut { stdout, stderr } => Err(timed_out(
                limit,
                &stdout,
                &stderr,
                if self.plan.copied.as_ref().is_some_and(Copied::writes_back) {
                    "its container was killed and removed, with what it wrote to its \
                     read-write roots: nothing was written back"
                } else {
                    "its container was killed and removed"
                },
            )),
        };
        if let Some(t) = traffic {
            t.count_in(&inv.usage);
        }
        answered
    }

    async fn end(&self, id: SessionId) {
        if let Some(sessions) = &self.sessions {
            sessions.end(id).await;
        }
    }
}

impl Executor for DockerTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.run(invocation))
    }

    fn exec(&self, mut program: Program, held: Held) -> BoxFuture<'_, Result<Exit, ToolError>> {
        Box::pin(async move {
            let argv = self.template.program(std::mem::take(&mut program.argv))?;
            let made = Made {
                engine: &self.engine,
                plan: &self.plan,
                grants: &self.grants,
                gate: self.gate.as_ref(),
            };
            crate::passthrough::run(made, argv, program, held).await
        })
    }

    fn end_session(&self, session: SessionId) -> BoxFuture<'_, ()> {
        Box::pin(self.end(session))
    }
}
