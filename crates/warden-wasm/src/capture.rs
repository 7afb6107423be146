//! Captured stdout/stderr that keep the first N bytes and count the rest, so a flooding guest
//! is truncated with a visible marker instead of trapped.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use warden_core::Capped;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much a guest may write per permit; small enough to keep copies cheap.
const PERMIT: usize = 64 * 1024;

/// One captured stream. WASI asks for the stream more than once per call, so every handle
/// shares one buffer.
#[derive(Clone)]
pub(crate) struct CappedPipe {
    buf: Arc<Mutex<Capped>>,
}

impl CappedPipe {
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            buf: Arc::new(Mutex::new(Capped::new(cap))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Capped> {
        // A poisoned buffer still holds valid bytes: keep using it.
        self.buf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, bytes: &[u8]) {
        self.lock().push(bytes);
    }

    /// What was written, as text, ending with the truncation marker if anything was cut.
    pub(crate) fn contents(&self) -> String {
        self.lock().text()
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_head_and_counts_the_rest_across_handles() {
        let pipe = CappedPipe::new(4);
        let mut a = pipe.p2_stream();
        let mut b = pipe.p2_stream();
        a.write(Bytes::from_static(b"abc")).unwrap();
        b.write(Bytes::from_static(b"defgh")).unwrap();
        let text = pipe.contents();
        assert!(
            text.starts_with("abcd\n[warden: output truncated, 4 more bytes"),
            "{text}"
        );
    }
}
