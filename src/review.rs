//! Review on a terminal: a person approves, edits, rejects or answers each call.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::sync::{Arc, Mutex};
use warden_core::shown::Escaped;
use warden_core::{
    Asked, BoxFuture, ChangesToReview, Decision, Reviewer, ToolCall, ToolSpec, Verdict,
};

/// The terminal a process has even when its streams are pipes, as `sudo` and `ssh` ask on it.
const CONTROLLING_TERMINAL: &str = "/dev/tty";

/// Asks on a terminal, one call at a time.
pub(crate) struct TerminalReviewer {
    lock: Arc<Mutex<()>>,
    on: Asks,
}

/// Where a reviewer asks.
#[derive(Clone, Copy)]
enum Asks {
    /// On warden's stdin and stderr.
    Streams,
    /// On warden's controlling terminal, whatever its streams are.
    Controlling,
}

impl TerminalReviewer {
    /// A reviewer when stdin and stderr are a terminal; none otherwise (calls needing review
    /// are then rejected).
    pub(crate) fn if_terminal() -> Option<Arc<dyn Reviewer>> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal())
            .then(|| Self::on(Asks::Streams))
    }

    /// A reviewer on warden's controlling terminal, when it has one: for `warden exec`, whose
    /// streams are the program's, and whose parent may drive it through pipes from a
    /// person's terminal.
    pub(crate) fn controlling() -> Option<Arc<dyn Reviewer>> {
        File::open(CONTROLLING_TERMINAL)
            .is_ok()
            .then(|| Self::on(Asks::Controlling))
    }

    fn on(on: Asks) -> Arc<dyn Reviewer> {
        Arc::new(TerminalReviewer {
            lock: Arc::default(),
            on,
        })
    }
}

fn line(prompt: &str, input: &mut dyn BufRead, output: &mut dyn Write) -> String {
    let _ = write!(output, "{prompt}");
    let _ = output.flush();
    let mut s = String::new();
    let _ = input.read_line(&mut s);
    s.trim().to_owned()
}

fn ask(
    call: &ToolCall,
    spec: &ToolSpec,
    digest: &str,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> Decision {
    // The call's id and arguments are the model's: shown, never obeyed by the terminal.
    let _ = writeln!(
        output,
        "\nreview: `{}` (call {}) with {}\n(the decision is for this call alone: {digest})",
        Escaped(&spec.name),
        Escaped(&call.id),
        Escaped(&call.arguments)
    );
    loop {
        match line("[a]pprove, [e]dit, [r]eject, re[s]pond? ", input, output).as_str() {
            "a" | "approve" => return Decision::Approve,
            "r" | "reject" => {
                return Decision::Reject {
                    reason: line("reason: ", input, output),
                };
            }
            "s" | "respond" => {
                return Decision::Respond {
                    content: line("answer for the model: ", input, output),
                };
            }
            "e" | "edit" => {
                match serde_json::from_str(&line("arguments (JSON): ", input, output)) {
                    Ok(arguments) => return Decision::Edit { arguments },
                    Err(e) => {
                        let _ = writeln!(output, "not JSON: {}", Escaped(e));
                    }
                }
            }
            "" => {
                return Decision::Reject {
                    reason: "no answer from the reviewer".into(),
                };
            }
            _ => {}
        }
    }
}

/// Asks with `ask` on the controlling terminal, in line mode while asking (`warden exec` may
/// have put it in raw mode for the program), as it was afterwards; `unasked` when it cannot
/// be opened.
fn on_controlling_terminal<T>(
    ask: impl FnOnce(&mut dyn BufRead, &mut dyn Write) -> T,
    unasked: T,
) -> T {
    use nix::sys::termios::{InputFlags, LocalFlags, OutputFlags, SetArg, tcgetattr, tcsetattr};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(CONTROLLING_TERMINAL);
    let Ok(terminal) = opened else {
        return unasked;
    };
    let saved = tcgetattr(&terminal).ok();
    if let Some(saved) = &saved {
        let mut lines = saved.clone();
        lines.local_flags |= LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG;
        lines.input_flags |= InputFlags::ICRNL;
        lines.output_flags |= OutputFlags::OPOST | OutputFlags::ONLCR;
        let _ = tcsetattr(&terminal, SetArg::TCSANOW, &lines);
    }
    let answer = ask(&mut BufReader::new(&terminal), &mut &terminal);
    if let Some(saved) = &saved {
        let _ = tcsetattr(&terminal, SetArg::TCSANOW, saved);
    }
    answer
}

impl TerminalReviewer {
    /// Asks with `ask` where this reviewer asks, one question at a time; `failed` when the
    /// prompt could not be put.
    fn asked<T: Send + 'static>(
        &self,
        ask: impl FnOnce(&mut dyn BufRead, &mut dyn Write) -> T + Send + 'static,
        failed: impl Fn() -> T + Send + 'static,
    ) -> BoxFuture<'static, T> {
        let (lock, on) = (self.lock.clone(), self.on);
        Box::pin(async move {
            let unasked = failed();
            let asked = tokio::task::spawn_blocking(move || {
                let _one_at_a_time = lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match on {
                    Asks::Streams => ask(&mut std::io::stdin().lock(), &mut std::io::stderr()),
                    Asks::Controlling => on_controlling_terminal(ask, unasked),
                }
            });
            asked.await.unwrap_or_else(|_| failed())
        })
    }
}

impl Reviewer for TerminalReviewer {
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision> {
        let (call, spec, digest) = (asked.call.clone(), asked.spec.clone(), asked.digest.clone());
        self.asked(
            move |input, output| ask(&call, &spec, &digest, input, output),
            || Decision::Reject {
                reason: "the review prompt failed".into(),
            },
        )
    }

    fn review_changes<'a>(
        &'a self,
        asked: &'a Asked<'a>,
        changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict> {
        let (call, spec, changes) = (asked.call.clone(), asked.spec.clone(), changes.clone());
        self.asked(
            move |input, output| ask_changes(&call, &spec, &changes, input, output),
            || Verdict::Reject {
                reason: "the review prompt failed".into(),
            },
        )
    }

    fn name(&self) -> &'static str {
        "terminal"
    }
}

/// Asks whether the changes `call` made are kept.
fn ask_changes(
    call: &ToolCall,
    spec: &ToolSpec,
    changes: &ChangesToReview,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> Verdict {
    let _ = writeln!(
        output,
        "\nreview of changes: `{}` (call {}) ran with {}\n{}",
        Escaped(&spec.name),
        Escaped(&call.id),
        Escaped(&call.arguments),
        changes.to_text()
    );
    loop {
        match line(
            "[a]pprove (keep them), [r]eject (discard them)? ",
            input,
            output,
        )
        .as_str()
        {
            "a" | "approve" => return Verdict::Approve,
            "r" | "reject" => {
                return Verdict::Reject {
                    reason: line("reason: ", input, output),
                };
            }
            "" => {
                return Verdict::Reject {
                    reason: "no answer from the reviewer".into(),
                };
            }
            _ => {}
        }
    }
}
