//! One live shell: a command written to its stdin, framed, and read back until its end lines
//! or its deadline.

use super::frames::Frames;
use super::script::{Check, Ending, Framing};
use super::{Chunk, Chunks, Input, Sandbox};
use futures::StreamExt;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warden_core::{OutputSink, OutputStream};

/// How long stderr's end line may trail stdout's (they travel on separate pipes).
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// How often a command that has not ended has its sandbox's processes counted from outside.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// How long a command whose processes were stopped at its deadline has to print its end:
/// the shell's own steps after the killed process (an `echo`, the framing) take
/// milliseconds; a loop that starts its next process has not ended by then.
const STOPPED_ENDS_WITHIN: Duration = Duration::from_secs(2);

/// A shell reading commands on its stdin, and what it keeps between commands.
pub(crate) struct Live<S> {
    pub sandbox: S,
    input: Input,
    output: Chunks,
    /// Nothing written yet: the next script carries what the shell needs once.
    first: bool,
    /// Shell options the framing switched off, restored inside the next command.
    options: String,
    /// Bytes background jobs wrote after the last command's end line.
    after: u64,
    /// Forks refused for the process limit, as the shell counted at the last command's end.
    refused: Option<u64>,
}

/// A command that finished, as its shell saw it.
pub(crate) struct Finished {
    pub status: i64,
    /// The count of processes the shell read afterwards.
    pub processes: Option<u64>,
    pub stdout: String,
    pub stderr: String,
    /// Bytes background jobs wrote between the previous command and this one.
    pub between: u64,
    /// Forks refused for the limit while it ran (0 when unknown).
    pub refused: u64,
}

/// How one command of a live shell ended.
pub(crate) enum Ran {
    /// It finished.
    Finished(Finished),
    /// The shell found its sandbox out of processes, or forks refused since the last
    /// command, and did not run it.
    NotRun {
        processes: Option<u64>,
        refused: u64,
    },
    /// The shell's output closed (`exit`, `exec`, a kill): the shell is gone.
    ShellEnded { stdout: String, stderr: String },
    /// The deadline passed with the command still running.
    TimedOut { stdout: String, stderr: String },
    /// The deadline passed, the command's processes were stopped, and the shell printed its
    /// end: the shell lives on.
    Stopped { stdout: String, stderr: String },
    /// Still running, and the sandbox was seen full of processes twice in a row.
    OutOfProcesses {
        stdout: String,
        stderr: String,
        processes: u64,
    },
}

impl<S: Sandbox> Live<S> {
    pub(crate) fn new(sandbox: S, input: Input, output: Chunks) -> Self {
        Live {
            sandbox,
            input,
            output,
            first: true,
            options: String::new(),
            after: 0,
            refused: None,
        }
    }

    /// Runs one command under `deadline`; each stream is cut at `limit` bytes.
    pub(crate) async fn run(
        &mut self,
        command: &str,
        limit: u64,
        mut deadline: Instant,
        check: Option<&Check>,
        watcher: Option<&OutputSink>,
    ) -> Ran {
        let framing = Framing::new();
        let check = check.map(|c| Check {
            refused: self.refused,
            ..c.clone()
        });
        let script = framing.script(command, &self.options, check.as_ref(), self.first);
        self.first = false;
        let end_line = |rest: &[u8]| Ending::parse(rest).is_some();
        let mut out = Frames::new(&framing.start, &framing.end, end_line, limit);
        let mut err = Frames::new(&framing.start, &framing.end, <[u8]>::is_empty, limit);
        let write = async {
            self.input.write_all(script.as_bytes()).await?;
            self.input.flush().await
        };
        match tokio::time::timeout_at(deadline, write).await {
            Err(_) => {
                return Ran::TimedOut {
                    stdout: String::new(),
                    stderr: String::new(),
                };
            }
            // A closed stdin means the shell is gone; reading says so.
            Ok(Err(e)) => tracing::debug!("writing to the session shell failed: {e}"),
            Ok(Ok(())) => {}
        }
        let mut grace: Option<Instant> = None;
        let mut probe_at = check.as_ref().map(|_| Instant::now() + PROBE_EVERY);
        let mut full_in_a_row = 0;
        let mut stopped = false;
        while !(out.done() && err.done()) {
            let now = Instant::now();
            if now >= deadline {
                // Once: the shell then has a little while to print the command's end.
                if !stopped && !out.done() && self.sandbox.stop_command() {
                    stopped = true;
                    deadline = now + STOPPED_ENDS_WITHIN;
                    continue;
                }
                return Ran::TimedOut {
                    stdout: out.text(),
                    stderr: err.text(),
                };
            }
            if grace.is_some_and(|g| now >= g) {
                break;
            }
            if let (Some(c), Some(at)) = (&check, probe_at)
                && now >= at
                && !out.done()
            {
                match tokio::time::timeout_at(deadline, self.sandbox.processes()).await {
                    Ok(Some(processes)) if processes >= c.full_at => {
                        full_in_a_row += 1;
                        if full_in_a_row >= 2 {
                            return Ran::OutOfProcesses {
                                stdout: out.text(),
                                stderr: err.text(),
                                processes,
                            };
                        }
                    }
                    _ => full_in_a_row = 0,
                }
                probe_at = Some(Instant::now() + PROBE_EVERY);
                continue;
            }
            let until = [Some(deadline), grace, probe_at]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(deadline);
            match tokio::time::timeout_at(until, self.output.next()).await {
                Err(_) => {}
                Ok(Some(Ok(Chunk::Stdout(data)))) => {
                    out.push(&data);
                    if let Some(w) = watcher {
                        w.send(OutputStream::Stdout, out.fresh());
                    }
                    if out.done() && grace.is_none() {
                        grace = Some(Instant::now() + STDERR_GRACE);
                    }
                }
                Ok(Some(Ok(Chunk::Stderr(data)))) => {
                    err.push(&data);
                    if let Some(w) = watcher {
                        w.send(OutputStream::Stderr, err.fresh());
                    }
                }
                Ok(Some(Err(e))) => {
                    tracing::debug!("reading the session shell failed: {e}");
                    return ended(out, err);
                }
                Ok(None) => return ended(out, err),
            }
        }
        let between = self.after + out.before + err.before;
        self.after = out.after + err.after;
        // `out` is done: its end line was parsed before it counted as one.
        let Some(ending) = out.rest().and_then(Ending::parse) else {
            return ended(out, err);
        };
        self.options = ending.options;
        let refused_since = match (ending.refused, self.refused) {
            (Some(now), Some(before)) => now.saturating_sub(before),
            _ => 0,
        };
        self.refused = ending.refused;
        if stopped {
            return Ran::Stopped {
                stdout: out.text(),
                stderr: err.text(),
            };
        }
        match ending.status {
            None => Ran::NotRun {
                processes: ending.processes,
                refused: refused_since,
            },
            Some(status) => Ran::Finished(Finished {
                status,
                processes: ending.processes,
                stdout: out.text(),
                stderr: err.text(),
                between,
                refused: refused_since,
            }),
        }
    }
}

fn ended(mut out: Frames, mut err: Frames) -> Ran {
    Ran::ShellEnded {
        stdout: out.text(),
        stderr: err.text(),
    }
}
