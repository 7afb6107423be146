//! A client's command beside a session's shell, its bytes passed through raw
//! ([`warden_core::Pipe`]): a fresh shell started beside the session's ([`Siblings`]) is
//! given one line, which prints a ready line and `exec`s the command; once the ready line is
//! read, the shell has read all it will of its stdin, and the command's input follows on it
//! untouched. Its stdout comes back as it wrote it; no framing, no base64.

use super::{Chunk, Chunks, Input, Launched, Sessions, Sibling, Siblings};
use futures::StreamExt;
use std::io;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warden_core::{ErrorKind, Pipe, Piped, Piping, SessionId, ToolError};

/// The line the shell prints before it `exec`s the command.
const READY: &[u8] = b"WARDEN-PIPE\n";

impl<L: super::Launcher> Sessions<L> {
    /// Runs `pipe` beside the shell of session `id` (see the module), where its sandbox
    /// starts shells there.
    pub async fn pipe(&self, id: SessionId, pipe: &Pipe<'_>) -> Piping {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .cloned();
        let Some(slot) = slot else {
            return Piping::NoShellYet;
        };
        let offered = slot.beside.borrow().clone();
        match offered {
            Some(beside) => Piping::Ran(piped(&*beside.siblings, pipe).await),
            // A shell that is free and not there; else one that is there and starts none
            // beside it (a busy shell that could is offered).
            None => match slot.held.try_lock() {
                Ok(held) if held.live.is_none() => Piping::NoShellYet,
                _ => Piping::NotBeside,
            },
        }
    }
}

async fn piped<T: Siblings>(siblings: &T, pipe: &Pipe<'_>) -> Result<Piped, ToolError> {
    let deadline = Instant::from_std(pipe.deadline);
    let late = || {
        ToolError::new(
            ErrorKind::Timeout,
            "a client's transfer beside the session's shell did not end by its tool's timeout: \
             it was stopped",
        )
    };
    let Launched {
        sandbox: mut sibling,
        input,
        output,
    } = tokio::time::timeout_at(deadline, siblings.start())
        .await
        .map_err(|_| late())??;
    let pid = sibling.pid();
    let ran = tokio::time::timeout_at(deadline, exchange(input, output, pipe)).await;
    let answer = match ran {
        Ok(Ok(mut piped)) => {
            if piped.overflowed {
                super::kill_tree(pid);
            } else {
                piped.status = sibling.exit_status().await;
            }
            Ok(piped)
        }
        Ok(Err(e)) => {
            super::kill_tree(pid);
            Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("a client's transfer beside the session's shell failed: {e}"),
            ))
        }
        Err(_) => {
            super::kill_tree(pid);
            Err(late())
        }
    };
    sibling.close().await;
    answer
}

/// Gives the shell its line and the command its input, and reads what comes back.
async fn exchange(mut input: Input, mut output: Chunks, pipe: &Pipe<'_>) -> io::Result<Piped> {
    let line = format!(
        "printf '{}\\n'; exec {}\n",
        String::from_utf8_lossy(&READY[..READY.len() - 1]),
        pipe.command
    );
    input.write_all(line.as_bytes()).await?;
    input.flush().await?;
    let (ready, is_ready) = tokio::sync::oneshot::channel::<()>();
    // The command may stop reading early (a refusal): what it answers says what it took, so
    // a failed write is not the transfer's failure. Its stdin ends with `input`: shut down
    // (a connection to an engine) and dropped (a pipe).
    let write = async move {
        if let (Some(bytes), Ok(())) = (pipe.input, is_ready.await) {
            let _ = input.write_all(bytes).await;
        }
        let _ = input.shutdown().await;
    };
    let read = async {
        let mut ready = Some(ready);
        let mut piped = Piped::default();
        let mut head = Vec::new();
        while let Some(chunk) = output.next().await {
            match chunk? {
                Chunk::Stdout(bytes) if ready.is_some() => {
                    head.extend_from_slice(&bytes);
                    if let Some(rest) = head.strip_prefix(READY) {
                        piped.stdout.extend_from_slice(rest);
                        ready.take().map(|r| r.send(()));
                    } else if !READY.starts_with(&head) {
                        return Err(io::Error::other(format!(
                            "its shell printed {:?} before the command ran",
                            String::from_utf8_lossy(&head[..head.len().min(80)])
                        )));
                    }
                }
                Chunk::Stdout(bytes) => piped.stdout.extend_from_slice(&bytes),
                Chunk::Stderr(bytes) => {
                    let room = Piped::STDERR.saturating_sub(piped.stderr.len());
                    piped
                        .stderr
                        .push_str(&String::from_utf8_lossy(&bytes[..bytes.len().min(room)]));
                }
            }
            if piped.stdout.len() as u64 > pipe.output {
                piped.stdout.truncate(pipe.output as usize);
                piped.overflowed = true;
                return Ok(piped);
            }
        }
        if ready.is_some() {
            return Err(io::Error::other(format!(
                "its shell ended before the command ran: {}",
                piped.stderr.trim()
            )));
        }
        Ok(piped)
    };
    tokio::pin!(read, write);
    // The input is written while the output is read (a command may write as it reads); the
    // output's end (or its bound) ends the exchange, whatever is left to write.
    tokio::select! {
        biased;
        piped = &mut read => piped,
        () = &mut write => read.await,
    }
}
