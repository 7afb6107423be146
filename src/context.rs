//! What the commands share beyond the library: warden as a person at a terminal sees it.

use anyhow::{Context as _, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden::{Dispatcher, RunLimits, Warden};
use warden_net::Egress;

/// The call log the command line names (`--call-log`) and how it rotates.
pub(crate) struct CallLogFlags {
    pub(crate) path: Option<PathBuf>,
    pub(crate) rotation: warden_core::Rotation,
    /// The key that seals the log (`--ledger-key`), and where seals' heads go.
    pub(crate) ledger_key: Option<PathBuf>,
    pub(crate) syslog: Option<PathBuf>,
}

/// warden's places from the command line's flags, telling a person on a terminal about
/// compiles.
pub(crate) fn warden(
    toolbox: PathBuf,
    home: Option<PathBuf>,
    cache: Option<PathBuf>,
    call_log: CallLogFlags,
    egress: Egress,
) -> Result<Warden> {
    let hook: warden_wasm::CompileHook = Arc::new(|path: &Path| {
        if std::io::stderr().is_terminal() {
            eprintln!(
                "compiling {} (once; later runs load it from the cache)…",
                path.display()
            );
        }
    });
    let mut builder = Warden::builder(toolbox)
        .cache(cache)
        .call_log(call_log.path)
        .call_log_rotation(call_log.rotation)
        .ledger(call_log.ledger_key, call_log.syslog)
        .egress(egress)
        .on_compile(hook);
    if let Some(home) = home {
        builder = builder.home(home);
    }
    Ok(builder.build()?)
}

/// A dispatcher over the toolbox that logs every call and asks a person on a terminal.
pub(crate) fn dispatcher(ctx: &Warden, run: RunLimits) -> Result<Dispatcher> {
    Ok(reviewed(ctx.dispatcher(run)?))
}

/// As [`dispatcher`], for a call of `tool` alone ([`Warden::dispatcher_for`]).
pub(crate) fn dispatcher_for(ctx: &Warden, tool: &str, run: RunLimits) -> Result<Dispatcher> {
    Ok(reviewed(ctx.dispatcher_for(tool, run)?))
}

/// `d`, its reviewer the terminal's where there is one.
fn reviewed(d: Dispatcher) -> Dispatcher {
    match crate::review::TerminalReviewer::if_terminal() {
        Some(r) => d.reviewer(r),
        None => d,
    }
}

/// The async runtime for one call: on this thread, so that a whole process that makes a single
/// call starts no worker threads (spawning them is a measurable share of `warden call`).
pub(crate) fn one_call_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The async runtime the commands use.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}
