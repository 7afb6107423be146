//! `warden serve`: the toolbox as an MCP server, over stdio or streamable HTTP.

use crate::context;
use anyhow::{Context as _, Result};
use clap::Args;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use warden::Warden;
use warden_core::{Admission, HumanDuration};
use warden_mcp::{ConnectionLimits, HttpOptions, HttpServer, Loader, Options, Server};

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Serve streamable HTTP on this address (for example 127.0.0.1:8080; port 0 picks a free
    /// one) instead of stdio. The endpoint is /mcp.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// The bearer token HTTP clients must send [default: a random one, printed on stderr].
    #[arg(long, env = "WARDEN_MCP_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Also accept requests from this browser Origin (`scheme://host:port`; repeatable).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// Listen on an address that is not loopback.
    #[arg(long)]
    allow_remote: bool,
    /// Close an HTTP connection that has not sent a whole request head this long after it
    /// opened or had its last answer (idle, or sending slowly).
    #[arg(long, value_name = "DURATION",
          default_value_t = HumanDuration(ConnectionLimits::default().header_timeout))]
    header_timeout: HumanDuration,
    /// At most this many HTTP connections that have not yet sent the token; past them, the one
    /// that has sent nothing longest is closed to make room, once it has been silent a second.
    #[arg(long, value_name = "N",
          default_value_t = ConnectionLimits::default().unauthenticated)]
    max_unauthenticated: usize,
    /// Calls that may wait, across the server, while as many run as warden runs at once; over
    /// HTTP one more is answered `unavailable`, over stdio the server reads no further until
    /// a call has answered.
    #[arg(long, value_name = "N", default_value_t = Options::QUEUE)]
    max_queued_calls: usize,
    /// After SIGTERM or SIGINT, how long the calls in flight have to answer before they are
    /// cancelled (each answered and logged either way).
    #[arg(long, value_name = "DURATION",
          default_value_t = HumanDuration(Options::DRAIN))]
    drain: HumanDuration,
    /// How long an HTTP connection without the token must have sent nothing before it may be
    /// closed to make room for another (at --max-unauthenticated, or with no descriptors left).
    #[arg(long, value_name = "DURATION",
          default_value_t = HumanDuration(ConnectionLimits::default().silence))]
    unauthenticated_silence: HumanDuration,
    /// Over HTTP, end a session (its shells and containers) once none of its requests has
    /// been answered for this long; 0: never (its client ends it with a DELETE). A client may
    /// set its session's own limit: `_meta["warden/idle"]` (seconds) at `initialize`.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    session_idle: HumanDuration,
    /// Over HTTP, stop the server once it has held no session and had no request for this
    /// long; 0: never (until SIGTERM).
    #[arg(long, value_name = "DURATION", default_value = "0", requires = "http")]
    stop_idle: HumanDuration,
    /// Once listening over HTTP, write `{"url", "token", "pid"}` to this file, readable by
    /// this user alone (0600), for a client that started the server to find it.
    #[arg(long, value_name = "FILE", requires = "http")]
    address_file: Option<PathBuf>,
    /// Also serve `warden console` on this loopback address (127.0.0.1:0 when none is given;
    /// its URL goes to stderr), where a person decides the calls waiting for review, in place
    /// of the clients.
    #[arg(long, value_name = "ADDRESS", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    console: Option<SocketAddr>,
}

pub(crate) fn serve(ctx: Warden, args: ServeArgs) -> Result<ExitCode> {
    let ctx = Arc::new(ctx);
    raise_open_files_limit();
    // The dispatcher is built here rather than by `Context::dispatcher`: over stdio a terminal
    // reviewer would read the MCP channel, and a reload needs a dispatcher per toolbox.
    let backends = ctx.backends();
    let protected = ctx.protected();
    let dir = ctx.toolbox.clone();
    let loading = ctx.loading;
    let loader: Loader = Arc::new(move || backends.load(&dir, &protected, loading));
    // Each record is in the file before its call answers, so a signal loses none.
    let log = Arc::new(ctx.open_call_log()?);
    ctx.snapshots.sweep();
    let options = Options {
        admission: Admission::default(),
        call_log: Some(log),
        watch: Some(ctx.toolbox.clone()),
        queue: args.max_queued_calls,
        drain: args.drain.0,
        transactions: Some(ctx.transactions.clone()),
        snapshots: Some(ctx.snapshots.clone()),
        policy_loader: Some({
            let backends = ctx.backends();
            Arc::new(move |policy| backends.load_one(policy))
        }),
        ..Options::default()
    };
    let reviews = args
        .console
        .map(|_| Arc::new(warden_console::Reviews::default()));
    let options = Options {
        reviewer: reviews
            .clone()
            .map(|r| -> Arc<dyn warden_core::Reviewer> { r }),
        ..options
    };
    let drain = options.drain;
    let server = Server::new(loader, options)
        .with_context(|| format!("loading the toolbox {}", ctx.toolbox.display()))?;
    let runtime = context::runtime()?;
    let served = runtime.block_on(async {
        if let (Some(address), Some(reviews)) = (args.console, reviews) {
            let console = warden_console::Console::bind(address)
                .await
                .context("starting the console")?;
            eprintln!("warden console: {}", console.url());
            let data = Arc::new(crate::console::Data(ctx.clone()));
            tokio::spawn(console.serve(data, Some(reviews)));
        }
        let stopper = server.clone();
        let serving = async {
            match args.http {
                None => Ok(server.serve_stdio().await?),
                Some(addr) => serve_http(server, addr, args).await,
            }
        };
        tokio::pin!(serving);
        // The first signal drains; serving returns once the calls in flight have answered.
        tokio::select! {
            served = &mut serving => return served,
            signal = signalled() => {
                eprintln!(
                    "warden: {}: draining: no new calls; the calls in flight have up to {} to \
                     answer, then are cancelled",
                    signal?,
                    HumanDuration(drain)
                );
                stopper.stop();
            }
        }
        // A second one does not wait.
        tokio::select! {
            served = &mut serving => {
                if served.is_ok() {
                    eprintln!("warden: every call answered; stopped");
                }
                served
            }
            signal = signalled() => {
                eprintln!("warden: {} again: stopping without waiting", signal?);
                Ok(())
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    served?;
    Ok(ExitCode::SUCCESS)
}

/// A server holds a descriptor or more per connection and per call in flight: its soft limit
/// on open files (1024 on most systems) goes up to the hard one, as a server's should. Its
/// sandboxes get their policies' own limits, whatever warden's.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let raised = getrlimit(Resource::RLIMIT_NOFILE).and_then(|(soft, hard)| {
        if soft < hard {
            setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map(|()| Some((soft, hard)))
        } else {
            Ok(None)
        }
    });
    match raised {
        Ok(Some((soft, hard))) => tracing::debug!(soft, hard, "raised the open files limit"),
        Ok(None) => {}
        Err(e) => tracing::warn!("could not raise the open files limit: {e}"),
    }
}

/// Waits for SIGTERM or SIGINT, and names it.
async fn signalled() -> Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

async fn serve_http(server: Server, addr: SocketAddr, args: ServeArgs) -> Result<()> {
    let (token, generated) = match args.token {
        Some(t) => (t, false),
        None => (warden_mcp::generate_token()?, true),
    };
    let http = HttpServer::bind(HttpOptions {
        addr,
        token: token.clone(),
        allow_origins: args.allow_origins,
        allow_remote: args.allow_remote,
        limits: ConnectionLimits {
            header_timeout: args.header_timeout.0,
            unauthenticated: args.max_unauthenticated,
            silence: args.unauthenticated_silence.0,
        },
        session_idle: Some(args.session_idle.0).filter(|d| !d.is_zero()),
        stop_idle: Some(args.stop_idle.0).filter(|d| !d.is_zero()),
    })
    .await?;
    eprintln!("warden: serving MCP over streamable HTTP at {}", http.url());
    match &args.address_file {
        Some(path) => write_address_file(path, &http.url(), &token)
            .with_context(|| format!("writing the address file {}", path.display()))?,
        None if generated => eprintln!("warden: bearer token: {token}"),
        None => {}
    }
    http.run(server).await?;
    Ok(())
}

/// Writes the server's URL, token and process id to `path`, readable and writable by this
/// user alone: whole or not at all (a temporary file beside it, renamed into place), so a
/// client polling for it never reads half of it.
fn write_address_file(path: &Path, url: &str, token: &str) -> Result<()> {
    let text = serde_json::json!({"url": url, "token": token, "pid": std::process::id()});
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(text.to_string().as_bytes())?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    Ok(())
}
