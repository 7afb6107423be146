//! A client's fixed command run beside a session's shell with its bytes passed through raw:
//! the way large transfers (a file written or read, a snapshot's archive) reach a sandbox
//! without the session's shell parsing them or warden framing them as base64.

use crate::message::ToolError;
use std::time::Instant;

/// A client's command for a session's sandbox (never the model's: no call is logged).
#[derive(Debug, Clone)]
pub struct Pipe<'a> {
    /// A command line for a fresh POSIX shell in the sandbox, as its user (say, from
    /// [`crate::clean_command`]); its shell `exec`s it.
    pub command: String,
    /// Written to the command's stdin, which is then closed; `None`: its stdin is closed at
    /// once.
    pub input: Option<&'a [u8]>,
    /// The most bytes of stdout kept: past them the command is stopped and the answer is
    /// [`Piped::overflowed`].
    pub output: u64,
    /// When the command is stopped with everything it started.
    pub deadline: Instant,
}

/// What a [`Pipe`]'s command answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Piped {
    /// Its stdout, as it wrote it, up to [`Pipe::output`] bytes.
    pub stdout: Vec<u8>,
    /// The start of its stderr ([`Piped::STDERR`] bytes at most), lossily as text.
    pub stderr: String,
    /// Its exit status (a signal `s` as `128 + s`); `None` when the sandbox did not say.
    pub status: Option<i64>,
    /// It wrote more than [`Pipe::output`] bytes and was stopped.
    pub overflowed: bool,
}

impl Piped {
    /// The most bytes of a command's stderr kept.
    pub const STDERR: usize = 64 * 1024;

    /// It ran to its end with status 0, within its output bound.
    pub fn succeeded(&self) -> bool {
        self.status == Some(0) && !self.overflowed
    }
}

/// What came of asking an executor to run a [`Pipe`].
#[derive(Debug)]
pub enum Piping {
    /// It ran (or failed to start beside the shell, or ran into its deadline).
    Ran(Result<Piped, ToolError>),
    /// The session has no live shell yet: its first command starts one.
    NoShellYet,
    /// The sandbox starts no shell beside the session's (or the executor keeps no
    /// sessions): the request goes through the session's shell.
    NotBeside,
}
