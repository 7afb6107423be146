//! What the model is told of a session's command, and what becomes of the session's shell:
//! it lives on, or it was reset (out of processes, timed out, ended) and the next command
//! starts in a fresh one.

use super::script::Check;
use super::shell::{Finished, Live, Ran};
use super::{Launcher, Sandbox, Sessions, Start};
use crate::{Cause, answer, shell, timed_out};
use warden_core::{ByteSize, ErrorKind, Output, SHELL_DETAIL, ToolError};

impl<L: Launcher> Sessions<L> {
    /// The answer to how a command ran, and the shell when it lives on; an error when the
    /// sandbox failed before an answer could say what became of the shell.
    pub(super) async fn told(
        &self,
        ran: Ran,
        mut live: Live<L::Sandbox>,
        used: &warden_core::Usage,
        start: &Start<'_>,
        mut notes: Vec<String>,
    ) -> Result<(Result<Output, ToolError>, Option<Live<L::Sandbox>>), ToolError> {
        let (limits, limit, counting) = (start.limits, start.limit, &start.counting);
        let limit_of = counting.limit;
        match ran {
            Ran::Finished(finished) => Ok(self.finished(finished, live, used, start, notes).await),
            Ran::ShellEnded { stdout, stderr } => {
                let status = live.sandbox.exit_status().await;
                let ended = live.sandbox.close_noting().await;
                let (code, cause) = status?;
                notes.push(format!(
                    "the shell ended, and with it the session: the next command starts in {}",
                    L::FRESH
                ));
                notes.extend(ended);
                Ok((answer(code, &cause, &stdout, &stderr, limits, &notes), None))
            }
            Ran::Stopped { stdout, stderr } => {
                let what = "its processes were stopped; the session's shell lives on, with its \
                            working directory, variables, files and earlier background jobs";
                let told = timed_out(limit, &stdout, &stderr, &noted(what, &notes));
                Ok((Err(told), Some(live)))
            }
            Ran::TimedOut { stdout, stderr } => {
                notes.extend(live.sandbox.close_noting().await);
                let what = format!(
                    "the session's shell was killed; the next command starts in {} ({LOST})",
                    L::FRESH
                );
                let told = timed_out(limit, &stdout, &stderr, &noted(&what, &notes));
                Ok((Err(told), None))
            }
            Ran::OutOfProcesses {
                stdout,
                stderr,
                processes,
            } => {
                notes.extend(live.sandbox.close_noting().await);
                let what = format!(
                    "the command filled the session with processes ({processes} of {limit_of} \
                     in use) and was stopped; the session was reset, and the next command \
                     starts in {} ({LOST})",
                    L::FRESH
                );
                let error = filled(what, processes, &stdout, &stderr, &notes);
                Ok((Err(error), None))
            }
            // Not reached: `run_in` runs it again, once.
            Ran::NotRun { processes, refused } => {
                live.sandbox.close().await;
                let error = ToolError::new(
                    ErrorKind::LimitExceeded,
                    format!(
                        "a fresh shell found its sandbox out of processes ({}) and could not \
                         run the command",
                        state(processes, refused, limit_of)
                    ),
                );
                Ok((Err(error), None))
            }
        }
    }

    /// The answer to a command that finished, and the shell when it lives on (not when the
    /// command left its sandbox out of processes).
    async fn finished(
        &self,
        Finished {
            status,
            processes,
            stdout,
            stderr,
            between,
            refused,
        }: Finished,
        mut live: Live<L::Sandbox>,
        used: &warden_core::Usage,
        start: &Start<'_>,
        mut notes: Vec<String>,
    ) -> (Result<Output, ToolError>, Option<Live<L::Sandbox>>) {
        let (limits, counting) = (start.limits, &start.counting);
        let limit_of = counting.limit;
        let cause = if status == 137 && live.sandbox.memory_killed().await {
            Cause::OutOfMemory
        } else {
            live.sandbox
                .limit_ended(status, used)
                .map_or(Cause::Exited, Cause::Limit)
        };
        let processes = match processes {
            None if counting.outside => live.sandbox.processes().await,
            counted => counted,
        };
        if between > 0 {
            notes.push(format!(
                "background jobs wrote {} between commands, not shown: to read what a \
                 background job writes, send it to a file (`cmd >/tmp/log 2>&1 &`)",
                ByteSize(between)
            ));
        }
        // A fork bomb churns: its count at the end may fall short of the limit. Forks
        // refused during the command with many processes still left is the same news.
        let bombed =
            |n: u64, c: &Check| n >= c.full_at || (refused > 0 && n >= (limit_of / 4).max(3));
        let kept = match (processes, &counting.check) {
            (Some(n), Some(c)) if bombed(n, c) => {
                let ended = live.sandbox.close_noting().await;
                notes.push(format!(
                    "the session is out of processes ({n} of {limit_of} in use, by \
                     what this command left running): it was reset, and the next \
                     command starts in {} ({LOST})",
                    L::FRESH
                ));
                notes.extend(ended);
                None
            }
            _ => Some(live),
        };
        (
            answer(status, &cause, &stdout, &stderr, limits, &notes),
            kept,
        )
    }
}

/// What a reset loses, for the notes that say so.
const LOST: &str =
    "working directory, variables, background jobs and files outside the granted folders are lost";

/// The `limit_exceeded` answer of a command that filled its sandbox with processes: `what`
/// became of it, then `notes` and the output so far.
fn filled(what: String, processes: u64, stdout: &str, stderr: &str, notes: &[String]) -> ToolError {
    let mut message = what;
    for note in notes {
        message.push_str(&format!("\n[{note}]"));
    }
    for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
        if !text.is_empty() {
            message.push_str(&format!("\n[{name} so far]\n{text}"));
        }
    }
    ToolError::new(ErrorKind::LimitExceeded, message)
        .with_detail("processes", processes)
        .with_detail(SHELL_DETAIL, shell(None, stdout, stderr, notes))
}

/// The answer of a call that only restarted the session.
pub(super) fn restarted(notes: &[String]) -> Output {
    let mut content =
        "the session was restarted: the next command runs in a fresh shell".to_owned();
    for note in notes {
        content.push_str(&format!("\n[{note}]"));
    }
    Output {
        content,
        ..Output::default()
    }
}

/// The note of a sandbox found out of processes (`state`) before a command, which ran in
/// `fresh` instead.
pub(super) fn out_of_processes_before(state: &str, fresh: &str) -> String {
    format!(
        "the session ran out of processes after the last command ({state}), most likely \
         through background jobs it left: it was reset before this command, which ran in \
         {fresh}; the working directory, variables, background jobs and files outside the \
         granted folders of before are gone"
    )
}

/// What the answer of a command says when its session's copies of the roots were out of
/// date before it (see [`super::Sandbox::current`]).
pub(super) fn out_of_date_before(fresh: &str) -> String {
    format!(
        "the session's copies of its read-write roots were out of date (the roots changed \
         since its last command): it was reset before this command, which ran in {fresh} with \
         fresh copies; the working directory, variables, background jobs and files outside the \
         granted folders of before are gone"
    )
}

/// What became of a timed-out command, then each of `notes`, for a `timeout` answer.
fn noted(what: &str, notes: &[String]) -> String {
    std::iter::once(what)
        .chain(notes.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("; ")
}

/// "120 of 128 in use, 37 forks refused".
pub(super) fn state(processes: Option<u64>, refused: u64, limit: u64) -> String {
    let mut text = match processes {
        Some(n) => format!("{n} of {limit} in use"),
        None => format!("a limit of {limit}"),
    };
    if refused > 0 {
        text.push_str(&format!(", {refused} forks refused"));
    }
    text
}
