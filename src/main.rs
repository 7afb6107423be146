//! `warden`: runs the tool calls of AI agents in sandboxes. The CLI parses and prints; the
//! work happens in the libraries.

mod add;
mod audit;
mod context;
mod demo;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use context::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use warden_core::{Status, ToolCall, ToolMessage};

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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Store a component and write a deny-by-default policy for it.
    Add(add::AddArgs),
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
    /// Show what every tool may touch, and what deserves a look.
    Audit {
        #[arg(long)]
        json: bool,
    },
    /// Build the example tools and take a short tour.
    Demo,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Langchain,
    Openai,
}

impl Format {
    fn render(self, message: &ToolMessage) -> serde_json::Value {
        match self {
            Format::Langchain => message.to_langchain(),
            Format::Openai => message.to_openai(),
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let ctx = Context::new(cli.toolbox, cli.home, cli.cache)?;
    match cli.command {
        Command::Add(args) => add::add(&ctx, args),
        Command::Pin { targets } => add::pin(&ctx, &targets),
        Command::Tools { json } => tools(&ctx, json),
        Command::Call {
            tool,
            arguments,
            format,
        } => call(&ctx, tool, arguments, format),
        Command::Audit { json } => audit::audit(&ctx, json),
        Command::Demo => demo::demo(&ctx),
    }
}

fn tools(ctx: &Context, json: bool) -> Result<ExitCode> {
    let toolbox = ctx.load()?;
    if json {
        let specs: Vec<_> = toolbox.tools().map(|t| &t.spec).collect();
        println!("{}", serde_json::to_string_pretty(&specs)?);
    } else {
        for tool in toolbox.tools() {
            let first = tool.spec.description.lines().next().unwrap_or_default();
            println!("{:<24} {first}", tool.spec.name);
            println!("{:<24} {}", "", tool.spec.input_schema);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn call(ctx: &Context, tool: String, arguments: String, format: Format) -> Result<ExitCode> {
    let dispatcher = ctx.dispatcher()?;
    let runtime = context::runtime()?;
    let call = ToolCall {
        id: "call-1".into(),
        name: tool,
        arguments,
    };
    let message = runtime.block_on(dispatcher.call(call));
    let text = serde_json::to_string_pretty(&format.render(&message)).context("printing")?;
    println!("{text}");
    Ok(match message.status {
        Status::Success => ExitCode::SUCCESS,
        Status::Error => ExitCode::from(1),
    })
}
