//! A program of `warden exec` in a host sandbox: the sandbox a call of the tool gets, with the
//! helper's stdin, stdout and stderr relayed to and from the program's own streams as they
//! flow (never held whole), driven by `warden_command::program`. Its writable roots are seen
//! through a view, settled as a call's once the program has ended (see `warden_tx::settle`).

use crate::failure::unavailable;
use crate::forks::Forked;
use crate::plan::Report;
use crate::sandboxes::{Started, resize};
use crate::starter::Starter;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::UnixStream;
use tokio::time::Instant;
use warden_command::program::{Driven, Running, drive, relay};
use warden_core::{BoxFuture, Exit, Finished, Held, Program, Sink, ToolError};
use warden_net::{Credentials, Proxy, Scope};
use warden_tx::settle::Settling;

/// How long the helper has to hand over the gate's listener, and to end once its tree is gone.
const SETUP_WAIT: Duration = Duration::from_secs(10);

/// A deadline for the gate of a program without one: far enough never to come.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Runs `argv` as the program, in a sandbox of `starter`'s tool.
pub(crate) async fn run(
    starter: &Arc<Starter>,
    argv: Vec<String>,
    program: Program,
    held: Held,
) -> Result<Finished, ToolError> {
    let Program {
        stdin,
        stdout,
        stderr,
        timeout,
        mut signals,
        terminal,
        ..
    } = program;
    let credentials = starter.credentials()?;
    let call = starter.plan_for(
        argv,
        starter.grants.resolve_env(&BTreeMap::new())?,
        &held.limits,
        timeout,
        &credentials,
    )?;
    let size = terminal.as_ref().map(|size| *size.borrow());
    let mut started = starter.sandboxes.for_program(size).await?;
    started.send_call(&call).await?;
    let Started {
        helper,
        stdin: helpers_stdin,
        stdout: from_out,
        stderr: from_err,
        reports,
        gate,
        terminal: at_terminal,
        view,
        ..
    } = started;
    // At a terminal the program reads the terminal, and the helper's stdin has served.
    let (input, resizing) = match (at_terminal, terminal) {
        (Some(at), Some(size)) => {
            drop(helpers_stdin);
            let resizing = follow(at.as_raw_fd(), size);
            (Box::new(at) as Sink, Some(resizing))
        }
        _ => (Box::new(helpers_stdin) as Sink, None),
    };
    let proxy = open_gate(starter, gate, credentials, &held, timeout).await?;
    let mut reported = Vec::new();
    let output = async {
        let ((), (), told) = tokio::join!(
            relay(from_out, stdout),
            relay(from_err, stderr),
            read_reports(reports)
        );
        reported = told;
    };
    let driven = match resizing {
        Some(resizing) => {
            tokio::select! {
                driven = drive(&helper, stdin, input, output, &mut signals, timeout) => driven,
                never = resizing => match never {},
            }
        }
        None => drive(&helper, stdin, input, output, &mut signals, timeout).await,
    };
    if let Some(traffic) = proxy.map(|p| p.end()) {
        traffic.count_in(&held.usage);
    }
    // The tree is gone: the helper exits at once.
    let _ = tokio::time::timeout(SETUP_WAIT, helper.ended()).await;
    let gone = !helper.running();
    let whose = Settling {
        call: &held.call_id,
        tool: &starter.config.name,
        limit: held.limits.changes,
    };
    let ended = outcome(driven, reported, &held);
    warden_tx::settle::settle_program(view, gone, whose, ended)
}

/// The gate of a program whose sandbox has one: served, the program's own until its deadline
/// (or for good, without one).
async fn open_gate(
    starter: &Starter,
    socket: Option<UnixStream>,
    credentials: Credentials,
    held: &Held,
    timeout: Option<Duration>,
) -> Result<Option<Proxy>, ToolError> {
    let Some(socket) = socket else {
        return Ok(None);
    };
    let by = Instant::now() + SETUP_WAIT;
    let proxy = starter.serve_gate(socket, by, credentials).await?;
    if let Some(proxy) = &proxy {
        let ends = Instant::now() + timeout.unwrap_or(NEVER);
        proxy.begin(Scope {
            denials: held.denials.clone(),
            deadline: ends.into_std(),
        });
    }
    Ok(proxy)
}

/// How the program ended, from how driving it ended and what its sandbox reported (its
/// usage goes to `held`'s meter).
fn outcome(driven: Driven, reported: Vec<Report>, held: &Held) -> Result<Exit, ToolError> {
    let mut exit = None;
    for report in reported {
        match report {
            Report::Failed { message, .. } => return Err(unavailable(&message)),
            Report::Used {
                cpu_ms,
                max_rss_bytes,
            } => held.usage.record(|u| {
                u.cpu_ms = Some(cpu_ms);
                u.peak_memory_bytes = Some(max_rss_bytes);
            }),
            Report::Exited {
                code: Some(code), ..
            } => exit = Some(Exit::Code(code)),
            Report::Exited {
                signal: Some(signal),
                ..
            } => exit = Some(Exit::Signal(signal)),
            Report::Exited { .. } | Report::Ready(_) | Report::Init { .. } => {}
        }
    }
    match (driven, exit) {
        (Driven::TimedOut, _) => Ok(Exit::TimedOut),
        (Driven::Killed, _) => Ok(Exit::Signal(nix::libc::SIGKILL)),
        (Driven::Ended, Some(exit)) => Ok(exit),
        (Driven::Ended, None) => Err(unavailable(
            "the host sandbox ended without saying how the program ended",
        )),
    }
}

impl Running for Forked {
    fn signal(&self, signal: i32) -> BoxFuture<'_, ()> {
        Forked::signal(self, signal);
        Box::pin(async {})
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Forked::kill(self);
        Box::pin(async {})
    }
}

/// Follows `size` onto the terminal `fd` (warden's side, which outlives this) until dropped.
async fn follow(
    fd: std::os::fd::RawFd,
    mut size: tokio::sync::watch::Receiver<warden_core::WindowSize>,
) -> std::convert::Infallible {
    let terminal = RawTerminal(fd);
    loop {
        if size.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        let now = *size.borrow_and_update();
        resize(&terminal, now);
    }
}

/// A terminal's descriptor, borrowed for [`resize`].
struct RawTerminal(std::os::fd::RawFd);

impl AsRawFd for RawTerminal {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Every report line until the helper and `init` close the descriptor.
async fn read_reports(reports: impl AsyncRead + Unpin) -> Vec<Report> {
    let mut bytes = Vec::new();
    // Reports are a few lines; a runaway helper cannot make this grow far.
    let _ = reports.take(1 << 20).read_to_end(&mut bytes).await;
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}
