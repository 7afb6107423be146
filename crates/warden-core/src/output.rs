//! A call's output as it is written, for a client that watches it (see [`OutputSink`]).

use std::sync::Arc;

/// Which of a command's output streams a piece of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Where an executor hands a call's output as it is written — a session command's, as its
/// shell prints it — for a client that shows a long command's progress. The answer still
/// carries all of it: what goes here is what the answer will carry (within the output limit),
/// redacted alike. Executors that cannot stream leave it unused. Cheap to clone.
#[derive(Clone)]
pub struct OutputSink(Arc<Takes>);

type Takes = dyn Fn(OutputStream, &[u8]) + Send + Sync;

impl OutputSink {
    /// A sink that calls `f` with each piece.
    pub fn new(f: impl Fn(OutputStream, &[u8]) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Hands on `bytes` of `stream` (nothing when empty).
    pub fn send(&self, stream: OutputStream, bytes: &[u8]) {
        if !bytes.is_empty() {
            (self.0)(stream, bytes);
        }
    }
}

impl std::fmt::Debug for OutputSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputSink")
    }
}
