//! `warden`: runs the tool calls of AI agents in sandboxes. The CLI parses and prints; the
//! work happens in the libraries.

/// `println!` for output that may go to a pipe closed early (`warden audit | head`): a
/// closed reader is not an error of warden's, so the rest is dropped and the work goes on.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod add;
mod agent;
mod audit;
mod batch;
mod console;
mod context;
mod demo;
mod exec;
mod install;
mod ledger;
mod oci;
mod progress;
mod pull;
mod review;
mod serve;
mod undo;
mod usage;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use warden::Warden;
use warden_core::shown::{Escaped, escape_json};
use warden_core::{RunLimits, Status, ToolCall, ToolMessage};
use warden_telemetry::Telemetry;

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "Runs the tool calls of AI agents in sandboxes"
)]
struct Cli {
    /// The folder of policy files.
    #[arg(
        long,
        global = true,
        env = "WARDEN_TOOLBOX",
        default_value = "policies"
    )]
    toolbox: PathBuf,
    /// Where warden keeps its component store and compile cache
    /// [default: $XDG_DATA_HOME/warden or ~/.local/share/warden].
    #[arg(long, global = true, env = "WARDEN_HOME")]
    home: Option<PathBuf>,
    /// The compile cache [default: HOME/cache].
    #[arg(long, global = true, env = "WARDEN_CACHE")]
    cache: Option<PathBuf>,
    /// The call log, one JSON line per call [default: HOME/calls.jsonl].
    #[arg(long, global = true, env = "WARDEN_CALL_LOG")]
    call_log: Option<PathBuf>,
    /// The size past which the call log is rotated (to NAME.1, NAME.2, …).
    #[arg(
        long,
        global = true,
        env = "WARDEN_CALL_LOG_MAX_SIZE",
        default_value = "64MiB"
    )]
    call_log_max_size: warden_core::ByteSize,
    /// Rotated call-log files kept; the oldest beyond them is removed.
    #[arg(long, global = true, env = "WARDEN_CALL_LOG_KEEP", default_value_t = 4)]
    call_log_keep: u32,
    /// The key that seals the call log's chain, made there at the first seal when there is
    /// none [default: HOME/ledger.key]; a key kept outside warden's home is the strong setup
    /// (docs/ledger.md).
    #[arg(long, global = true, env = "WARDEN_LEDGER_KEY", value_name = "PATH")]
    ledger_key: Option<PathBuf>,
    /// The syslog socket each seal's head is sent to, so that a log cut short is caught
    /// elsewhere; `none` sends it nowhere.
    #[arg(
        long,
        global = true,
        env = "WARDEN_LEDGER_SYSLOG",
        value_name = "SOCKET",
        default_value = "/dev/log"
    )]
    ledger_syslog: PathBuf,
    /// Pin a host name to addresses for tools' HTTP requests, like curl's --resolve:
    /// NAME:ADDRESS[,ADDRESS…]. Repeatable; WARDEN_RESOLVE takes a space-separated list.
    #[arg(
        long = "resolve",
        global = true,
        env = "WARDEN_RESOLVE",
        value_delimiter = ' ',
        value_name = "NAME:ADDR"
    )]
    resolve: Vec<String>,
    /// A PEM file of CA certificates that warden also trusts when it speaks TLS to a server
    /// itself (wasm tools' HTTPS; shells' HTTPS to a host that carries a credential): a
    /// private PKI. Never trusted by sandboxes, and never warden's own sandbox CAs.
    #[arg(long, global = true, env = "WARDEN_UPSTREAM_ROOTS", value_name = "PEM")]
    upstream_roots: Option<PathBuf>,
    /// Export traces and metrics over OTLP (HTTP/protobuf) to this base URL, as
    /// OTEL_EXPORTER_OTLP_ENDPOINT does (for example http://127.0.0.1:4318). Off by default;
    /// the other OTEL_* variables apply (docs/telemetry.md).
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Refuse the whole toolbox when any policy in it does not load. Without it, the tools of
    /// every policy that loads are served and each one that does not is reported (`warden
    /// tools` and `warden audit` list them, and a line on stderr names file, line and fix).
    /// WARDEN_STRICT takes 1, true, yes or on (and 0, false, no or off).
    #[arg(
        long,
        global = true,
        env = "WARDEN_STRICT",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    strict: bool,
    #[command(subcommand)]
    command: Command,
}

/// `warden snapshot …`.
#[derive(Subcommand)]
enum SnapshotCommand {
    /// List the snapshots of sessions' sandboxes kept in this home, oldest first.
    List,
    /// Delete a snapshot.
    Delete {
        #[arg(value_name = "ID")]
        id: String,
    },
}

/// `warden log …`.
#[derive(Subcommand)]
enum LogCommand {
    /// Verify the call log with its rotated files: exit 0 when whole, 1 naming the first
    /// problem.
    Verify {
        /// The public key the seals must be made with [default: the home key's, beside it as
        /// KEY.pub; pin one kept elsewhere].
        #[arg(long, value_name = "PUB")]
        key: Option<PathBuf>,
        /// A head exported earlier (`SEQ:HASH`, as syslog got it), which the log must still
        /// hold: a log cut short after it is caught.
        #[arg(long, value_name = "SEQ:HASH")]
        head: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Print the call log with its rotated files, oldest first, as records a SIEM takes: one
    /// JSON object a line.
    Export {
        #[arg(long, value_enum)]
        format: ExportFormat,
    },
}

/// What `warden log export` writes.
#[derive(Clone, Copy, ValueEnum)]
enum ExportFormat {
    /// The Open Cybersecurity Schema Framework (the version `warden_ledger::ocsf` pins).
    Ocsf,
}

#[derive(Subcommand)]
#[command(defer = true)]
enum Command {
    /// Store a component and write a deny-by-default policy for it.
    Add(add::AddArgs),
    /// Look for a new version of a tool added from a registry, verify it, and pin it.
    Pull(pull::PullToolArgs),
    /// Publish a wasm tool's component to an OCI registry, its grants and limits beside it.
    Push(oci::PushArgs),
    /// Write a key pair that signs what `warden push` publishes.
    Keygen(oci::KeygenArgs),
    /// Re-pin policies to their components after a rebuild.
    Pin {
        /// Policy files or tool names; all policies when none is given.
        targets: Vec<String>,
    },
    /// List the tools with their schemas.
    Tools {
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its ToolMessage as JSON.
    Call {
        tool: String,
        /// The arguments, a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
        #[arg(long, value_enum, default_value_t = Format::Langchain)]
        format: Format,
    },
    /// Run a whole program in the sandbox a call of a docker or host tool gets, its stdin,
    /// stdout and stderr passed through and its exit status warden's (125: warden failed).
    Exec(exec::ExecArgs),
    /// Put back what a call changed in its read-write roots (warden's `call_id`, from its
    /// answer's details), if nothing since changed the same paths; --list shows the calls.
    Undo {
        #[arg(value_name = "CALL_ID", required_unless_present = "list")]
        call_id: Option<String>,
        /// List the calls that changed roots, and whether each can be undone.
        #[arg(long, conflicts_with = "call_id")]
        list: bool,
    },
    /// Check the call log's chain and seals: the first record edited, removed, reordered or
    /// inserted is named by file, line and call.
    #[command(subcommand)]
    Log(LogCommand),
    /// The snapshots clients took of their sessions' sandboxes (`warden/snapshot` over MCP,
    /// `WardenSandbox.snapshot()`): list or delete them.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Undo every call committed after CALL_ID, newest first (CALL_ID itself stays).
    Rewind {
        #[arg(long = "to", value_name = "CALL_ID")]
        to: String,
    },
    /// Run one model turn's tool calls as a batch and print their ToolMessages in order.
    Run {
        /// An OpenAI assistant message, a LangChain AIMessage, or a list of calls (JSON);
        /// `-` or nothing reads stdin.
        batch: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Langchain)]
        format: Format,
        /// Cancel the rest of the batch at the first failure (LangGraph's behaviour).
        #[arg(long)]
        fail_fast: bool,
        /// At most this many calls in the run.
        #[arg(long)]
        max_calls: Option<u32>,
        /// At most this many calls of any one tool.
        #[arg(long)]
        max_calls_per_tool: Option<u32>,
    },
    /// Show what every tool may touch, and what deserves a look; with --usage, what the
    /// call log says tools did and which grants they never used.
    Audit {
        #[arg(long)]
        json: bool,
        /// Read the call log (all its rotated files): per-tool calls, errors, wall time, CPU,
        /// memory and bytes; grants never used, with the policy lines to remove; destinations
        /// refused again and again.
        #[arg(long)]
        usage: bool,
        /// With --usage: only the calls of this long before now (`24h`, `7d`, `30m`).
        #[arg(long, requires = "usage", value_name = "DURATION")]
        since: Option<warden_core::HumanDuration>,
    },
    /// Build the example tools and take a short tour (needs a checkout of warden's source).
    Demo {
        /// The checkout of warden whose example tools to build and run
        /// [default: the current folder or the nearest one above it holding guest-sdk/ and
        /// policies/].
        #[arg(long, env = "WARDEN_ROOT", value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Serve the toolbox over MCP: stdio, or streamable HTTP with --http.
    Serve(serve::ServeArgs),
    /// Serve a page on loopback that shows every tool's grants and limits, the calls as they
    /// happen and whether the ledger verifies; its URL, with a token, goes to stderr.
    Console {
        /// Where to listen: a loopback address (port 0 picks one).
        #[arg(long, default_value = "127.0.0.1:0")]
        address: std::net::SocketAddr,
    },
    /// Build warden's Docker sandbox image offline: a static busybox (small, the default), or
    /// with --debian a Debian image with bash, python3 and pip, curl, wget and git, from this
    /// machine's apt sources.
    SandboxImage {
        /// A statically linked busybox (Debian: `apt-get install busybox-static`).
        #[arg(long, default_value = warden_docker::BUSYBOX, conflicts_with = "debian")]
        busybox: PathBuf,
        /// Build the Debian image with mmdebstrap (`apt-get install mmdebstrap`), tagged
        /// NAME:<recipe digest> and NAME:latest; skipped when that digest is already built.
        #[arg(long)]
        debian: bool,
        /// With --debian: build even when the recipe's tag is on the engine (newer packages).
        #[arg(long, requires = "debian")]
        rebuild: bool,
        /// The image's name [default: warden-sandbox:latest; with --debian the repository,
        /// warden-sandbox-debian].
        #[arg(long)]
        tag: Option<String>,
    },
    /// Run an agent: a model on an OpenAI-compatible endpoint (OPENAI_BASE_URL,
    /// OPENAI_API_KEY) calls the toolbox's tools until it answers.
    Agent(Box<agent::AgentArgs>),
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Langchain,
    Openai,
}

impl Format {
    fn render(self, message: &ToolMessage) -> warden_core::Rendered<'_> {
        match self {
            Format::Langchain => message.langchain(),
            Format::Openai => message.openai(),
        }
    }
}

fn main() -> ExitCode {
    // Before anything else, while this process has one thread: the helper forks.
    warden::run_host_helper_if_asked();
    let cli = Cli::parse();
    // Before any async runtime: the exporters' HTTP client blocks on threads of its own.
    let telemetry = match telemetry(cli.otlp_endpoint.as_deref()) {
        Ok(telemetry) => telemetry,
        Err(e) => return failed(&e.into()),
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours for a person at a terminal, not escape codes in a parent's pipe or a file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        );
    tracing_subscriber::registry()
        .with(logs)
        .with(telemetry.as_ref().and_then(Telemetry::layer))
        .init();
    let code = run(cli);
    // Whatever the command did, what is queued goes out (within a bounded time).
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code.unwrap_or_else(|e| failed(&e))
}

fn failed(e: &anyhow::Error) -> ExitCode {
    // An error can quote what a model or a file chose (a tool's name, a path).
    eprintln!("error: {}", Escaped(format_args!("{e:#}")));
    ExitCode::from(2)
}

/// OTLP export, when `--otlp-endpoint` or the `OTEL_*` variables ask for it.
fn telemetry(endpoint: Option<&str>) -> Result<Option<Telemetry>, warden_telemetry::Error> {
    let Some(config) = warden_telemetry::Config::new(endpoint)? else {
        return Ok(None);
    };
    let telemetry = Telemetry::start(&config)?;
    warden_core::export_calls(telemetry.calls());
    Ok(Some(telemetry))
}

fn run(cli: Cli) -> Result<ExitCode> {
    let mut egress = warden_net::Egress::new(warden_net::Resolver::with_overrides(&cli.resolve)?);
    if let Some(path) = &cli.upstream_roots {
        let pem = std::fs::read(path)
            .with_context(|| format!("reading --upstream-roots {}", path.display()))?;
        egress = egress
            .with_roots_pem(&pem)
            .with_context(|| format!("--upstream-roots {}", path.display()))?;
    }
    let call_log = context::CallLogFlags {
        path: cli.call_log,
        rotation: warden_core::Rotation {
            max_bytes: cli.call_log_max_size.0,
            keep: cli.call_log_keep,
        },
        ledger_key: cli.ledger_key,
        syslog: Some(cli.ledger_syslog).filter(|s| s.as_os_str() != "none"),
    };
    let mut ctx = context::warden(cli.toolbox, cli.home, cli.cache, call_log, egress)?;
    // Commands that make one call or none set up no pool sized for a server's calls, and no
    // host sandboxes ahead of calls that will not come (`Warden::backends`).
    if !matches!(
        cli.command,
        Command::Run { .. } | Command::Serve(_) | Command::Agent(_) | Command::Demo { .. }
    ) {
        ctx.workload = warden_wasm::Workload::OneShot;
    }
    if cli.strict {
        ctx.loading = warden_core::Loading::Strict;
    }
    match cli.command {
        Command::Add(args) => add::add(&ctx, args),
        Command::Push(args) => oci::push(&ctx, &args),
        Command::Pull(args) => pull::pull(&ctx, &args),
        Command::Keygen(args) => oci::keygen(&args),
        Command::Pin { targets } => add::pin(&ctx, &targets),
        Command::Tools { json } => tools(&ctx, json),
        Command::Exec(args) => exec::exec(&ctx, args),
        Command::Undo { list: true, .. } => undo::list(&ctx),
        Command::Undo { call_id, .. } => undo::undo(&ctx, call_id.as_deref().unwrap_or_default()),
        Command::Rewind { to } => undo::rewind(&ctx, &to),
        Command::Snapshot(SnapshotCommand::List) => undo::snapshots(&ctx),
        Command::Snapshot(SnapshotCommand::Delete { id }) => undo::delete_snapshot(&ctx, &id),
        Command::Log(LogCommand::Verify { key, head, json }) => {
            ledger::verify(&ctx, key.as_deref(), head.as_deref(), json)
        }
        Command::Log(LogCommand::Export {
            format: ExportFormat::Ocsf,
        }) => ledger::export_ocsf(&ctx),
        Command::Call {
            tool,
            arguments,
            format,
        } => call(&ctx, tool, arguments, format),
        Command::Run {
            batch,
            format,
            fail_fast,
            max_calls,
            max_calls_per_tool,
        } => {
            let limits = RunLimits {
                max_calls,
                max_calls_per_tool,
            };
            run_batch(&ctx, batch, format, fail_fast, limits)
        }
        Command::Audit {
            json, usage: false, ..
        } => audit::audit(&ctx, json, &[]),
        Command::Audit {
            json,
            usage: true,
            since,
        } => usage::usage(&ctx, since, json),
        Command::Demo { root } => demo::demo(&ctx, root.as_deref()),
        Command::Serve(args) => serve::serve(ctx, args),
        Command::Console { address } => console::console(ctx, address),
        Command::SandboxImage {
            busybox,
            debian: false,
            tag,
            ..
        } => {
            let tag = tag.as_deref().unwrap_or(warden_docker::SANDBOX_IMAGE);
            sandbox_image(&ctx, &busybox, tag)
        }
        Command::SandboxImage {
            debian: true,
            rebuild,
            tag,
            ..
        } => {
            let repository = tag.as_deref().unwrap_or(warden_docker::DEBIAN_REPOSITORY);
            debian_image(&ctx, repository, rebuild)
        }
        Command::Agent(args) => agent::agent(&ctx, *args),
    }
}

/// A tool as `warden tools --json` lists it: its spec, and whether a person reviews each call
/// (a parent that cannot ask one, such as langchain-warden's shell, says so up front).
#[derive(serde::Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    spec: &'a warden_core::ToolSpec,
    review_required: bool,
    /// A person decides whether each call's changes are kept.
    review_changes: bool,
}

impl<'a> Listed<'a> {
    fn of(tool: &'a warden_core::Tool) -> Self {
        Listed {
            spec: &tool.spec,
            review_required: tool.review_required,
            review_changes: tool.review_changes,
        }
    }
}

/// `warden tools`: the tools served, then the policies that did not load (the JSON list holds
/// the tools only; the policies left out are on stderr, as every command reports them).
fn tools(ctx: &Warden, json: bool) -> Result<ExitCode> {
    let toolbox = ctx.load()?;
    if json {
        let listed: Vec<_> = toolbox.tools().map(Listed::of).collect();
        outln!("{}", escape_json(&serde_json::to_string_pretty(&listed)?));
        return Ok(ExitCode::SUCCESS);
    }
    for tool in toolbox.tools() {
        let first = tool.spec.description.lines().next().unwrap_or_default();
        outln!("{:<24} {}", Escaped(&tool.spec.name), Escaped(first));
        let schema = tool.spec.input_schema.to_string();
        outln!("{:<24} {}", "", escape_json(&schema));
    }
    if !toolbox.broken().is_empty() {
        outln!();
        outln!("not loaded (their tools are not served; --strict refuses the toolbox instead):");
        for broken in toolbox.broken() {
            outln!("  {}", Escaped(&broken.error.to_string()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn call(ctx: &Warden, tool: String, arguments: String, format: Format) -> Result<ExitCode> {
    let dispatcher = context::dispatcher_for(ctx, &tool, RunLimits::default())?;
    let runtime = context::one_call_runtime()?;
    let call = ToolCall {
        id: "call-1".into(),
        name: tool,
        arguments,
    };
    // One call is one session: its container (and shell) end with it.
    let message = runtime.block_on(async {
        let message = dispatcher.call(call).await;
        dispatcher.close().await;
        message
    });
    let text = serde_json::to_string_pretty(&format.render(&message)).context("printing")?;
    outln!("{}", escape_json(&text));
    Ok(match message.status {
        Status::Success => ExitCode::SUCCESS,
        Status::Error => ExitCode::from(1),
    })
}

fn run_batch(
    ctx: &Warden,
    batch: Option<PathBuf>,
    format: Format,
    fail_fast: bool,
    limits: RunLimits,
) -> Result<ExitCode> {
    let text = match batch.as_deref() {
        None => read_stdin()?,
        Some(p) if p.as_os_str() == "-" => read_stdin()?,
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
    };
    let calls = batch::parse(&text)?;
    let dispatcher = context::dispatcher(ctx, limits)?.fail_fast(fail_fast);
    let runtime = context::runtime()?;
    // One batch file is one session.
    let messages = runtime.block_on(async {
        // On a worker thread, not this one: the batch's tasks are then spawned onto that
        // worker's own queue, not through the runtime's shared queue with a wake-up of a
        // parked worker each, and a call's end wakes no thread outside the runtime.
        let batch = dispatcher.clone();
        let messages = tokio::spawn(async move { batch.dispatch(calls).await }).await;
        dispatcher.close().await;
        messages
    });
    // A panic in the batch's own task (its calls' are answered) goes on as it would have here.
    let messages = match messages.map_err(tokio::task::JoinError::try_into_panic) {
        Ok(messages) => messages,
        Err(Ok(panic)) => std::panic::resume_unwind(panic),
        Err(Err(e)) => anyhow::bail!("the batch did not finish: {e}"),
    };
    eprintln!("{}", dispatcher.usage_so_far());
    let out: Vec<_> = messages.iter().map(|m| format.render(m)).collect();
    outln!("{}", escape_json(&serde_json::to_string_pretty(&out)?));
    let all_ok = messages.iter().all(|m| m.status == Status::Success);
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn sandbox_image(ctx: &Warden, busybox: &std::path::Path, tag: &str) -> Result<ExitCode> {
    let runtime = context::runtime()?;
    let engine = ctx.docker.engine().clone();
    let id = runtime.block_on(warden_docker::build_sandbox_image(&engine, busybox, tag))?;
    outln!("built {tag} ({id}) from {}", busybox.display());
    Ok(ExitCode::SUCCESS)
}

fn debian_image(ctx: &Warden, repository: &str, rebuild: bool) -> Result<ExitCode> {
    use std::io::{IsTerminal, Write};
    use warden_docker::Progress;
    let runtime = context::runtime()?;
    let engine = ctx.docker.engine().clone();
    let recipe = warden_docker::DebianRecipe::from_machine()?;
    let terminal = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let shown = std::sync::atomic::AtomicU64::new(u64::MAX);
    let progress = |p: Progress<'_>| match p {
        Progress::Step(line) => eprintln!("{line}"),
        Progress::Bootstrap(line) => {
            eprintln!("  [{:>3}s] {line}", started.elapsed().as_secs());
        }
        Progress::Import { sent, total } => {
            // On a terminal one line, rewritten; elsewhere a line at most per quarter.
            let percent = (sent * 100).checked_div(total).unwrap_or(100);
            let step = if terminal { percent } else { percent / 25 * 25 };
            if shown.swap(step, std::sync::atomic::Ordering::Relaxed) == step {
                return;
            }
            let mb = sent / 1_000_000;
            if terminal {
                let end = if sent >= total { "\n" } else { "" };
                eprint!("\r  {mb} MB sent ({percent}%){end}");
                let _ = std::io::stderr().flush();
            } else {
                eprintln!("  {mb} MB sent ({step}%)");
            }
        }
    };
    let image = runtime.block_on(warden_docker::build_debian_image(
        &engine, &recipe, repository, rebuild, &progress,
    ))?;
    let mb = |bytes: u64| bytes / 1_000_000;
    match image.built {
        Some(times) => outln!(
            "built {} (also {}; {}, {} MB) in {:.0} s: root filesystem {:.0} s ({} MB tar), \
             import {:.0} s",
            image.tag,
            image.latest,
            image.id,
            mb(image.size),
            (times.bootstrap + times.import).as_secs_f64(),
            times.bootstrap.as_secs_f64(),
            mb(times.tar_bytes),
            times.import.as_secs_f64(),
        ),
        None => outln!(
            "{} is already on the engine ({}, {} MB, built {}): not rebuilt (--rebuild builds \
             it afresh); {} names it",
            image.tag,
            image.id,
            mb(image.size),
            image.created,
            image.latest,
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn read_stdin() -> Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the batch from stdin")?;
    Ok(text)
}
