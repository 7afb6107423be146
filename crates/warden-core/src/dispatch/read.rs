//! A client's read of a file in a session's sandbox (`warden/read` over MCP): never a tool
//! call, so never the model's. It runs as the sandbox's user, by its own fixed script, in a
//! shell beside the session's where the sandbox starts one ([`Dispatcher::pipe_for_client`])
//! and else in the session's shell like a command; its answer may be as long as the tool's
//! executor allows a transfer ([`crate::Executor::transfer`]), whatever the policy's `output`
//! limit, which bounds what a call answers the model.

use super::Dispatcher;
use crate::executor::{Denials, Invocation, Meter, SHELL_DETAIL};
use crate::message::{ErrorKind, ToolError};
use crate::pipe::{Pipe, PipeInput, Piped, Piping};
use crate::toolbox::Tool;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::time::Instant;

/// Runs the script with an empty environment and `PATH=/usr/bin:/bin`, whatever the session
/// left in its shell (functions, aliases, `PATH`): a fresh `/bin/sh` by absolute path, which
/// drops the functions a bash `/bin/sh` imports for the builtins it uses, then `env -i`.
const CLEAN: &str = "unset -f '[' echo; for e in /usr/bin/env /bin/env; do \
    if [ -x \"$e\" ]; then exec \"$e\" -i PATH=/usr/bin:/bin LC_ALL=C /bin/sh -c \"$@\"; fi; \
    done; echo 'no env at /usr/bin/env or /bin/env' >&2; exit 127";

/// Arguments: the path, the most bytes, and `raw` or `base64`. Answers `WARDEN-OK`, the
/// size and the file's bytes (raw, or their base64), or `WARDEN-ERR:` and why not (and the
/// size, when the file is too large). Only a regular file: a device or a FIFO has no size
/// and may never end.
const READ: &str = "p=$1\n\
    if [ ! -e \"$p\" ]; then echo WARDEN-ERR:file_not_found\n\
    elif [ -d \"$p\" ]; then echo WARDEN-ERR:is_directory\n\
    elif [ ! -f \"$p\" ] || [ ! -r \"$p\" ]; then echo WARDEN-ERR:permission_denied\n\
    else n=$(wc -c <\"$p\") || exit 1\n\
    if [ \"$n\" -gt \"$2\" ]; then echo WARDEN-ERR:too_large; echo \"$n\"\n\
    else echo WARDEN-OK; echo \"$n\"\n\
    if [ \"$3\" = raw ]; then cat <\"$p\"; else base64 <\"$p\"; fi; fi; fi";

/// How long past a pipe's deadline its executor may take to stop it.
const PIPE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What the detail `file` of a read's error says went wrong with the file itself.
pub const FILE_DETAIL: &str = "file";

/// The detail of a read's error, `true`, when the sandbox's answers did not add up (something
/// in the session answered in the script's place): worth a warning in a log.
pub const SUSPECT_DETAIL: &str = "suspect";

impl Dispatcher {
    /// The bytes of the regular file at the absolute `path` in the sandbox of this session's
    /// `tool`, read as the sandbox's user. A failure with the file itself carries the detail
    /// [`FILE_DETAIL`]: `file_not_found`, `is_directory`, `permission_denied`,
    /// `invalid_path` or `too_large`.
    pub async fn read_file(&self, tool: &str, path: &str) -> Result<Vec<u8>, ToolError> {
        check_path(path)?;
        let bound = self.transfer_bound(tool)?;
        let limit = bound.to_string();
        let raw = clean_command(READ, "warden-read", &[path, &limit, "raw"]);
        // Its two lines, then the file.
        if let Some(piped) = self
            .pipe_for_client(tool, raw, PipeInput::Nothing, bound + 64)
            .await?
        {
            return answered(&piped.stdout, bound, Encoding::Raw);
        }
        let command = clean_command(READ, "warden-read", &[path, &limit, "base64"]);
        // The base64 of `bound` bytes, 76 to a line, and the two lines before it.
        let output = base64_lines(bound) + 64;
        let stdout = self.run_for_client(tool, command, output).await?;
        answered(stdout.as_bytes(), bound, Encoding::Base64)
    }

    /// The most bytes a client may move in or out of the sandbox of `tool` in one request:
    /// its executor's `transfer`, or why there is none.
    pub fn transfer_bound(&self, tool: &str) -> Result<u64, ToolError> {
        let tool = self.tool_named(tool)?;
        tool.executor.transfer().ok_or_else(|| no_transfer(tool))
    }

    /// Runs `command` for a client (never the model: no call is logged) in the session's
    /// sandbox of `tool`, as its commands run (the session's shell, its user, the tool's
    /// concurrency and timeout), and answers its stdout, up to `output` bytes.
    pub async fn run_for_client(
        &self,
        tool: &str,
        command: String,
        output: u64,
    ) -> Result<String, ToolError> {
        let tool = self.tool_named(tool)?;
        let (caller_env, image) = self.chosen(tool)?;
        let _permit = self.gate.admit(tool).await?;
        let mut limits = tool.limits;
        limits.output = output;
        let deadline = Instant::now() + limits.timeout;
        let invocation = Invocation {
            // Its own: what it writes to a session's view is committed as a call of its own.
            call_id: crate::call_id::next(),
            arguments: serde_json::json!({ "command": command }),
            limits,
            deadline,
            denials: Denials::default(),
            session: self.session.id,
            usage: Meter::default(),
            output: None,
            caller_env,
            image,
            hold: None,
        };
        self.session.touch();
        let ran = tokio::time::timeout_at(deadline.into(), tool.executor.execute(invocation))
            .await
            .map_err(|_| ToolError::timed_out(limits.timeout))??;
        Ok(ran
            .details
            .get(SHELL_DETAIL)
            .and_then(|shell| shell.get("stdout"))
            .and_then(|out| out.as_str())
            .unwrap_or_default()
            .to_owned())
    }

    /// Runs `command` for a client (never the model: no call is logged) beside the shell of
    /// this session's sandbox of `tool`, `input` on its stdin and its stdout kept up to
    /// `output` bytes, raw ([`Pipe`]), by the tool's timeout; the session's shell is started
    /// first when it has not. `None` when the tool's sandbox starts no shell beside its own
    /// (a sandbox with an egress gate, gVisor, an engine elsewhere): the request then goes
    /// through the session's shell ([`Dispatcher::run_for_client`]).
    pub async fn pipe_for_client(
        &self,
        tool: &str,
        command: String,
        input: PipeInput<'_>,
        output: u64,
    ) -> Result<Option<Piped>, ToolError> {
        let found = self.tool_named(tool)?;
        let deadline = Instant::now() + found.limits.timeout;
        let pipe = Pipe {
            command,
            input,
            output,
            deadline,
        };
        for first in [true, false] {
            let permit = self.gate.admit(found).await?;
            self.session.touch();
            // The executor stops the command at the deadline itself, with everything it
            // started; this bounds an executor that does not, a moment later.
            let piping = tokio::time::timeout_at(
                (deadline + PIPE_GRACE).into(),
                found.executor.pipe(self.session.id, &pipe),
            )
            .await
            .map_err(|_| ToolError::timed_out(found.limits.timeout))?;
            drop(permit);
            match piping {
                Piping::Ran(piped) => return piped.map(Some),
                Piping::NoShellYet if first => {
                    self.run_for_client(tool, ":".into(), 0).await?;
                }
                Piping::NoShellYet | Piping::NotBeside => break,
            }
        }
        Ok(None)
    }

    /// Starts this session's sandbox of `tool` where it has not started, and the shell that
    /// carries a client's transfers beside the session's where the sandbox has one
    /// ([`Dispatcher::pipe_for_client`]): a client that knows a command or a transfer is
    /// coming (a fork's restore) has them start meanwhile. Nothing for a tool with no shell.
    pub async fn start_sandbox(&self, tool: &str) -> Result<(), ToolError> {
        self.pipe_for_client(tool, ":".into(), PipeInput::Nothing, 0)
            .await
            .map(drop)
    }

    /// warden's writing end of the FIFO that the shell of this session's sandbox of `tool`
    /// holds on its descriptor `fd` ([`crate::Executor::shell_fifo`]), made there by a
    /// client's command: None where warden cannot take it (said in the log), so that the
    /// bytes go another way.
    pub async fn shell_fifo(
        &self,
        tool: &str,
        fd: i32,
    ) -> Result<Option<std::os::fd::OwnedFd>, ToolError> {
        let found = self.tool_named(tool)?;
        match found.executor.shell_fifo(self.session.id, fd).await {
            Some(Ok(fifo)) => Ok(Some(fifo)),
            Some(Err(e)) => {
                tracing::info!(tool, "the session's shell's FIFO could not be taken: {e}");
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Starts this session's shell of `tool` where it has not started, and no shell beside
    /// it: for a client whose next request goes through that shell (a fork's restore, which
    /// takes a FIFO of the shell's: [`Dispatcher::shell_fifo`]). Nothing for a tool whose
    /// sandbox takes no client's transfers ([`Dispatcher::transfer_bound`]), which that
    /// request would be refused.
    pub async fn start_shell(&self, tool: &str) -> Result<(), ToolError> {
        if self.tool_named(tool)?.executor.transfer().is_none() {
            return Ok(());
        }
        self.run_for_client(tool, ":".into(), 0).await.map(drop)
    }

    fn tool_named(&self, tool: &str) -> Result<&Tool, ToolError> {
        self.toolbox.get(tool).ok_or_else(|| {
            ToolError::new(ErrorKind::UnknownTool, format!("no tool named {tool:?}"))
        })
    }
}

/// The bytes of base64 `text` written in lines (as `base64` writes it, 76 to a line), or
/// None when it is not base64. Many megabytes of it may come: the lines are joined a slice
/// at a time, not a character at a time.
pub fn decode_lines(text: &str) -> Option<Vec<u8>> {
    let mut joined = Vec::with_capacity(text.len());
    for line in text.as_bytes().split(|&b| b == b'\n') {
        joined.extend_from_slice(line.trim_ascii());
    }
    STANDARD.decode(joined).ok()
}

/// How many bytes of text the base64 of `bytes` bytes takes, 76 to a line.
pub fn base64_lines(bytes: u64) -> u64 {
    bytes.div_ceil(3) * 4 * 77 / 76 + 1
}

/// A command that runs `script` (its `$0` being `name`, then `args`) in a fresh `/bin/sh`
/// with an empty environment and `PATH=/usr/bin:/bin`, whatever the session left in its shell
/// (functions, aliases, `PATH`): the way a client's request runs fixed code in a sandbox.
pub fn clean_command(script: &str, name: &str, args: &[&str]) -> String {
    let words = [CLEAN, "sh", script, name]
        .into_iter()
        .chain(args.iter().copied());
    let quoted: Vec<String> = words.map(quoted).collect();
    format!("'/bin/sh' -c {}", quoted.join(" "))
}

/// `word` as one shell word, in single quotes.
pub fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// How a client's script printed a file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    /// As they are (beside the session's shell, [`Dispatcher::pipe_for_client`]).
    Raw,
    /// Their base64, 76 to a line (through the session's shell).
    Base64,
}

/// A path a client names in a sandbox: absolute, and one line.
pub(super) fn check_path(path: &str) -> Result<(), ToolError> {
    if !path.starts_with('/') || path.contains(['\0', '\n']) {
        return Err(file_error(
            "invalid_path",
            "the path must be absolute, without NUL or line breaks",
        ));
    }
    Ok(())
}

/// What a client's script printed: a status line (`WARDEN-OK`, or `WARDEN-ERR:` and a code),
/// a size line, and what follows.
pub(super) struct Printed<'a> {
    /// The error's code, one of those the script may print.
    pub refused: Option<&'static str>,
    pub size: Option<u64>,
    pub rest: &'a [u8],
}

/// Reads what a client's script printed; an error's code must be one of `codes`, a status
/// line there must be: else the sandbox's answers do not add up.
pub(super) fn printed<'a>(
    printed: &'a [u8],
    codes: &[&'static str],
) -> Result<Printed<'a>, ToolError> {
    let mut lines = printed.splitn(3, |&b| b == b'\n');
    let status = String::from_utf8_lossy(lines.next().unwrap_or_default());
    let size = lines
        .next()
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.trim().parse::<u64>().ok());
    let rest = lines.next().unwrap_or_default();
    let refused = match status.strip_prefix("WARDEN-ERR:") {
        Some(code) => match codes.iter().find(|&&c| c == code) {
            Some(&code) => Some(code),
            None => return Err(lie(format!("an error of no known kind, {code:?}"))),
        },
        None if status == "WARDEN-OK" => None,
        None => {
            return Err(lie(format!(
                "no status line but {:?}",
                status.get(..80).unwrap_or(&status)
            )));
        }
    };
    Ok(Printed {
        refused,
        size,
        rest,
    })
}

/// The file's bytes from what [`READ`] printed; the sandbox's answer is not trusted: its size
/// must be a number within `bound`, and the bytes must be exactly that many.
fn answered(stdout: &[u8], bound: u64, encoding: Encoding) -> Result<Vec<u8>, ToolError> {
    let codes = [
        "file_not_found",
        "is_directory",
        "permission_denied",
        "too_large",
    ];
    let Printed {
        refused,
        size,
        rest,
    } = printed(stdout, &codes)?;
    match (refused, size) {
        (Some("too_large"), Some(size)) => {
            return Err(file_error(
                "too_large",
                format!(
                    "the file has {size} bytes, more than the {bound} its tool's policy lets a client read (`transfer`)"
                ),
            ));
        }
        (Some("too_large"), None) => return Err(lie("a size that is no number".into())),
        (Some(code), _) => return Err(file_error(code, code.replace('_', " "))),
        (None, _) => {}
    }
    let size = size
        .filter(|&n| n <= bound)
        .ok_or_else(|| lie("a size that is no number within the bound".into()))?;
    let bytes = match encoding {
        Encoding::Raw => rest.to_vec(),
        Encoding::Base64 => std::str::from_utf8(rest)
            .ok()
            .and_then(decode_lines)
            .ok_or_else(|| lie("content that is not base64".into()))?,
    };
    if bytes.len() as u64 != size {
        return Err(lie(format!(
            "{} bytes where its size said {size}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// A failure with the file itself, `code` in [`FILE_DETAIL`].
pub(super) fn file_error(code: &str, message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorKind::InvalidArguments, message).with_detail(FILE_DETAIL, code)
}

/// The sandbox's answers did not add up (something in the session answered in the script's
/// place): the file exists, so no `file_not_found`.
pub(super) fn lie(what: String) -> ToolError {
    file_error(
        "permission_denied",
        format!("the sandbox's answers do not add up: {what}"),
    )
    .with_detail(SUSPECT_DETAIL, true)
}

fn no_transfer(tool: &Tool) -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        format!(
            "the policy of {:?} lets no client read its sandbox's files: write `transfer = \
             \"64MiB\"` (the most bytes a read may move) under its [executor]",
            tool.spec.name
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_script_printed_is_checked_before_it_is_believed() {
        let ok = answered(b"WARDEN-OK\n5\naGVsbG8=\n", 10, Encoding::Base64).unwrap();
        assert_eq!(ok, b"hello");
        let raw = answered(b"WARDEN-OK\n6\nhel\nlo", 10, Encoding::Raw).unwrap();
        assert_eq!(raw, b"hel\nlo");
        let kind = |out: &str, encoding| {
            let e = answered(out.as_bytes(), 10, encoding).unwrap_err();
            e.details[FILE_DETAIL].as_str().unwrap().to_owned()
        };
        for encoding in [Encoding::Raw, Encoding::Base64] {
            assert_eq!(
                kind("WARDEN-ERR:file_not_found\n", encoding),
                "file_not_found"
            );
            assert_eq!(kind("WARDEN-ERR:too_large\n99\n", encoding), "too_large");
            for lie in [
                "WARDEN-OK\n11\n",
                "WARDEN-OK\nfive\naGVsbG8=\n",
                "hello\n",
                "WARDEN-ERR:made_up\n",
                "WARDEN-ERR:too_large\n",
            ] {
                assert_eq!(kind(lie, encoding), "permission_denied", "{lie}");
            }
        }
        for lie in ["WARDEN-OK\n6\naGVsbG8=\n", "WARDEN-OK\n5\nnot base64!\n"] {
            assert_eq!(kind(lie, Encoding::Base64), "permission_denied", "{lie}");
        }
        assert_eq!(
            kind("WARDEN-OK\n5\nhello!", Encoding::Raw),
            "permission_denied"
        );
    }

    #[test]
    fn a_path_is_one_word_whatever_it_holds() {
        let c = clean_command(READ, "warden-read", &["/tmp/it's $(x) `y`", "7", "raw"]);
        assert!(c.starts_with("'/bin/sh' -c 'unset -f"), "{c}");
        assert!(
            c.ends_with("'warden-read' '/tmp/it'\\''s $(x) `y`' '7' 'raw'"),
            "{c}"
        );
        assert!(check_path("/tmp/a\nb").is_err() && check_path("tmp").is_err());
    }
}
