//! A call's output as it is written, to a client that asked for progress: a `tools/call`
//! whose `_meta` carries a `progressToken` gets `notifications/progress` with that token, one
//! for each piece of output, before its answer. Each carries the piece as its `message`, the
//! stream in `_meta["warden/stream"]` (`stdout` or `stderr`), and the bytes handed on so far
//! as its `progress`. The answer still carries the whole output; what is streamed is what the
//! answer will carry, redacted alike (see [`warden_core::OutputSink`]). Only executors that
//! can stream (a shell session's commands) send any.

use rmcp::model::{NotificationMetaObject, ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use warden_core::{OutputSink, OutputStream, lock};

/// The `_meta` key naming a notification's stream.
pub(crate) const STREAM_META: &str = "warden/stream";

type Piece = (OutputStream, Vec<u8>);

/// One call's output on its way to the client, in order.
pub(crate) struct Progress {
    sender: Arc<Mutex<Option<mpsc::UnboundedSender<Piece>>>>,
    forwarder: JoinHandle<()>,
}

impl Progress {
    /// Starts sending pieces to `peer` as notifications for `token`.
    pub(crate) fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        Self {
            sender: Arc::new(Mutex::new(Some(sender))),
            forwarder: tokio::spawn(forward(peer, token, receiver)),
        }
    }

    /// The sink to hand the dispatcher. Bounded by the call's output limit: only output its
    /// answer keeps goes through.
    pub(crate) fn sink(&self) -> OutputSink {
        let sender = self.sender.clone();
        OutputSink::new(move |stream, bytes| {
            if let Some(sender) = lock(&sender).as_ref() {
                let _ = sender.send((stream, bytes.to_vec()));
            }
        })
    }

    /// Returns once every piece handed on so far was sent, so that they all come before the
    /// answer; pieces handed on later (by a sink the executor kept) are dropped.
    pub(crate) async fn finish(self) {
        lock(&self.sender).take();
        if let Err(e) = self.forwarder.await {
            tracing::debug!("the progress forwarder ended early: {e}");
        }
    }
}

async fn forward(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut pieces: mpsc::UnboundedReceiver<Piece>,
) {
    let mut sent = 0u64;
    let mut partial = [Vec::new(), Vec::new()];
    while let Some((stream, bytes)) = pieces.recv().await {
        sent += bytes.len() as u64;
        let (index, name) = match stream {
            OutputStream::Stdout => (0, "stdout"),
            OutputStream::Stderr => (1, "stderr"),
        };
        let text = whole_characters(&mut partial[index], &bytes);
        if text.is_empty() {
            continue;
        }
        let mut meta = NotificationMetaObject::new();
        meta.insert(STREAM_META.to_owned(), name.into());
        let mut params = ProgressNotificationParam::new(token.clone(), sent as f64);
        params.message = Some(text);
        params.meta = Some(meta);
        if peer.notify_progress(params).await.is_err() {
            // The client is gone: its answer will not be read either.
            return;
        }
    }
}

/// `bytes` after what `partial` held, as text up to the last whole character; a character
/// cut between two pieces waits in `partial` for the next one.
fn whole_characters(partial: &mut Vec<u8>, bytes: &[u8]) -> String {
    let mut buf = std::mem::take(partial);
    buf.extend_from_slice(bytes);
    let whole = match std::str::from_utf8(&buf) {
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        _ => buf.len(),
    };
    *partial = buf.split_off(whole);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_between_pieces_waits_for_its_rest() {
        let mut partial = Vec::new();
        let e = "é".as_bytes();
        assert_eq!(whole_characters(&mut partial, &[b'a', e[0]]), "a");
        assert_eq!(whole_characters(&mut partial, &[e[1], b'b']), "éb");
        assert!(partial.is_empty());
        assert_eq!(whole_characters(&mut partial, &[0xff, b'c']), "\u{fffd}c");
    }
}
