//! `warden exec`'s path: a whole program in the sandbox a call of a tool gets. It is reviewed
//! and admitted like a call, its output is redacted of the tool's secret values as it flows,
//! and it is logged as a call record marked `exec`.

use super::message::set_detail;
use super::span::CallSpan;
use super::{Dispatcher, ExecFacts, Facts, secrets_of};
use crate::executor::Held;
use crate::executor::{Denials, Meter};
use crate::message::{ErrorKind, ToolCall, ToolError, ToolMessage};
use crate::program::{Exit, Finished, Program, Redacting};
use crate::review::Decision;
use crate::toolbox::Tool;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

impl Dispatcher {
    /// Runs `program` in the sandbox a call of `tool` gets, under the tool's review, limits
    /// and admission, and answers how it ended, or why it could not start (an unknown tool,
    /// one whose executor runs only calls, a reviewer's refusal or none to ask, a sandbox that
    /// could not be set up). Either way a record marked `exec` goes to the call log.
    pub async fn exec(&self, tool: &str, mut program: Program) -> Result<Finished, ToolError> {
        static EXECS: AtomicU64 = AtomicU64::new(1);
        let start = Instant::now();
        let call = ToolCall {
            id: format!("exec-{}", EXECS.fetch_add(1, Ordering::Relaxed)),
            name: tool.to_owned(),
            arguments: serde_json::json!({ "argv": program.argv }).to_string(),
        };
        let tool = self
            .toolbox
            .get(tool)
            .ok_or_else(|| self.unknown_tool(tool))?;
        let span = CallSpan::new(&call, None);
        let secrets = secrets_of(tool);
        program.stdout = Redacting::wrap(program.stdout, &secrets);
        program.stderr = Redacting::wrap(program.stderr, &secrets);
        let held = Held {
            call_id: span.id().to_owned(),
            limits: tool.limits,
            denials: Denials::default(),
            usage: Meter::default(),
        };
        let reviewed = self
            .review_program(tool, &call, span.id(), &mut program)
            .await;
        let limit = program.timeout;
        let facts = ExecFacts {
            argv: program.argv.clone(),
            exit_status: None,
            unlimited_time: program.timeout.is_none(),
        };
        let ended = match reviewed {
            Some(ended) => ended.map(|exit| Finished::exited(span.id(), exit)),
            None => match self.gate.admit(tool).await {
                Ok(_permit) => {
                    self.session.touch();
                    tool.executor.exec(program, held.clone()).await
                }
                Err(e) => Err(e),
            },
        };
        let mut message = match &ended {
            Ok(ran) => {
                let mut message = match ran.exit {
                    Exit::Code(0) => {
                        ToolMessage::success(&call, "exited with status 0".into(), None)
                    }
                    exit => ToolMessage::failure(&call, ended_badly(exit, limit)),
                };
                if let Some(changes) = &ran.changes {
                    set_detail(&mut message, "changes", changes.clone());
                }
                message
            }
            Err(e) => ToolMessage::failure(&call, e.clone()),
        };
        let facts = Facts {
            took: start.elapsed(),
            attempts: 1,
            denied: held.denials.snapshot(),
            usage: held.usage.get(),
            reached: held.usage.reached(),
            credentials: held.usage.credentials_used(),
            exec: Some(ExecFacts {
                exit_status: ended.as_ref().ok().map(|ran| ran.exit.status()),
                ..facts
            }),
            ..Facts::default()
        };
        self.record_answer(&span, &call, Some(tool), &secrets, &mut message, &facts)
            .wait();
        ended
    }

    /// A program of a tool that requires review, put to the reviewer as a call whose
    /// arguments are `{"argv": [...]}`: `None` to run it (with the argv an edit gave), or how
    /// it ended without running. A tool without review runs as it is; one whose calls'
    /// changes are reviewed runs no program.
    async fn review_program(
        &self,
        tool: &Tool,
        call: &ToolCall,
        id: &str,
        program: &mut Program,
    ) -> Option<Result<Exit, ToolError>> {
        if tool.review_changes {
            // The program's terminal is the one a reviewer would be asked on, and warden's
            // relay may still be reading it when the program ends: its changes are not held.
            return Some(Err(ToolError::new(
                ErrorKind::Rejected,
                format!(
                    "a person reviews what each call of `{}` changes ([review] changes = true \
                     in its policy), and a program run by `warden exec` commits its changes \
                     when it exits, unreviewed: use `warden call`, or a tool without that \
                     review",
                    tool.spec.name
                ),
            )));
        }
        if !tool.review_required {
            return None;
        }
        if self.reviewer.is_none() {
            return Some(Err(ToolError::new(
                ErrorKind::Rejected,
                format!(
                    "`{}` needs a person to review each program ([review] required = true in \
                     its policy), and there is no one to ask here: run `warden exec` where it \
                     has a terminal to ask on (its own, or the controlling terminal of the \
                     process that starts it), or use a tool without review",
                    tool.spec.name
                ),
            )));
        }
        match self.review(tool, call, id).await {
            Decision::Approve => None,
            Decision::Edit { arguments } => match argv_of(&arguments) {
                Ok(argv) => {
                    program.argv = argv;
                    None
                }
                Err(e) => Some(Err(e)),
            },
            Decision::Reject { reason } => Some(Err(ToolError::new(
                ErrorKind::Rejected,
                format!("a reviewer rejected this program: {reason}"),
            ))),
            // The reviewer's answer stands for the program's output, as it stands for a
            // call's.
            Decision::Respond { content } => {
                use tokio::io::AsyncWriteExt as _;
                let written = async {
                    program.stdout.write_all(content.as_bytes()).await?;
                    program.stdout.flush().await
                };
                Some(written.await.map(|()| Exit::Code(0)).map_err(|e| {
                    ToolError::new(
                        ErrorKind::Unavailable,
                        format!("writing the reviewer's answer: {e}"),
                    )
                }))
            }
        }
    }
}

/// The argv of a reviewer's edit: `{"argv": ["PROGRAM", "ARG", …]}` (empty: the tool's shell).
fn argv_of(arguments: &Value) -> Result<Vec<String>, ToolError> {
    let argv = arguments.get("argv").and_then(Value::as_array);
    let strings = argv.and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect());
    strings.ok_or_else(|| {
        ToolError::new(
            ErrorKind::Rejected,
            format!(
                "the reviewer's edit {arguments} is not {{\"argv\": [\"PROGRAM\", \"ARG\", …]}}: \
                 nothing was run"
            ),
        )
    })
}

/// The record's error for a program that did not exit with 0, whose time limit was `limit`
/// (a program without one never times out).
fn ended_badly(exit: Exit, limit: Option<Duration>) -> ToolError {
    match exit {
        Exit::TimedOut => ToolError::timed_out(limit.unwrap_or_default()),
        Exit::Signal(signal) => ToolError::new(
            ErrorKind::ExitStatus,
            format!("the program was killed by signal {signal}"),
        ),
        Exit::Code(code) => ToolError::new(
            ErrorKind::ExitStatus,
            format!("the program exited with status {code}"),
        ),
    }
}
