//! A client's fixed command run beside a session's shell with its bytes passed through raw:
//! the way large transfers (a file written or read, a snapshot's archive) reach a sandbox
//! without the session's shell parsing them or warden framing them as base64.

use crate::message::ToolError;
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::mpsc::Receiver;

/// A client's command for a session's sandbox (never the model's: no call is logged).
#[derive(Debug)]
pub struct Pipe<'a> {
    /// A command line for a fresh POSIX shell in the sandbox, as its user (say, from
    /// [`crate::clean_command`]); its shell `exec`s it.
    pub command: String,
    /// What is written to the command's stdin, which is then closed.
    pub input: PipeInput<'a>,
    /// The most bytes of stdout kept: past them the command is stopped and the answer is
    /// [`Piped::overflowed`].
    pub output: u64,
    /// When the command is stopped with everything it started.
    pub deadline: Instant,
}

/// What a [`Pipe`]'s command reads on its stdin.
#[derive(Debug)]
pub enum PipeInput<'a> {
    /// Nothing: its stdin is closed at once.
    Nothing,
    /// These bytes.
    Bytes(&'a [u8]),
    /// Bytes made while the command runs ([`Stream`]).
    Stream(Stream),
}

impl PipeInput<'_> {
    /// How many bytes the command is given.
    pub fn len(&self) -> u64 {
        match self {
            PipeInput::Nothing => 0,
            PipeInput::Bytes(bytes) => bytes.len() as u64,
            PipeInput::Stream(stream) => stream.len(),
        }
    }

    /// True when the command is given no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Exactly [`Stream::len`] bytes, handed over a piece at a time as their maker has them
/// (a kept archive as its check comes past each piece), so that the command works while they
/// are made. A piece that is an error means the maker gave up: the command is stopped with
/// everything it started, and the transfer fails.
#[derive(Debug)]
pub struct Stream {
    len: u64,
    pieces: Mutex<Option<Receiver<std::io::Result<Vec<u8>>>>>,
}

impl Stream {
    /// `len` bytes, to come from `pieces`.
    pub fn new(len: u64, pieces: Receiver<std::io::Result<Vec<u8>>>) -> Self {
        Self {
            len,
            pieces: Mutex::new(Some(pieces)),
        }
    }

    /// How many bytes come.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when none comes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, for the one transfer that writes them (`None` once taken).
    pub fn take(&self) -> Option<Receiver<std::io::Result<Vec<u8>>>> {
        self.pieces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
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
