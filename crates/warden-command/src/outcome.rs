//! What a command produced, for the model: captured output up to a cap (the rest counted, not
//! kept, so a flood costs no memory), the exit code, and the timeout message. Shared by every
//! executor that runs a command line (docker, host).

use serde_json::json;
use std::time::Duration;
use warden_core::{ByteSize, ErrorKind, Limits, Output, ToolError};

/// The model's timeout lowers the policy's, never raises it. The dispatcher's deadline for
/// the policy's timeout started a little earlier than ours: stop just before it, so that the
/// answer is this executor's (partial output, container gone) rather than a bare timeout.
pub fn effective_timeout(asked: Option<Duration>, policy: Duration) -> Duration {
    let margin = (policy / 20).min(Duration::from_millis(100));
    match asked {
        Some(t) if t < policy - margin => t,
        _ => policy - margin,
    }
}

/// What the model reads: stdout, stderr, the exit code.
pub fn render(code: i64, stdout: &str, stderr: &str) -> String {
    let mut text = stdout.to_owned();
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(stderr);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("[exit code {code}]"));
    text
}

/// Success for exit code 0; else `exit_status` (or `out_of_memory` when `oom`) carrying the
/// output; `note` is appended for the model.
pub fn answer(
    code: i64,
    oom: bool,
    stdout: &str,
    stderr: &str,
    limits: &Limits,
    note: Option<&str>,
) -> Result<Output, ToolError> {
    let mut content = render(code, stdout, stderr);
    if let Some(note) = note {
        content.push_str(&format!("\n[{note}]"));
    }
    if code == 0 {
        return Ok(Output {
            content,
            structured: Some(json!({ "exit_code": 0 })),
            stdout: Some(stdout.to_owned()),
            stderr: Some(stderr.to_owned()),
            ..Output::default()
        });
    }
    let (kind, head) = if oom {
        (
            ErrorKind::OutOfMemory,
            format!(
                "the command was killed for using more than its memory limit of {}",
                ByteSize(limits.memory)
            ),
        )
    } else if code == 137 {
        (
            ErrorKind::ExitStatus,
            "the command exited with status 137 (killed by SIGKILL)".to_owned(),
        )
    } else {
        (
            ErrorKind::ExitStatus,
            format!("the command exited with status {code}"),
        )
    };
    Err(ToolError::new(kind, format!("{head}\n{content}"))
        .with_detail("exit_code", code)
        .with_detail("stdout", stdout)
        .with_detail("stderr", stderr))
}

pub fn timed_out(timeout: Duration, stdout: &str, stderr: &str, what: &str) -> ToolError {
    let mut message = format!(
        "the command did not finish within {timeout:?} and was stopped ({what}); try a \
         quicker command or a smaller input"
    );
    let partial = [("stdout", stdout), ("stderr", stderr)];
    for (name, text) in partial.iter().filter(|(_, t)| !t.is_empty()) {
        message.push_str(&format!("\n[{name} so far]\n{text}"));
    }
    ToolError::new(ErrorKind::Timeout, message)
        .with_detail("timeout_ms", timeout.as_millis() as u64)
        .with_detail("stdout", stdout)
        .with_detail("stderr", stderr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_can_only_lower_the_timeout() {
        let policy = Duration::from_secs(10);
        let ours = Duration::from_millis(9900);
        assert_eq!(effective_timeout(None, policy), ours);
        assert_eq!(
            effective_timeout(Some(Duration::from_secs(600)), policy),
            ours
        );
        assert_eq!(
            effective_timeout(Some(Duration::from_secs(1)), policy),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn messages_show_output_and_exit_code() {
        assert_eq!(render(0, "hi\n", ""), "hi\n[exit code 0]");
        assert_eq!(render(2, "a", "b"), "a\n[stderr]\nb\n[exit code 2]");
        let limits = Limits::default();
        let e = answer(3, false, "out", "err", &limits, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ExitStatus);
        assert!(e.message.contains("status 3") && e.message.contains("out"));
        assert_eq!(e.details["exit_code"], 3);
        let e = answer(137, true, "", "", &limits, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfMemory);
    }
}
