//! `warden agent`: runs a model against the toolbox until it answers, or resumes a run.

use crate::context;
use crate::progress;
use anyhow::{Context as _, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use warden::Warden;
use warden_agent::{
    ChatConfig, Decisions, Execution, Limits, RetryPolicy, ReviewSource, Run, StopReason,
};
use warden_core::{HumanDuration, RunLimits};

#[derive(Args)]
pub(crate) struct AgentArgs {
    /// What the agent should do (not with --resume).
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    task: Option<String>,
    /// Carry on a paused or interrupted run: its id, or its transcript's path.
    #[arg(long, value_name = "RUN")]
    resume: Option<String>,
    /// The model to ask [resumed runs: the one they used].
    #[arg(long, env = "WARDEN_MODEL")]
    model: Option<String>,
    /// The Chat Completions endpoint [default: https://api.openai.com/v1; resumed runs: theirs].
    #[arg(long, env = "OPENAI_BASE_URL")]
    base_url: Option<String>,
    /// Sent as a bearer token; local servers may need none.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A system message to start the conversation with.
    #[arg(long, conflicts_with = "resume")]
    system: Option<String>,
    /// Model turns in the run [default: 50].
    #[arg(long)]
    max_steps: Option<u32>,
    /// Requests to the model in the run, retries included.
    #[arg(long)]
    max_model_calls: Option<u32>,
    /// Tool calls in the run.
    #[arg(long)]
    max_tool_calls: Option<u32>,
    /// Calls of any one tool in the run.
    #[arg(long)]
    max_calls_per_tool: Option<u32>,
    /// Wall-clock budget of this process's part of the run ("90s", "10m").
    #[arg(long, value_name = "DURATION")]
    budget: Option<HumanDuration>,
    /// Retries of a model request after a 429, a 5xx or a timeout.
    #[arg(long, default_value_t = RetryPolicy::default().max_retries)]
    retries: u32,
    /// One model request's time limit.
    #[arg(long, value_name = "DURATION", default_value = "600s")]
    model_timeout: HumanDuration,
    /// Decide calls that need review from this JSON file, keyed by tool_call_id; a call it has
    /// no decision for pauses the run (`--resume` after adding one).
    #[arg(long, value_name = "FILE")]
    decisions: Option<PathBuf>,
    /// Print every event as a JSON line on stdout, instead of progress on stderr.
    #[arg(long)]
    json: bool,
}

pub(crate) fn agent(ctx: &Warden, args: AgentArgs) -> Result<ExitCode> {
    let resumed = match &args.resume {
        Some(which) => Some(Run::resume(&transcript_path(ctx, which))?),
        None => None,
    };
    let previous = resumed.as_ref().and_then(Run::previous);
    let model = args
        .model
        .clone()
        .or_else(|| previous.as_ref().map(|p| p.model.clone()))
        .context("name the model with --model (or WARDEN_MODEL)")?;
    let base_url = args
        .base_url
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| previous.as_ref().map(|p| p.base_url.clone()))
        .unwrap_or_else(|| ChatConfig::DEFAULT_BASE_URL.to_owned());
    let limits = limits(&args, previous.map(|p| p.limits).unwrap_or_default());
    let review = match &args.decisions {
        Some(path) => ReviewSource::File(Arc::new(Decisions::load(path)?)),
        None => match crate::review::TerminalReviewer::if_terminal() {
            Some(r) => ReviewSource::Ask(r),
            None => ReviewSource::Nobody,
        },
    };
    let exec = Execution {
        chat: ChatConfig {
            base_url,
            api_key: args.api_key.clone().filter(|k| !k.is_empty()),
            model,
            timeout: args.model_timeout.0,
            retry: RetryPolicy {
                max_retries: args.retries,
                ..RetryPolicy::default()
            },
        },
        limits,
        review,
    };
    // No run limits here: the run holds its dispatcher to `limits`, counting the calls an
    // earlier process of the run made.
    let dispatcher = context::dispatcher(ctx, RunLimits::default())?;
    // Created only once everything else is ready: a failed start leaves no empty run behind.
    let run = match (resumed, &args.task) {
        (Some(run), _) => run,
        (None, Some(task)) => Run::create(&ctx.runs, task, args.system.clone())?,
        (None, None) => bail!("say what the agent should do, or --resume a run"),
    };
    progress::announce(&run, args.json);
    run.on_event(progress::sink(args.json));
    let runtime = context::runtime()?;
    let resume_hint = format!("warden agent --resume {}", run.id());
    // One run is one session: close it so a Docker shell of the run ends with it.
    let session = dispatcher.clone();
    let outcome = runtime.block_on(run.execute(exec, dispatcher));
    runtime.block_on(session.close());
    let outcome = outcome?;
    if !args.json {
        progress::finish(&outcome, &resume_hint);
    }
    Ok(match outcome.reason {
        StopReason::Answered => ExitCode::SUCCESS,
        StopReason::AwaitingReview { .. } => ExitCode::from(3),
        StopReason::ProviderError { .. } | StopReason::ModelUnavailable { .. } => ExitCode::from(2),
        _ => ExitCode::from(1),
    })
}

/// Flags win; a resumed run keeps the limits it had for what the flags leave out.
fn limits(args: &AgentArgs, before: Limits) -> Limits {
    Limits {
        max_steps: args.max_steps.unwrap_or(before.max_steps),
        max_model_calls: args.max_model_calls.or(before.max_model_calls),
        max_tool_calls: args.max_tool_calls.or(before.max_tool_calls),
        max_calls_per_tool: args.max_calls_per_tool.or(before.max_calls_per_tool),
        budget: args
            .budget
            .map(|b| b.0)
            .or(before.budget)
            .filter(|b| *b > Duration::ZERO),
    }
}

/// A run id names a transcript in HOME/runs; a path names any.
fn transcript_path(ctx: &Warden, which: &str) -> PathBuf {
    if which.contains('/') || which.ends_with(".jsonl") {
        PathBuf::from(which)
    } else {
        ctx.runs.join(format!("{which}.jsonl"))
    }
}
