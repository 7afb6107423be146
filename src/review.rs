//! Review on a terminal: a person approves, edits, rejects or answers each call.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex};
use warden_core::shown::Escaped;
use warden_core::{BoxFuture, Decision, Reviewer, ToolCall, ToolSpec};

/// Asks on the terminal, one call at a time.
pub(crate) struct TerminalReviewer {
    lock: Arc<Mutex<()>>,
}

impl TerminalReviewer {
    /// A reviewer when stdin and stderr are a terminal; none otherwise (calls needing review
    /// are then rejected).
    pub(crate) fn if_terminal() -> Option<Arc<dyn Reviewer>> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal()).then(|| {
            Arc::new(TerminalReviewer {
                lock: Arc::default(),
            }) as Arc<dyn Reviewer>
        })
    }
}

fn line(prompt: &str) -> String {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut s = String::new();
    let _ = std::io::stdin().lock().read_line(&mut s);
    s.trim().to_owned()
}

fn ask(call: &ToolCall, spec: &ToolSpec) -> Decision {
    // The call's id and arguments are the model's: shown, never obeyed by the terminal.
    eprintln!(
        "\nreview: `{}` (call {}) with {}",
        Escaped(&spec.name),
        Escaped(&call.id),
        Escaped(&call.arguments)
    );
    loop {
        match line("[a]pprove, [e]dit, [r]eject, re[s]pond? ").as_str() {
            "a" | "approve" => return Decision::Approve,
            "r" | "reject" => {
                return Decision::Reject {
                    reason: line("reason: "),
                };
            }
            "s" | "respond" => {
                return Decision::Respond {
                    content: line("answer for the model: "),
                };
            }
            "e" | "edit" => match serde_json::from_str(&line("arguments (JSON): ")) {
                Ok(arguments) => return Decision::Edit { arguments },
                Err(e) => eprintln!("not JSON: {}", Escaped(e)),
            },
            "" => {
                return Decision::Reject {
                    reason: "no answer from the reviewer".into(),
                };
            }
            _ => {}
        }
    }
}

impl Reviewer for TerminalReviewer {
    fn review<'a>(&'a self, call: &'a ToolCall, spec: &'a ToolSpec) -> BoxFuture<'a, Decision> {
        let lock = self.lock.clone();
        let (call, spec) = (call.clone(), spec.clone());
        Box::pin(async move {
            let asked = tokio::task::spawn_blocking(move || {
                let _one_at_a_time = lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                ask(&call, &spec)
            });
            asked.await.unwrap_or(Decision::Reject {
                reason: "the review prompt failed".into(),
            })
        })
    }
}
