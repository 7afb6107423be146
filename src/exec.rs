//! `warden exec TOOL [-- PROGRAM ARGS…]`: a whole program in the sandbox a call of a shell
//! tool gets, its stdin, stdout and stderr passed through, its exit status warden's.

use crate::context;
use crate::review::TerminalReviewer;
use anyhow::{Context as _, Result, anyhow, bail};
use std::process::ExitCode;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use warden::Warden;
use warden_core::shown::Escaped;
use warden_core::{Exit, HumanDuration, Program, RunLimits, Tool, Toolbox, WindowSize};

/// warden's own failure (the program never ran), as `docker run` answers it: distinct from
/// any status a program that ran can end with but 125 itself.
const WARDEN_FAILED: u8 = 125;

/// The signals passed on to the program; warden takes them while the program runs.
fn passed() -> [SignalKind; 7] {
    [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
        SignalKind::window_change(),
    ]
}

#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    /// The docker or host tool whose sandbox the program runs in.
    tool: String,
    /// The wall-clock limit: a duration (`90s`, `10m`, `2h`), or `none` for an interactive
    /// shell (flagged in the call log) [default: the policy's timeout].
    #[arg(long, value_name = "DURATION|none")]
    timeout: Option<TimeLimit>,
    /// The program's stdin is empty and warden never reads its own (as `ssh -n`): for a
    /// parent's loop that reads its own input, which warden would otherwise pass on ahead of
    /// the program's reads.
    #[arg(short = 'n', long = "no-stdin")]
    no_stdin: bool,
    /// The program and its arguments [default: the tool's shell].
    #[arg(last = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

/// `--timeout`: a duration, or none at all.
#[derive(Clone, Copy)]
enum TimeLimit {
    After(Duration),
    Never,
}

impl std::str::FromStr for TimeLimit {
    type Err = warden_core::UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim() == "none" {
            return Ok(TimeLimit::Never);
        }
        s.parse::<HumanDuration>().map(|d| TimeLimit::After(d.0))
    }
}

pub(crate) fn exec(ctx: &Warden, args: ExecArgs) -> Result<ExitCode> {
    let ended = run(ctx, args);
    match ended {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("warden exec: {}", Escaped(format_args!("{e:#}")));
            Ok(ExitCode::from(WARDEN_FAILED))
        }
    }
}

fn run(ctx: &Warden, args: ExecArgs) -> Result<ExitCode> {
    // The program's streams are its own: a tool that requires review is asked about on the
    // controlling terminal, which a parent driving warden through pipes may still have.
    // The tools that run programs alone: a wasm tool's component is not loaded for nothing.
    let mut dispatcher = ctx.programs_dispatcher(RunLimits::default())?;
    if dispatcher.toolbox().get(&args.tool).is_none() {
        // No such tool, or one that is called: the whole toolbox says which. Its policies
        // that do not load were warned about as the first load read them: not twice.
        let quiet = tracing::subscriber::NoSubscriber::default();
        runnable(
            &tracing::subscriber::with_default(quiet, || ctx.load())?,
            &args.tool,
        )?;
    }
    if let Some(reviewer) = TerminalReviewer::controlling() {
        dispatcher = dispatcher.reviewer(reviewer);
    }
    let tool = runnable(dispatcher.toolbox(), &args.tool)?;
    let timeout = match args.timeout {
        None => Some(tool.limits.timeout),
        Some(TimeLimit::After(d)) => Some(d),
        Some(TimeLimit::Never) => None,
    };
    // At a terminal (stdin and stdout both), the program gets one of its own; warden's is
    // raw meanwhile, so that every key reaches the program's terminal as typed. Without
    // stdin there are no keys to pass on: plain pipes.
    let raw = match args.no_stdin {
        true => None,
        false => Raw::if_terminal()?,
    };
    let runtime = context::one_call_runtime()?;
    let ended = runtime.block_on(async {
        let (pass, signals) = tokio::sync::mpsc::unbounded_channel();
        let (resized, terminal) = match &raw {
            Some(_) => {
                let (resized, size) = tokio::sync::watch::channel(window_size());
                (Some(resized), Some(size))
            }
            None => (None, None),
        };
        for kind in passed() {
            let mut arrivals = signal(kind)?;
            let (pass, number) = (pass.clone(), kind.as_raw_value());
            // At a terminal a new size goes to the program's terminal, whose kernel tells
            // the program; elsewhere the signal is passed on like the others.
            let resized = (kind == SignalKind::window_change())
                .then(|| resized.clone())
                .flatten();
            tokio::spawn(async move {
                while arrivals.recv().await.is_some() {
                    let sent = match &resized {
                        Some(resized) => resized.send(window_size()).is_ok(),
                        None => pass.send(number).is_ok(),
                    };
                    if !sent {
                        break;
                    }
                }
            });
        }
        let program = Program {
            argv: args.program,
            stdin: match args.no_stdin {
                true => Box::new(tokio::io::empty()),
                false => Box::new(tokio::io::stdin()),
            },
            stdout: Box::new(tokio::io::stdout()),
            stderr: Box::new(tokio::io::stderr()),
            timeout,
            terminal,
            signals,
        };
        let ended = dispatcher.exec(&args.tool, program).await;
        dispatcher.close().await;
        anyhow::Ok(ended)
    });
    drop(raw);
    let ended = ended?;
    // warden's stdin may still be read by a thread that waits on a terminal: not waited for.
    runtime.shutdown_background();
    let ran = ended.map_err(|e| anyhow!("{}", e.message))?;
    let exit = ran.exit;
    if exit == Exit::TimedOut {
        let limit = timeout.map_or(String::new(), |t| format!(" of {}", HumanDuration(t)));
        eprintln!(
            "warden exec: the program outlived its time limit{limit} and was killed \
             (--timeout sets another, or none)"
        );
    }
    if let Some(told) = ran
        .changes
        .as_ref()
        .and_then(|c| changes_told(c, &ran.call_id))
    {
        eprintln!("warden exec: {told}");
    }
    Ok(ExitCode::from(
        u8::try_from(exit.status()).unwrap_or(u8::MAX),
    ))
}

/// What became of the changes run `call_id` made to its read-write roots, for its stderr;
/// nothing when it changed none.
fn changes_told(changes: &serde_json::Value, call_id: &str) -> Option<String> {
    if changes["discarded"] == true {
        return Some(warden_core::changes::DISCARDED.replace("it wrote", "the program wrote"));
    }
    match changes["count"].as_u64() {
        None | Some(0) => None,
        Some(count) => Some(format!(
            "{count} change(s) to its read-write roots were kept; `warden undo {call_id}` puts \
             them back"
        )),
    }
}

/// warden's terminal in raw mode, restored when dropped.
struct Raw(nix::sys::termios::Termios);

impl Raw {
    /// Raw mode when stdin and stdout are a terminal; `None` otherwise.
    fn if_terminal() -> Result<Option<Raw>> {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        use std::io::IsTerminal;
        if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
            return Ok(None);
        }
        let saved = tcgetattr(std::io::stdin()).context("reading the terminal's settings")?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(std::io::stdin(), SetArg::TCSANOW, &raw)
            .context("setting the terminal to raw mode")?;
        Ok(Some(Raw(saved)))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        use nix::sys::termios::{SetArg, tcsetattr};
        let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.0);
    }
}

/// The size of warden's terminal (on stdout); 24×80 when it cannot be read.
fn window_size() -> WindowSize {
    use std::os::fd::AsRawFd;
    let mut size = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into a valid pointer.
    let read = unsafe {
        nix::libc::ioctl(
            std::io::stdout().as_raw_fd(),
            nix::libc::TIOCGWINSZ,
            &raw mut size,
        )
    };
    if read < 0 || size.ws_row == 0 || size.ws_col == 0 {
        return WindowSize { rows: 24, cols: 80 };
    }
    WindowSize {
        rows: size.ws_row,
        cols: size.ws_col,
    }
}

/// The tool named `name`, if `warden exec` can run programs in its sandbox; else an error
/// that says which tools it can.
fn runnable<'a>(toolbox: &'a Toolbox, name: &str) -> Result<&'a Tool> {
    let runs_programs = |tool: &Tool| {
        toolbox
            .policies()
            .iter()
            .any(|p| std::sync::Arc::ptr_eq(&p.policy, &tool.policy) && p.capabilities.programs)
    };
    let shells: Vec<&str> = toolbox
        .tools()
        .filter(|t| runs_programs(t))
        .map(|t| t.spec.name.as_str())
        .collect();
    let listed = if shells.is_empty() {
        "this toolbox has no docker or host tool".to_owned()
    } else {
        format!("the tools it runs programs in: {}", shells.join(", "))
    };
    let Some(tool) = toolbox.get(name) else {
        let missing = match toolbox.broken().len() {
            0 => String::new(),
            n => format!(
                " ({n} of the toolbox's policies did not load, and their tools are missing: \
                 the warnings above say why)"
            ),
        };
        bail!("there is no tool named `{name}`; {listed}{missing}");
    };
    if !runs_programs(tool) {
        bail!(
            "`{name}` is a {} tool: those are called, not exec'd (`warden call {name} \
             '{{...}}'`); {listed}",
            tool.policy.kind.value
        );
    }
    Ok(tool)
}
