//! One command in a per-call container: the script its shell is sent, its output read from
//! its start lines to its end lines (or its deadline), its counters and its copied roots.

use crate::container::Container;
use crate::engine::Engine;
use crate::files::{Copied, CopiedIn, ReadBack};
use crate::launch::Started;
use bollard::Docker;
use bollard::container::{AttachContainerResults, LogOutput};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warden_command::cgroup::Cgroup;
use warden_command::session::{Frames, nonce};
use warden_core::{ToolError, Usage};
use warden_net::{Proxy, Scope, Traffic};

/// How a per-call container's command ended.
pub(crate) enum Ended {
    Exited {
        code: i64,
        oom: bool,
        stdout: String,
        stderr: String,
    },
    /// The deadline passed; the container was removed.
    TimedOut { stdout: String, stderr: String },
}

/// The shell of a per-call container, reading its command on stdin.
pub(crate) const SHELL: &str = "/bin/sh";

/// What a per-call container's shell is sent: one `{ …; }` list, which the shell reads whole
/// before it runs any of it. It prints the start line on both streams, runs `argv` with stdin
/// on `/dev/null`, prints the end line on both streams (stdout's with the command's status),
/// and waits for its stdin to close before it exits: warden has the answer at the end line,
/// while the container, and its cgroup's counters, still stand. The lines' nonces travel on
/// stdin, never in argv, so the command cannot read them and end its output early; each
/// argument is one single-quoted word (a template refuses NUL, the one byte a word cannot
/// carry). The start line tells warden that the shell took the command: a pooled container
/// that died while it waited never prints it.
pub(crate) fn script(argv: &[String], start: &str, end: &str) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    format!(
        "{{ printf '\\n%s\\n' '{start}' >&2; printf '\\n%s\\n' '{start}'; set -- {}; \
         \"$@\" </dev/null; r=$?; printf '\\n%s\\n' '{end}' >&2; printf '\\n%s %s\\n' '{end}' \"$r\"; \
         IFS= read -r w; exit \"$r\"; }}\n",
        words.join(" ")
    )
}

/// The status on stdout's end line (` 0`), if that is what follows its marker.
fn status(rest: &[u8]) -> Option<i64> {
    let digits = rest.strip_prefix(b" ")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// What a per-call container's roots came to: the notes for its answer (what was left out,
/// what was written back in place), or why its read-write copies were not read back, staged
/// or written back.
pub(crate) type FilesOutcome = Result<Vec<String>, ToolError>;

/// A container's read-write copies as read back, or why they could not be.
type Read = Result<Vec<ReadBack>, ToolError>;

/// One command for a started per-call container: its argv, output cap and deadline, the scope
/// its gate (if any) refuses into, and its copied roots (with the tool's name), if any.
pub(crate) struct OneCall<'a> {
    pub argv: &'a [String],
    pub output_limit: u64,
    pub deadline: Instant,
    pub scope: Scope,
    pub copied: Option<(&'a Copied, &'a str)>,
}

/// What a per-call container came to: how its command ended, what went through its gate,
/// what its cgroup counted, and what became of its copied roots.
pub(crate) struct Ran {
    pub ended: Ended,
    pub traffic: Option<Traffic>,
    pub used: Usage,
    pub files: FilesOutcome,
}

/// Runs one command in `started`, a per-call container, to its end or its deadline; the
/// caller removes the container after. With `copied` roots, the command starts once they are
/// in, and its read-write roots are read back when it ends (not at the deadline): staged in
/// the container's view when it has one (the caller settles it), else written back. Answers
/// what went through the gate too, and the CPU and memory figures the container's cgroup had
/// at the command's end (or at the deadline); `None` when the container's shell ended before
/// it took the command (it died while it waited).
pub(crate) async fn run_once(
    engine: &Engine,
    started: &mut Started,
    call: OneCall<'_>,
) -> Result<Option<Ran>, ToolError> {
    let OneCall {
        argv,
        output_limit,
        deadline,
        scope,
        copied,
    } = call;
    // A pooled container's view was made before the call: its conflicts count from now,
    // before its roots are copied in.
    if let Some(view) = &mut started.view {
        view.begin();
    }
    let copied_in = match copied {
        Some((copied, _)) => Some(
            copied
                .copy_in(engine, &started.docker, &started.container.id)
                .await?,
        ),
        None => None,
    };
    if let Some(gate) = &started.gate {
        gate.begin(scope);
    }
    let (start, end) = (nonce(), nonce());
    // The command starts here. A failed write shows as output ending without the start line.
    let _ = started
        .attached
        .input
        .write_all(script(argv, &start, &end).as_bytes())
        .await;
    let run = Run {
        container: &started.container,
        cgroup: started.cgroup.as_ref(),
        engine,
        docker: &started.docker,
        output_limit,
        deadline,
        copied: copied.map(|(c, _)| c).zip(copied_in.as_ref()),
    };
    let read = run.read_to_end(&mut started.attached, &start, &end).await;
    let traffic = started.gate.as_ref().map(Proxy::end);
    let Some((ended, used, files)) = read else {
        return Ok(None);
    };
    let mut notes = copied_in.map(|c| c.notes).unwrap_or_default();
    // What the copies changed is the call's view's, where it has one; else written in place.
    let back = match (files, started.view.take()) {
        (Some(Ok(copies)), Some(view)) => {
            crate::files::staged(copies, view)
                .await
                .map(|(view, staged)| {
                    started.view = Some(view);
                    staged.notes
                })
        }
        (Some(Ok(copies)), None) => {
            crate::files::in_place(copies, copied.map_or("", |(_, tool)| tool)).await
        }
        (Some(Err(e)), _) => Err(e),
        (None, view) => {
            started.view = view;
            Ok(Vec::new())
        }
    };
    let files = back.map(|more| {
        notes.extend(more);
        notes
    });
    Ok(Some(Ran {
        ended: ended?,
        traffic,
        used,
        files,
    }))
}

/// One per-call container while it runs.
struct Run<'a> {
    container: &'a Container,
    /// Its cgroup's counters, when they are on this machine.
    cgroup: Option<&'a Cgroup>,
    engine: &'a Engine,
    docker: &'a Docker,
    /// Its copied roots, and what was copied in.
    copied: Option<(&'a Copied, &'a CopiedIn)>,
    output_limit: u64,
    deadline: Instant,
}

impl Run<'_> {
    /// Reads its output, from the start lines `start` until the end lines `end` or the
    /// deadline. At the end lines, or at the deadline, the container's counters are read
    /// first: they go with its cgroup. At the end lines its read-write roots are read back,
    /// while it still runs (their copies go with it), and the command's status is on stdout's:
    /// the answer needs nothing more of the container. `None` when the output ended before the
    /// start line: the shell never took the command.
    async fn read_to_end(
        &self,
        attached: &mut AttachContainerResults,
        start: &str,
        end: &str,
    ) -> Option<(Result<Ended, ToolError>, Usage, Option<Read>)> {
        let (start, end) = (format!("\n{start}"), format!("\n{end}"));
        let is_status = |rest: &[u8]| status(rest).is_some();
        let mut stdout = Frames::new(&start, &end, is_status, self.output_limit);
        let mut stderr = Frames::between(&start, &end, self.output_limit);
        loop {
            match tokio::time::timeout_at(self.deadline, attached.output.next()).await {
                Err(_) => {
                    // No write-back: the call's time is up, and stopping the call midway
                    // would leave it to chance. The answer says so.
                    let ended = Ended::TimedOut {
                        stdout: stdout.text(),
                        stderr: stderr.text(),
                    };
                    return Some((Ok(ended), self.used(), None));
                }
                Ok(None) if !stdout.started() => return None,
                Ok(None) => break,
                Ok(Some(Ok(LogOutput::StdErr { message }))) => stderr.push(&message),
                Ok(Some(Ok(frame))) => stdout.push(&frame.into_bytes()),
                Ok(Some(Err(e))) => {
                    tracing::warn!(container = %self.container.id, "reading output failed: {e}");
                    break;
                }
            }
            if let (true, Some(code)) = (stderr.done(), stdout.rest().and_then(status)) {
                let used = self.used();
                let read = self.read_back().await;
                // The shell exits once its stdin closes; the container is removed after.
                let _ = attached.input.shutdown().await;
                let oom = code == 137 && self.container.oom_killed_after_exit().await;
                let ended = Ended::Exited {
                    code,
                    oom,
                    stdout: stdout.text(),
                    stderr: stderr.text(),
                };
                return Some((Ok(ended), used, read));
            }
        }
        // Without its end lines the container ended first (its shell was killed: the memory
        // limit, say): its status is the container's, nothing was measured, and its
        // read-write copies are gone (which the write-back finds, and says).
        let status =
            tokio::time::timeout_at(self.deadline, self.container.exit_status(self.engine)).await;
        let ended = match status {
            Ok(Ok((code, oom))) => Ok(Ended::Exited {
                code,
                oom,
                stdout: stdout.text(),
                stderr: stderr.text(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(Ended::TimedOut {
                stdout: stdout.text(),
                stderr: stderr.text(),
            }),
        };
        Some((ended, Usage::default(), self.read_back().await))
    }

    /// Reads its read-write roots back; `None` without copied roots.
    async fn read_back(&self) -> Option<Read> {
        let (copied, copied_in) = self.copied?;
        Some(
            copied_in
                .read_back(copied, self.engine, self.docker, &self.container.id)
                .await,
        )
    }

    /// The container's CPU and memory peak so far.
    fn used(&self) -> Usage {
        let Some(cgroup) = self.cgroup else {
            return Usage::default();
        };
        Usage {
            cpu_ms: cgroup.cpu_ms(),
            peak_memory_bytes: cgroup.peak(),
            ..Usage::default()
        }
    }
}
