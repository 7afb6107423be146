//! What a command produced, for the model: captured output up to a cap (the rest counted, not
//! kept, so a flood costs no memory), the exit code, and the timeout message. Shared by every
//! executor that runs a command line (docker, host).

use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;
use warden_core::{
    ByteSize, ErrorKind, Invocation, Limits, MARKER_MAX, Output, SHELL_DETAIL, ToolError, shorten,
    split_marker,
};

/// A command's time: the timeout its answer names, and when the executor stops it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// What a `timeout` answer names: the model's timeout when it asked for less than the
    /// policy's, else the policy's.
    pub named: Duration,
    /// The model's timeout, when it asked for less than the policy's: counted from the
    /// command's start (a session's command starts when it gets the shell).
    asked: Option<Duration>,
    /// The latest the command is stopped: the call's [`Invocation::answer_by`], just before
    /// the dispatcher's deadline, so that the answer is the executor's (partial output,
    /// sandbox gone or kept) rather than a bare timeout.
    latest: Instant,
}

impl Deadline {
    /// The time of call `inv`, whose model asked for `asked`: it lowers the policy's
    /// timeout, never raises it.
    pub fn of(asked: Option<Duration>, inv: &Invocation) -> Deadline {
        let policy = inv.limits.timeout;
        let asked = asked.filter(|t| *t < policy);
        Deadline {
            named: asked.unwrap_or(policy),
            asked,
            latest: Instant::from_std(inv.answer_by()),
        }
    }

    /// When a command that starts now is stopped.
    pub fn stop_at(&self) -> Instant {
        match self.asked {
            Some(t) => (Instant::now() + t).min(self.latest),
            None => self.latest,
        }
    }
}

/// What the model reads: stdout, stderr, the exit code and `note`, within `limit` bytes. The
/// streams are cut to make room (each keeping its marker, counting all it lost), so the exit
/// code and the note always survive the output cap.
pub fn render(code: i64, stdout: &str, stderr: &str, note: Option<&str>, limit: u64) -> String {
    let tail = match note {
        Some(note) => format!("[exit code {code}]\n[{note}]"),
        None => format!("[exit code {code}]"),
    };
    // Newlines and the stderr header around the streams.
    const FRAMING: usize = "\n[stderr]\n\n".len();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let room = limit.saturating_sub(tail.len() + FRAMING);
    let (stdout, stderr) = if stdout.len() + stderr.len() <= room {
        (stdout.to_owned(), stderr.to_owned())
    } else {
        // stderr gets what stdout leaves, and at least a quarter when both are long.
        let room = room.saturating_sub(2 * MARKER_MAX);
        let for_stderr = stderr
            .len()
            .min((room / 4).max(room.saturating_sub(stdout.len())));
        (
            shorten(stdout, room - for_stderr),
            shorten(stderr, for_stderr),
        )
    };
    let mut text = stdout;
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(&stderr);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&tail);
    text
}

/// A command's result as data, for [`SHELL_DETAIL`]: its exit code (`null` when it was
/// stopped before it exited), its streams as captured (each up to the output limit) with
/// warden's truncation marker taken off and the bytes it stood for counted, and warden's notes.
pub fn shell(exit_code: Option<i64>, stdout: &str, stderr: &str, notes: &[String]) -> Value {
    let (stdout, stdout_dropped) = split_marker(stdout);
    let (stderr, stderr_dropped) = split_marker(stderr);
    json!({
        "exit_code": exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": stdout_dropped + stderr_dropped > 0,
        "dropped_bytes": { "stdout": stdout_dropped, "stderr": stderr_dropped },
        "notes": notes,
    })
}

/// What ended a command that did not exit with 0, as the sandbox's own records tell it (the
/// engine's or the kernel's word, never how fast the end was reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// It exited with its status, or a signal no limit sent ended it.
    Exited,
    /// The memory limit's killer ended it.
    OutOfMemory,
    /// Another limit ended it: the sentence that says which, for the model.
    Limit(String),
}

impl Cause {
    /// [`Cause::OutOfMemory`] when the memory limit's killer ended it, else [`Cause::Exited`].
    pub fn of_memory(oom: bool) -> Cause {
        if oom {
            Cause::OutOfMemory
        } else {
            Cause::Exited
        }
    }
}

/// Success for exit code 0; else `exit_status`, `out_of_memory` or `limit_exceeded` as `cause`
/// says, carrying the output; `notes` are appended for the model, one bracketed line each. The
/// result as data goes in [`SHELL_DETAIL`] either way.
pub fn answer(
    code: i64,
    cause: &Cause,
    stdout: &str,
    stderr: &str,
    limits: &Limits,
    notes: &[String],
) -> Result<Output, ToolError> {
    let data = shell(Some(code), stdout, stderr, notes);
    let note = (!notes.is_empty()).then(|| notes.join("]\n["));
    let note = note.as_deref();
    if code == 0 {
        let mut details = serde_json::Map::new();
        details.insert(SHELL_DETAIL.into(), data);
        return Ok(Output {
            content: render(code, stdout, stderr, note, limits.output),
            structured: Some(json!({ "exit_code": 0 })),
            details,
            ..Output::default()
        });
    }
    let (kind, head) = match cause {
        Cause::OutOfMemory => (
            ErrorKind::OutOfMemory,
            format!(
                "the command was killed for using more than its memory limit of {}",
                ByteSize(limits.memory)
            ),
        ),
        Cause::Limit(sentence) => (ErrorKind::LimitExceeded, sentence.clone()),
        Cause::Exited if code == 137 => (
            ErrorKind::ExitStatus,
            "the command exited with status 137 (killed by SIGKILL)".to_owned(),
        ),
        Cause::Exited => (
            ErrorKind::ExitStatus,
            format!("the command exited with status {code}"),
        ),
    };
    let room = limits.output.saturating_sub(head.len() as u64 + 1);
    let content = render(code, stdout, stderr, note, room);
    Err(ToolError::new(kind, format!("{head}\n{content}")).with_detail(SHELL_DETAIL, data))
}

/// A `timeout`: the command was stopped at its time limit `limit`, as
/// [`ToolError::timed_out`] says; `what` says what became of it (a note of the result as data
/// too), and the output so far follows.
pub fn timed_out(limit: Duration, stdout: &str, stderr: &str, what: &str) -> ToolError {
    let mut error = ToolError::timed_out(limit);
    error.message.push_str(&format!("\n[{what}]"));
    let partial = [("stdout", stdout), ("stderr", stderr)];
    for (name, text) in partial.iter().filter(|(_, t)| !t.is_empty()) {
        error
            .message
            .push_str(&format!("\n[{name} so far]\n{text}"));
    }
    error.with_detail(
        SHELL_DETAIL,
        shell(None, stdout, stderr, &[what.to_owned()]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_can_only_lower_the_timeout() {
        let policy = Duration::from_secs(10);
        let inv = Invocation {
            call_id: "c1".into(),
            arguments: json!({}),
            limits: Limits {
                timeout: policy,
                ..Limits::default()
            },
            deadline: std::time::Instant::now() + policy,
            denials: Default::default(),
            session: warden_core::SessionId::fresh(),
            usage: Default::default(),
            output: None,
            caller_env: Default::default(),
            image: None,
            hold: None,
        };
        // Stopped a tenth of a second before the dispatcher's deadline.
        let ours = Instant::from_std(inv.deadline) - Duration::from_millis(100);
        let of = |asked: Option<u64>| Deadline::of(asked.map(Duration::from_secs), &inv);
        assert_eq!((of(None).stop_at(), of(None).named), (ours, policy));
        assert_eq!(
            (of(Some(600)).stop_at(), of(Some(600)).named),
            (ours, policy)
        );
        let one = Duration::from_secs(1);
        let before = Instant::now();
        let (stop_at, named) = (of(Some(1)).stop_at(), of(Some(1)).named);
        assert!(stop_at >= before + one && stop_at <= Instant::now() + one);
        assert_eq!(named, one);
    }

    #[test]
    fn messages_show_output_and_exit_code() {
        assert_eq!(render(0, "hi\n", "", None, 100), "hi\n[exit code 0]");
        assert_eq!(
            render(2, "a", "b", Some("note"), 100),
            "a\n[stderr]\nb\n[exit code 2]\n[note]"
        );
        let limits = Limits::default();
        let e = answer(3, &Cause::Exited, "out", "err", &limits, &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ExitStatus);
        assert!(e.message.contains("status 3") && e.message.contains("out"));
        assert_eq!(e.details["shell"]["exit_code"], 3);
        let e = answer(137, &Cause::OutOfMemory, "", "", &limits, &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfMemory);
        let cpu = Cause::Limit("the command used its CPU time limit of 1s".into());
        let e = answer(152, &cpu, "", "", &limits, &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert!(
            e.message
                .starts_with("the command used its CPU time limit of 1s\n")
        );
        assert!(e.message.contains("[exit code 152]"), "{}", e.message);
    }

    #[test]
    fn long_streams_make_room_for_the_exit_code_and_count_what_they_lost() {
        let mut out = warden_core::Capped::new(1000);
        out.push(&vec![b'o'; 5000]);
        let text = render(0, &out.text(), &"e".repeat(900), None, 1000);
        assert!(text.len() <= 1000, "{} bytes", text.len());
        assert!(text.ends_with("[exit code 0]"), "{text}");
        let shown = text.bytes().take_while(|b| *b == b'o').count() as u64;
        let marker = format!("output truncated, {} more bytes not shown]", 5000 - shown);
        assert!(text.contains(&marker), "{text}");
        assert!(text.contains("[stderr]\neee"), "{text}");
        let limits = Limits {
            output: 1000,
            ..Limits::default()
        };
        let notes = ["a note".to_owned(), "another".to_owned()];
        let e = answer(3, &Cause::Exited, &out.text(), "", &limits, &notes).unwrap_err();
        assert!(e.message.len() <= 1000, "{} bytes", e.message.len());
        assert!(
            e.message.ends_with("[exit code 3]\n[a note]\n[another]"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_result_as_data_holds_the_streams_exactly_whatever_they_contain() {
        // Lines that look like the rendered text's own framing stay in their stream.
        let stdout = "a\n[stderr]\nb\n[exit code 0]\n";
        let notes = ["the shell ended".to_owned()];
        let e = answer(9, &Cause::Exited, stdout, "e\n", &Limits::default(), &notes).unwrap_err();
        let data = &e.details[SHELL_DETAIL];
        assert_eq!(data["exit_code"], 9);
        assert_eq!(data["stdout"], stdout);
        assert_eq!(data["stderr"], "e\n");
        assert_eq!(data["notes"], json!(["the shell ended"]));
        assert_eq!(data["truncated"], false);
        let mut capped = warden_core::Capped::new(10);
        capped.push(&[b'x'; 25]);
        let ok = answer(
            0,
            &Cause::Exited,
            &capped.text(),
            "",
            &Limits::default(),
            &[],
        )
        .unwrap();
        let data = &ok.details[SHELL_DETAIL];
        assert_eq!(data["stdout"], "x".repeat(10));
        assert_eq!(data["truncated"], true);
        assert_eq!(data["dropped_bytes"], json!({ "stdout": 15, "stderr": 0 }));
        let t = timed_out(Duration::from_secs(1), "so far", "", "it was killed");
        assert_eq!(t.details[SHELL_DETAIL]["exit_code"], Value::Null);
        assert_eq!(t.details[SHELL_DETAIL]["notes"], json!(["it was killed"]));
        // The one wording of a timeout, then what became of the command and its output.
        assert_eq!(t.kind, ErrorKind::Timeout);
        assert_eq!(t.details["timeout_ms"], 1000);
        assert_eq!(
            t.message,
            "the tool did not finish within its time limit of 1s and was stopped; try smaller \
             input or a cheaper request\n[it was killed]\n[stdout so far]\nso far"
        );
    }
}
