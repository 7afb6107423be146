//! What starts a host tool's commands: the call part of each plan, then the sandbox that runs
//! it, read with caps until its tree ends; shared by a tool's calls and its session shells.

use crate::config::HostConfig;
use crate::plan::{CA_BUNDLE, Call, Report, Rlimits};
use crate::sandboxes::{Sandboxes, Started};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use warden_core::{Capped, Denials, Grants, Limits, ToolError};
use warden_net::{Credentials, Gate, Proxy, Scope, Traffic};
use warden_tx::View;

/// What starts the helper with a plan: shared by a tool's calls and its session shells.
pub(crate) struct Starter {
    pub(crate) config: HostConfig,
    pub(crate) grants: Grants,
    /// The net grants' gate, when the policy grants hosts (and not every host).
    pub(crate) gate: Option<Gate>,
    /// Starts this tool's sandboxes, some ahead of its calls (none in session mode).
    pub(crate) sandboxes: Arc<Sandboxes>,
}

/// How the command's process tree ended.
pub(crate) struct Ended {
    pub(crate) stdout: Capped,
    pub(crate) stderr: Capped,
    pub(crate) reports: Vec<Report>,
    pub(crate) timed_out: bool,
    /// What went through the gate, when the plan had one.
    pub(crate) traffic: Option<Traffic>,
    /// The call's view of its writable roots, when it had one.
    pub(crate) view: Option<View>,
    /// The helper (and so every process of the call) is gone: what the view holds is final.
    pub(crate) gone: bool,
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

    /// The call part of a plan: `argv` under `timeout` (`None`: no deadline, for a session's
    /// shell or a program without a time limit). With a gate, the sandbox's env also points
    /// at it, holds the credentials' placeholders, and (with credentials) names the bundle
    /// that trusts the sandbox's CA.
    pub(crate) fn plan_for(
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
            .map_err(|e| ToolError::internal(format!("the sandbox's CA: {e}")))?;
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
    pub(crate) async fn spawn(
        self: &Arc<Self>,
        call: &Call,
        cap: u64,
        deadline: Instant,
        denials: &Denials,
        credentials: Credentials,
    ) -> Result<Ended, ToolError> {
        let mut sandbox = self.sandboxes.for_call().await?;
        if let Some(view) = &mut sandbox.view {
            view.begin();
        }
        sandbox.send_call(call).await?;
        let Started {
            helper,
            stdin,
            stdout,
            stderr,
            reports,
            gate,
            view,
            ..
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
        ended.gone = !helper.running();
        ended.view = view;
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
            Ok(Err(e)) => {
                return Err(ToolError::internal(format!(
                    "receiving the gate's listener: {e}"
                )));
            }
        };
        Proxy::start(listener, gate.clone(), credentials)
            .map(Some)
            .map_err(|e| ToolError::internal(format!("serving the gate: {e}")))
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
        view: None,
        gone: false,
    }
}
