//! The executor of a host tool: one confined process tree per call, started through the
//! helper, read with caps, and killed whole on timeout or cancel; or, in session mode, one
//! confined shell per session (see [`crate::session`]).

use crate::config::{HostConfig, Isolation};
use crate::failure::unavailable;
use crate::forks::Forker;
use crate::plan::{Call, Protections, Report, Rlimits, Root, Sandbox, Stdin};
use crate::sandboxes::Sandboxes;
use crate::session::HostShells;
use crate::starter::{Ended, Starter};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use warden_command::session::Sessions;
use warden_command::{Cause, CommandCall, NetworkMode, Template, answer, shell, timed_out};
use warden_core::{
    Access, BoxFuture, Denials, ErrorKind, Executor, Finished, Grants, Held, Invocation, Limits,
    Output, Pipe, Piping, Program, SHELL_DETAIL, SessionId, ShellFifo, ToolError,
};
use warden_net::Gate;
use warden_tx::Store;
use warden_tx::settle::Settling;

/// One host tool.
pub(crate) struct HostTool {
    starter: Arc<Starter>,
    template: Template,
    /// `Some` in session mode: the shells of its sessions.
    sessions: Option<Sessions<HostShells>>,
}

/// How a host tool's calls run, besides its policy: in a session's shell or each in a
/// sandbox of its own, behind warden's gate or not.
pub(crate) struct CallSetup {
    /// The shell that drives every session, in session mode.
    pub(crate) shell: Option<String>,
    /// The gate of a policy with net grants that does not open every host.
    pub(crate) gate: Option<Gate>,
    /// How many sandboxes are kept set up ahead for calls (none in session mode).
    pub(crate) prepared: usize,
    /// Where each call's and program's view of its writable roots is made (a session's
    /// shell has none).
    pub(crate) views: Option<Arc<Store>>,
}

impl HostTool {
    /// `calls.shell` is `Some` in session mode: the shell that drives every session.
    /// `calls.prepared` sandboxes are kept set up ahead for calls (none in session mode).
    pub(crate) fn new(
        forker: Arc<Forker>,
        config: HostConfig,
        template: Template,
        grants: Grants,
        calls: CallSetup,
    ) -> Self {
        let CallSetup {
            shell,
            gate,
            prepared,
            views,
        } = calls;
        let roots = grants
            .fs
            .iter()
            .map(|g| Root {
                host: g.host.clone(),
                guest: g.guest.clone().into(),
                writable: g.access == Access::ReadWrite,
                view: None,
            })
            .collect();
        let prepared = match shell {
            Some(_) => 0,
            None => prepared,
        };
        let sandbox = Sandbox {
            cwd: config.start_dir(&grants),
            uid: config.user.uid,
            gid: config.user.gid,
            host_network: config.network.value == NetworkMode::Unrestricted,
            gate: gate.is_some(),
            roots,
            tmp: config.tmp,
            trust: gate.is_some() && !grants.net.credentials.is_empty(),
            // Each start says what its command reads.
            stdin: Stdin::Nothing,
            best_effort: config.isolation.value == Isolation::BestEffort,
            join: None,
            stash: None,
        };
        let starter = Arc::new(Starter {
            config,
            grants,
            gate,
            sandboxes: Arc::new(Sandboxes::new(forker, sandbox, prepared, views)),
        });
        let sessions = shell.map(|shell| {
            Sessions::new(HostShells {
                starter: starter.clone(),
                shell,
            })
        });
        Self {
            starter,
            template,
            sessions,
        }
    }

    pub(crate) fn config(&self) -> &HostConfig {
        &self.starter.config
    }

    pub(crate) fn template(&self) -> &Template {
        &self.template
    }

    /// Runs `true` as this tool would run a call, and answers what was in force: the audit's
    /// view of this machine, measured rather than guessed.
    pub(crate) async fn probe(&self) -> Result<Protections, ToolError> {
        let limits = Limits::default();
        let credentials = self.starter.credentials()?;
        let plan = self.starter.plan(
            vec!["true".into()],
            self.starter.grants.resolve_env(&BTreeMap::new())?,
            &limits,
            limits.timeout,
            &credentials,
        )?;
        let ended = self
            .starter
            .spawn(
                &plan,
                1024,
                Instant::now() + limits.timeout,
                &Denials::default(),
                credentials,
            )
            .await?;
        ended
            .reports
            .into_iter()
            .find_map(|r| match r {
                Report::Ready(p) => Some(Ok(p)),
                Report::Failed { message, .. } => Some(Err(unavailable(&message))),
                Report::Exited { .. } | Report::Init { .. } | Report::Used { .. } => None,
            })
            .unwrap_or_else(|| Err(unavailable("the helper ended without a report")))
    }

    async fn run(&self, inv: Invocation) -> Result<Output, ToolError> {
        let session = self.sessions.is_some();
        let call = CommandCall::of(&inv, &self.template, &self.starter.grants, session)?;
        match &self.sessions {
            Some(sessions) => sessions.run(&inv, &call).await,
            None => self.run_once(&inv, call).await,
        }
    }

    /// Runs `call` in a sandbox of its own, and answers how it ended.
    async fn run_once(&self, inv: &Invocation, call: CommandCall) -> Result<Output, ToolError> {
        let credentials = self.starter.credentials()?;
        let stop_at = call.time.stop_at();
        let plan = self.starter.plan(
            self.template.render(&call.request.values),
            call.env,
            &inv.limits,
            stop_at.saturating_duration_since(Instant::now()),
            &credentials,
        )?;
        let mut ended = self
            .starter
            .spawn(&plan, inv.limits.output, stop_at, &inv.denials, credentials)
            .await?;
        let (view, gone) = (ended.view.take(), ended.gone);
        let whose = Settling {
            call: &inv.call_id,
            tool: &self.starter.config.name,
            limit: inv.limits.changes,
        };
        let answered = answered_as(inv, &plan, ended, call.time.named);
        warden_tx::settle::settle(view, gone, whose, inv.hold.as_ref(), answered)
    }
}

/// What a call's command came to, from how its sandbox ended.
fn answered_as(
    inv: &Invocation,
    plan: &Call,
    ended: Ended,
    named: Duration,
) -> Result<Output, ToolError> {
    let (stdout, stderr) = (ended.stdout.text(), ended.stderr.text());
    let mut protections = None;
    let mut exit = None;
    for report in ended.reports {
        match report {
            Report::Ready(p) => protections = Some(p),
            Report::Failed { message, .. } => return Err(unavailable(&message)),
            Report::Exited { code, signal } => exit = Some((code, signal)),
            Report::Used {
                cpu_ms,
                max_rss_bytes,
            } => inv.usage.record(|u| {
                u.cpu_ms = Some(cpu_ms);
                u.peak_memory_bytes = Some(max_rss_bytes);
            }),
            Report::Init { .. } => {}
        }
    }
    let isolation = protections
        .as_ref()
        .and_then(|p| serde_json::to_value(p).ok())
        .unwrap_or(Value::Null);
    if ended.timed_out {
        return Err(timed_out(
            named,
            &stdout,
            &stderr,
            "every process it started was killed",
        )
        .with_detail("isolation", isolation));
    }
    let result = match exit {
        Some((Some(code), _)) => answer(
            code.into(),
            &Cause::Exited,
            &stdout,
            &stderr,
            &inv.limits,
            &[],
        ),
        Some((None, Some(signal))) => Err(killed(signal, &plan.rlimits, &stdout, &stderr)),
        _ => Err(ToolError::new(
            ErrorKind::Internal,
            "the host sandbox ended without saying how the command ended",
        )),
    };
    let answered = match result {
        Ok(mut output) => {
            output.details.insert("isolation".into(), isolation);
            Ok(output)
        }
        Err(e) => Err(e.with_detail("isolation", isolation)),
    };
    if let Some(t) = ended.traffic {
        t.count_in(&inv.usage);
    }
    answered
}

impl HostTool {
    async fn end(&self, id: SessionId) {
        if let Some(sessions) = &self.sessions {
            sessions.end(id).await;
        }
    }
}

/// The command itself was killed by a signal: a limit, or something it did.
fn killed(signal: i32, rlimits: &Rlimits, stdout: &str, stderr: &str) -> ToolError {
    let (kind, message) = match rlimits.broken_by(signal, "the command") {
        Some(broken) => (ErrorKind::LimitExceeded, broken),
        None => (
            ErrorKind::ExitStatus,
            format!(
                "the command was killed by signal {signal} ({})",
                nix::sys::signal::Signal::try_from(signal).map_or("unknown", |s| s.as_str())
            ),
        ),
    };
    let mut text = message;
    for (name, out) in [("stdout", stdout), ("stderr", stderr)] {
        if !out.is_empty() {
            text.push_str(&format!("\n[{name}]\n{out}"));
        }
    }
    ToolError::new(kind, text)
        .with_detail("signal", signal)
        .with_detail(SHELL_DETAIL, shell(None, stdout, stderr, &[]))
}

impl Executor for HostTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.run(invocation))
    }

    fn transfer(&self) -> Option<u64> {
        self.sessions.as_ref().and(self.config().transfer)
    }

    fn sessions_are_transactions(&self) -> bool {
        self.sessions.is_some() && self.starter.sandboxes.viewed()
    }

    fn exec(&self, mut program: Program, held: Held) -> BoxFuture<'_, Result<Finished, ToolError>> {
        Box::pin(async move {
            let argv = self.template.program(std::mem::take(&mut program.argv))?;
            crate::passthrough::run(&self.starter, argv, program, held).await
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
}
