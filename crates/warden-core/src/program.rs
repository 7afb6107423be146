//! A whole program in a tool's sandbox (`warden exec`): the sandbox a call of the tool gets,
//! with the program's streams passed through as it reads and writes rather than captured.

use crate::redact::{Secrets, StreamRedactor};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};

/// A byte stream the program reads.
pub type Input = Box<dyn AsyncRead + Send + Unpin>;
/// A byte stream the program writes.
pub type Sink = Box<dyn AsyncWrite + Send + Unpin>;

/// One program to run in a tool's sandbox.
pub struct Program {
    /// The command line; empty for the policy's own shell.
    pub argv: Vec<String>,
    pub stdin: Input,
    pub stdout: Sink,
    pub stderr: Sink,
    /// When the program is killed; `None` lets it run as long as it likes.
    pub timeout: Option<Duration>,
    /// `Some` when the program gets a pseudo-terminal (warden's own stdin and stdout are a
    /// terminal): its size now and as it changes. The program's stdout and stderr are then
    /// one stream, through `stdout`, and `stderr` gets nothing.
    pub terminal: Option<watch::Receiver<WindowSize>>,
    /// Signals to pass on to the program, by number (`SIGINT`, `SIGTERM`, …). After a
    /// `SIGTERM` or `SIGHUP` the program has [`Program::GRACE`] to end before it is killed.
    pub signals: mpsc::UnboundedReceiver<i32>,
}

impl Program {
    /// How long a program may take to end after a `SIGTERM` or `SIGHUP` passed on to it.
    pub const GRACE: Duration = Duration::from_secs(5);
}

/// A terminal's size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

/// How a program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// It outlived its time limit and was killed.
    TimedOut,
}

/// How a program ran: how it ended, and what became of its changes to its read-write roots.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// warden's own id of the run (its record's `call_id`, what `warden undo` takes).
    pub call_id: String,
    pub exit: Exit,
    /// Its record's `details.changes`: the change set committed, or `{"discarded": true}`;
    /// `None` when its roots were not seen through a view.
    pub changes: Option<serde_json::Value>,
}

impl Finished {
    /// Run `call_id`, which ended as `exit`, its roots written in place or not at all.
    pub fn exited(call_id: &str, exit: Exit) -> Self {
        Self {
            call_id: call_id.to_owned(),
            exit,
            changes: None,
        }
    }
}

impl Exit {
    /// Whether the program ended on its own, so its changes may be kept: it exited with any
    /// status, or a signal ended it (a crash, or one its parent or the person sent, passed
    /// on), as a call's command killed by a signal counts as its exit status. Its time limit
    /// ended the other, and what it wrote is discarded.
    pub fn on_its_own(self) -> bool {
        !matches!(self, Exit::TimedOut)
    }

    /// The status a shell shows for it: the code, 128 + the signal, or 124 for the time
    /// limit, as `timeout(1)` answers.
    pub fn status(self) -> i32 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal,
            Exit::TimedOut => 124,
        }
    }
}

/// A sink that redacts secret values from what goes through it, however the writes cut
/// them: what could begin a value waits for the next write, or for the shutdown.
pub(crate) struct Redacting {
    inner: Sink,
    redactor: StreamRedactor,
    /// Redacted bytes not yet written, from `written` on.
    pending: Vec<u8>,
    written: usize,
    finished: bool,
}

impl Redacting {
    /// `inner`, redacted of `secrets` (unwrapped when there are none).
    pub(crate) fn wrap(inner: Sink, secrets: &Secrets) -> Sink {
        if secrets.is_empty() {
            return inner;
        }
        Box::new(Self {
            inner,
            redactor: secrets.stream(),
            pending: Vec::new(),
            written: 0,
            finished: false,
        })
    }

    /// Writes what is pending.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Redacting {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        this.pending = this.redactor.feed(buf);
        // Accepted whether or not it goes out now: the next write or flush drains it.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.finished {
            ready!(this.drain(cx))?;
            this.pending = this.redactor.finish();
            this.finished = true;
        }
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A sink that takes at most 3 bytes a write, into a shared buffer.
    struct Slow(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl AsyncWrite for Slow {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(3);
            self.0.lock().unwrap().extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_sink_redacts_across_writes_and_lets_the_held_tail_out_at_shutdown() {
        let got = std::sync::Arc::default();
        let secrets = Secrets::new(vec![("KEY".into(), "s3cr3t-value".into())]);
        let mut sink = Redacting::wrap(Box::new(Slow(std::sync::Arc::clone(&got))), &secrets);
        for piece in ["one s3cr", "3t-value two s3", "cr"] {
            sink.write_all(piece.as_bytes()).await.unwrap();
        }
        sink.shutdown().await.unwrap();
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "one [redacted:KEY] two s3cr");
    }
}
