//! The executor of a host tool: one confined process tree per call, started through the
//! helper, read with caps, and killed whole on timeout or cancel; or, in session mode, one
//! confined shell per session (see [`crate::session`]).

use crate::config::{HostConfig, Isolation};
use crate::forks::Forker;
use crate::plan::{CA_BUNDLE, Call, Protections, Report, Rlimits, Root, Sandbox};
use crate::sandboxes::{Prepared, Started};
use crate::session::HostShells;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use warden_command::session::Sessions;
use warden_command::{NetworkMode, Request, Template, answer, effective_timeout, timed_out};
use warden_core::{
    Access, BoxFuture, Capped, Denials, ErrorKind, Executor, Grants, Invocation, Limits, Output,
    SessionId, ToolError,
};
use warden_net::{Credentials, Gate, Proxy, Scope, Traffic};

/// One host tool.
pub(crate) struct HostTool {
    starter: Arc<Starter>,
    template: Template,
    /// `Some` in session mode: the shells of its sessions.
    sessions: Option<Sessions<HostShells>>,
}

/// What starts the helper with a plan: shared by a tool's calls and its session shells.
pub(crate) struct Starter {
    /// Forks every helper of this warden process.
    pub(crate) forker: Arc<Forker>,
    config: HostConfig,
    grants: Grants,
    /// The sandbox part of every plan of this tool, made once at load.
    pub(crate) sandbox: Sandbox,
    /// The net grants' gate, when the policy grants hosts (and not every host).
    gate: Option<Gate>,
    /// Sandboxes set up ahead for this tool's calls (none in session mode).
    pub(crate) prepared: Prepared,
}

/// How the command's process tree ended.
struct Ended {
    stdout: Capped,
    stderr: Capped,
    reports: Vec<Report>,
    timed_out: bool,
    /// What went through the gate, when the plan had one.
    traffic: Option<Traffic>,
}

impl HostTool {
    /// `shell` is `Some` in session mode: the shell that drives every session. `prepared`
    /// sandboxes are kept set up ahead for calls (none in session mode).
    pub(crate) fn new(
        forker: Arc<Forker>,
        config: HostConfig,
        template: Template,
        grants: Grants,
        (shell, gate): (Option<String>, Option<Gate>),
        prepared: usize,
    ) -> Self {
        let roots = grants
            .fs
            .iter()
            .map(|g| Root {
                path: g.host.clone(),
                writable: g.access == Access::ReadWrite,
            })
            .collect();
        let prepared = if shell.is_some() { 0 } else { prepared };
        // A tmpfs over /tmp would hide a root below it, and its read-write rule would reach
        // into a read-only one: such a policy gets no /tmp at all.
        let host_tmp = std::fs::canonicalize("/tmp").unwrap_or_else(|_| "/tmp".into());
        let tmp = if grants.fs.iter().any(|g| g.host.starts_with(&host_tmp)) {
            0
        } else {
            config.tmp
        };
        let sandbox = Sandbox {
            cwd: config.start_dir(&grants).to_owned(),
            uid: config.user.uid,
            gid: config.user.gid,
            host_network: config.network.value == NetworkMode::Unrestricted,
            gate: gate.is_some(),
            roots,
            tmp,
            trust: gate.is_some() && !grants.net.credentials.is_empty(),
            session: shell.is_some(),
            best_effort: config.isolation.value == Isolation::BestEffort,
            dies_with_warden: false,
        };
        let starter = Arc::new(Starter {
            forker,
            config,
            grants,
            sandbox,
            gate,
            prepared: Prepared::new(prepared),
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
            self.starter.grants.resolve_env()?,
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
        let request = Request::parse(&inv.arguments, &self.template, self.sessions.is_some())
            .map_err(ToolError::invalid_arguments)?;
        // `limit` is what messages name; `timeout` is when this executor stops.
        let limit = request
            .timeout
            .map_or(inv.limits.timeout, |t| t.min(inv.limits.timeout));
        let timeout = effective_timeout(request.timeout, inv.limits.timeout);
        let env = self.starter.grants.resolve_env()?;
        if let Some(sessions) = &self.sessions {
            return sessions.run(&inv, &request, &env, (timeout, limit)).await;
        }
        let credentials = self.starter.credentials()?;
        let plan = self.starter.plan(
            self.template.render(&request.values),
            env,
            &inv.limits,
            timeout,
            &credentials,
        )?;
        let ended = self
            .starter
            .spawn(
                &plan,
                inv.limits.output,
                Instant::now() + timeout,
                &inv.denials,
                credentials,
            )
            .await?;
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
                limit,
                &stdout,
                &stderr,
                "every process it started was killed",
            )
            .with_detail("isolation", isolation));
        }
        let result = match exit {
            Some((Some(code), _)) => {
                answer(code.into(), false, &stdout, &stderr, &inv.limits, None)
            }
            Some((None, Some(signal))) => {
                Err(killed(signal, self.config(), &inv.limits, &stdout, &stderr))
            }
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

    async fn end(&self, id: SessionId) {
        if let Some(sessions) = &self.sessions {
            sessions.end(id).await;
        }
    }
}

impl Starter {
    pub(crate) fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The credentials of a new sandbox: values read now, placeholders drawn afresh. A value
    /// missing from warden's environment answers the call `unavailable`, nothing sent.
    pub(crate) fn credentials(&self) -> Result<Credentials, ToolError> {
        Ok(Credentials::new(self.grants.resolve_credentials()?))
    }

    /// The call part of one call's plan.
    pub(crate) fn plan(
        &self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        limits: &Limits,
        timeout: Duration,
        credentials: &Credentials,
    ) -> Result<Call, ToolError> {
        self.plan_for(argv, env, limits, Some(timeout), credentials)
    }

    /// The call part of a session's shell: no overall deadline, commands on its stdin.
    pub(crate) fn session_plan(
        &self,
        shell: String,
        env: Vec<(String, String)>,
        limits: &Limits,
        credentials: &Credentials,
    ) -> Result<Call, ToolError> {
        self.plan_for(vec![shell], env, limits, None, credentials)
    }

    /// With a gate, the sandbox's env also points at it, holds the credentials' placeholders,
    /// and (with credentials) names the bundle that trusts the sandbox's CA.
    fn plan_for(
        &self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        limits: &Limits,
        timeout: Option<Duration>,
        credentials: &Credentials,
    ) -> Result<Call, ToolError> {
        let cfg = &self.config;
        let cpu = cfg.cpu_time.unwrap_or(limits.timeout);
        let mut env = env;
        if self.gate.is_some() {
            env.extend(warden_net::proxy_env());
        }
        env.extend(credentials.sandbox_env());
        let ca_bundle = credentials
            .trust_bundle()
            .map_err(|e| internal(format!("the sandbox's CA: {e}")))?;
        if ca_bundle.is_some() {
            env.extend(Credentials::trust_env(CA_BUNDLE));
        }
        Ok(Call {
            argv,
            env,
            rlimits: Rlimits {
                cpu_secs: cpu.as_secs_f64().ceil().max(1.0) as u64,
                address_space: limits.memory,
                file_size: cfg.file_size,
                processes: u64::from(cfg.processes),
                open_files: u64::from(cfg.open_files),
            },
            deadline_secs: timeout.map_or(0, |t| t.as_secs() + 2),
            ca_bundle,
        })
    }

    /// Runs `call` in a sandbox of its own (prepared ahead when one is ready) and reads
    /// everything until the tree ends or `deadline`.
    /// The gate's refusals go to `denials`.
    async fn spawn(
        self: &Arc<Self>,
        call: &Call,
        cap: u64,
        deadline: Instant,
        denials: &Denials,
        credentials: Credentials,
    ) -> Result<Ended, ToolError> {
        let mut sandbox = self.sandbox_for_call().await?;
        Self::send_call(&mut sandbox, call).await?;
        let Started {
            helper,
            stdin,
            stdout,
            stderr,
            reports,
            gate,
        } = sandbox;
        // The command reads /dev/null; the helper needs nothing more.
        drop(stdin);
        let scope = Scope {
            denials: denials.clone(),
            deadline: deadline.into_std(),
        };
        let proxy = match gate {
            Some(socket) => self.serve_gate(socket, deadline, credentials).await?,
            None => None,
        };
        if let Some(proxy) = &proxy {
            proxy.begin(scope);
        }
        let mut ended = drain(stdout, stderr, reports, cap, deadline).await;
        ended.traffic = proxy.map(|p| p.end());
        if ended.timed_out {
            helper.kill();
        }
        // The tree is gone (or being killed): the helper exits at once.
        let _ = tokio::time::timeout(Duration::from_secs(5), helper.ended()).await;
        Ok(ended)
    }

    /// Serves the gate whose listener the helper hands over on `socket` (nothing gets through
    /// before [`Proxy::begin`]); `None` when the helper failed first (its report says why).
    pub(crate) async fn serve_gate(
        &self,
        socket: tokio::net::UnixStream,
        by: Instant,
        credentials: Credentials,
    ) -> Result<Option<Proxy>, ToolError> {
        let Some(gate) = &self.gate else {
            return Ok(None);
        };
        let listener = match tokio::time::timeout_at(by, crate::gate::receive(socket)).await {
            Ok(Ok(Some(listener))) => listener,
            Ok(Ok(None)) | Err(_) => return Ok(None),
            Ok(Err(e)) => return Err(internal(format!("receiving the gate's listener: {e}"))),
        };
        Proxy::start(listener, gate.clone(), credentials)
            .map(Some)
            .map_err(|e| internal(format!("serving the gate: {e}")))
    }
}

/// Reads stdout, stderr (capped) and the reports until all three end, or the deadline.
async fn drain(
    mut stdout: impl AsyncRead + Unpin,
    mut stderr: impl AsyncRead + Unpin,
    mut reports: impl AsyncRead + Unpin,
    cap: u64,
    deadline: Instant,
) -> Ended {
    let mut out = Capped::new(cap);
    let mut err = Capped::new(cap);
    let mut report_bytes = Vec::new();
    let (mut bo, mut be, mut br) = ([0u8; 8192], [0u8; 8192], [0u8; 1024]);
    let (mut o_open, mut e_open, mut r_open) = (true, true, true);
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    let mut timed_out = false;
    while o_open || e_open || r_open {
        tokio::select! {
            n = stdout.read(&mut bo), if o_open => match n {
                Ok(n) if n > 0 => out.push(&bo[..n]),
                _ => o_open = false,
            },
            n = stderr.read(&mut be), if e_open => match n {
                Ok(n) if n > 0 => err.push(&be[..n]),
                _ => e_open = false,
            },
            n = reports.read(&mut br), if r_open => match n {
                // Reports are a few lines; a runaway helper cannot make this grow far.
                Ok(n) if n > 0 && report_bytes.len() < 1 << 20 => report_bytes.extend_from_slice(&br[..n]),
                Ok(n) if n > 0 => {}
                _ => r_open = false,
            },
            () = &mut sleep => {
                timed_out = true;
                break;
            }
        }
    }
    let reports = report_bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    Ended {
        stdout: out,
        stderr: err,
        reports,
        timed_out,
        traffic: None,
    }
}

/// The command itself was killed by a signal: a limit, or something it did.
fn killed(signal: i32, cfg: &HostConfig, limits: &Limits, stdout: &str, stderr: &str) -> ToolError {
    let (kind, message) = match signal {
        nix::libc::SIGXCPU => (
            ErrorKind::LimitExceeded,
            format!(
                "the command used its CPU time limit of {}s and was killed; try a quicker \
                 command or a smaller input",
                cfg.cpu_time.unwrap_or(limits.timeout).as_secs_f64().ceil()
            ),
        ),
        nix::libc::SIGXFSZ => (
            ErrorKind::LimitExceeded,
            format!(
                "the command wrote a file larger than its limit of {} and was killed",
                warden_core::ByteSize(cfg.file_size)
            ),
        ),
        other => (
            ErrorKind::ExitStatus,
            format!(
                "the command was killed by signal {other} ({})",
                nix::sys::signal::Signal::try_from(other).map_or("unknown", |s| s.as_str())
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
        .with_detail("stdout", stdout)
        .with_detail("stderr", stderr)
}

pub(crate) fn unavailable(message: &str) -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        format!("the host sandbox could not run the command: {message}"),
    )
}

pub(crate) fn internal(message: String) -> ToolError {
    ToolError::new(ErrorKind::Internal, message)
}

impl Executor for HostTool {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(self.run(invocation))
    }

    fn end_session(&self, session: SessionId) -> BoxFuture<'_, ()> {
        Box::pin(self.end(session))
    }
}
