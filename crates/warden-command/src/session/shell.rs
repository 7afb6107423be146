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
    /// The shell's state after the last command that ran (see [`super::script::replay`]).
    pub state: Option<String>,
    /// What the shell runs before the first command, once.
    prelude: String,
    /// This sandbox among every one this process started: what a shell started beside it
    /// ahead of time is kept for (see `super::pipe`).
    pub id: u64,
    /// Its view of the session's read-write roots, if its writes are transactions.
    pub view: Option<warden_tx::SessionView>,
}

/// The next [`Live::id`].
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
            state: None,
            prelude: String::new(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            view: None,
        }
    }

    /// A shell that runs `prelude` before its first command, and `options` inside it.
    pub(crate) fn starting_with(mut self, prelude: String, options: String) -> Self {
        self.prelude = prelude;
        self.options = options;
        self
    }

    /// The shell options restored inside the next command (`set -x`).
    pub(crate) fn options(&self) -> &str {
        &self.options
    }

    /// Its sandbox; the shell's stdin closes.
    pub(crate) fn into_sandbox(self) -> S {
        self.sandbox
    }

    /// Runs one command under `deadline`; each stream is cut at `limit` bytes.
    pub(crate) async fn run(
        &mut self,
        command: &str,
        limit: u64,
        deadline: Instant,
        check: Option<&Check>,
        watcher: Option<&OutputSink>,
    ) -> Ran {
        let framing = Framing::new();
        let check = check.map(|c| Check {
            refused: self.refused,
            ..c.clone()
        });
        let mut script = std::mem::take(&mut self.prelude);
        script.push_str(&framing.script(command, &self.options, check.as_ref(), self.first));
        self.first = false;
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
        let mut reading = Reading::new(&framing, limit, deadline, check.is_some());
        match self.read(&mut reading, check.as_ref(), watcher).await {
            Some(early) => early,
            None => self.finish(reading),
        }
    }

    /// Reads the command's output until both streams printed their end (or stderr's is
    /// past its grace); how it ended when that never happens: the deadline passed, the
    /// sandbox filled with processes, the shell ended.
    async fn read(
        &mut self,
        reading: &mut Reading,
        check: Option<&Check>,
        watcher: Option<&OutputSink>,
    ) -> Option<Ran> {
        while !(reading.out.done() && reading.err.done()) {
            let now = Instant::now();
            if now >= reading.deadline {
                // Once: the shell then has a little while to print the command's end.
                if !reading.stopped && !reading.out.done() && self.sandbox.stop_command() {
                    reading.stopped = true;
                    reading.deadline = now + STOPPED_ENDS_WITHIN;
                    continue;
                }
                return Some(Ran::TimedOut {
                    stdout: reading.out.text(),
                    stderr: reading.err.text(),
                });
            }
            if reading.grace.is_some_and(|g| now >= g) {
                return None;
            }
            if let (Some(c), Some(at)) = (check, reading.probe_at)
                && now >= at
                && !reading.out.done()
            {
                if let Some(full) = self.probe(reading, c).await {
                    return Some(full);
                }
                continue;
            }
            let until = [Some(reading.deadline), reading.grace, reading.probe_at]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(reading.deadline);
            match tokio::time::timeout_at(until, self.output.next()).await {
                Err(_) => {}
                Ok(Some(Ok(chunk))) => reading.push(chunk, watcher),
                Ok(Some(Err(e))) => {
                    tracing::debug!("reading the session shell failed: {e}");
                    return Some(reading.shell_ended());
                }
                Ok(None) => return Some(reading.shell_ended()),
            }
        }
        None
    }

    /// Counts the sandbox's processes from outside: the command is stopped when it is seen
    /// full twice in a row.
    async fn probe(&mut self, reading: &mut Reading, check: &Check) -> Option<Ran> {
        match tokio::time::timeout_at(reading.deadline, self.sandbox.processes()).await {
            Ok(Some(processes)) if processes >= check.full_at => {
                reading.full_in_a_row += 1;
                if reading.full_in_a_row >= 2 {
                    return Some(Ran::OutOfProcesses {
                        stdout: reading.out.text(),
                        stderr: reading.err.text(),
                        processes,
                    });
                }
            }
            _ => reading.full_in_a_row = 0,
        }
        reading.probe_at = Some(Instant::now() + PROBE_EVERY);
        None
    }

    /// How a command whose output was read to its end ended, as its end line tells; what
    /// the shell keeps for the next command is taken from it.
    fn finish(&mut self, mut reading: Reading) -> Ran {
        let (out, err) = (&mut reading.out, &mut reading.err);
        let between = self.after + out.before + err.before;
        self.after = out.after + err.after;
        // `out` is done: its end line was parsed before it counted as one.
        let Some(ending) = out.rest().and_then(Ending::parse) else {
            return reading.shell_ended();
        };
        self.options = ending.options;
        if let Some(state) = out.state() {
            self.state = Some(String::from_utf8_lossy(state).into_owned());
        }
        let refused_since = match (ending.refused, self.refused) {
            (Some(now), Some(before)) => now.saturating_sub(before),
            _ => 0,
        };
        self.refused = ending.refused;
        if reading.stopped {
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

/// One command's output as it is read: its two streams, and the times that end the reading.
struct Reading {
    out: Frames,
    err: Frames,
    /// When the command is stopped; after a stop, when the shell must have printed its end.
    deadline: Instant,
    /// How long stderr's end line may still trail, once stdout's came.
    grace: Option<Instant>,
    /// When the sandbox's processes are next counted from outside (with a check).
    probe_at: Option<Instant>,
    /// How many counts in a row found the sandbox full.
    full_in_a_row: u32,
    /// The command's processes were stopped at the deadline: the shell lives on if it
    /// prints the command's end.
    stopped: bool,
}

impl Reading {
    fn new(framing: &Framing, limit: u64, deadline: Instant, probed: bool) -> Reading {
        let end_line = |rest: &[u8]| Ending::parse(rest).is_some();
        Reading {
            out: Frames::new(&framing.start, &framing.end, end_line, limit)
                .with_state(&framing.state),
            err: Frames::new(&framing.start, &framing.end, <[u8]>::is_empty, limit),
            deadline,
            grace: None,
            probe_at: probed.then(|| Instant::now() + PROBE_EVERY),
            full_in_a_row: 0,
            stopped: false,
        }
    }

    /// Takes in a chunk of the shell's output, handing what is new to `watcher`.
    fn push(&mut self, chunk: Chunk, watcher: Option<&OutputSink>) {
        match chunk {
            Chunk::Stdout(data) => {
                self.out.push(&data);
                if let Some(w) = watcher {
                    w.send(OutputStream::Stdout, self.out.fresh());
                }
                if self.out.done() && self.grace.is_none() {
                    self.grace = Some(Instant::now() + STDERR_GRACE);
                }
            }
            Chunk::Stderr(data) => {
                self.err.push(&data);
                if let Some(w) = watcher {
                    w.send(OutputStream::Stderr, self.err.fresh());
                }
            }
        }
    }

    /// The shell ended before the command's end: its output so far.
    fn shell_ended(&mut self) -> Ran {
        Ran::ShellEnded {
            stdout: self.out.text(),
            stderr: self.err.text(),
        }
    }
}
