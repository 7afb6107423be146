//! A client's command beside a session's shell, its bytes passed through raw
//! ([`warden_core::Pipe`]): a fresh shell started beside the session's ([`Siblings`]) is
//! given one line, which prints a ready line and `exec`s the command; once the ready line is
//! read, the shell has read all it will of its stdin, and the command's input follows on it
//! untouched. Its stdout comes back as it wrote it; no framing, no base64.

use super::{Chunk, Chunks, Input, Launched, Sandbox, Sessions, Sibling, Siblings, SlotOf};
use futures::StreamExt;
use std::io;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warden_core::{ErrorKind, Pipe, Piped, Piping, SessionId, ToolError};

/// The line the shell prints before it `exec`s the command.
const READY: &[u8] = b"WARDEN-PIPE\n";

/// A shell started beside a session's ahead of a client's next transfer, for the sandbox of
/// that [`super::shell::Live::id`]: an engine's `exec` takes tens of milliseconds, which a
/// transfer then does not wait for (or waits for only what is left of it). Kept from a
/// session's first transfer on, as many as [`Siblings::spares`] says; each is one more idle
/// shell among the sandbox's processes, and one that died (a command killed it) is passed
/// over for a fresh start.
pub(super) struct Spare<T: Siblings> {
    sandbox: u64,
    /// Its start, running or done; dropped, a shell it started goes with it.
    task: tokio::task::JoinHandle<Option<Launched<T::Sibling>>>,
}

impl<T: Siblings> Drop for Spare<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a spare may take to start before it is given up.
const SPARE_START: std::time::Duration = std::time::Duration::from_secs(30);

/// The slot's spares.
pub(super) type SparesOf<S> = Vec<Spare<<S as Sandbox>::Siblings>>;

/// A spare of the slot's for `sandbox`, one that has started first; those for another
/// sandbox (all, with `None`) are dropped, and their shells with them.
pub(super) fn take_spare<S: Sandbox>(
    slot: &SlotOf<S>,
    sandbox: Option<u64>,
) -> Option<Spare<S::Siblings>> {
    let mut spares = slot
        .spares
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    spares.retain(|s| Some(s.sandbox) == sandbox);
    let first = spares
        .iter()
        .position(|s| s.task.is_finished())
        .unwrap_or(0);
    (!spares.is_empty()).then(|| spares.remove(first))
}

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
        let Some(beside) = offered else {
            // A shell that is free and not there; else one that is there and starts none
            // beside it (a busy shell that could is offered).
            return match slot.held.try_lock() {
                Ok(held) if held.live.is_none() => Piping::NoShellYet,
                _ => Piping::NotBeside,
            };
        };
        let spare = take_spare(&slot, Some(beside.sandbox));
        let ran = piped(&*beside.siblings, spare, pipe).await;
        make_spare(&slot, &beside.siblings, beside.sandbox);
        Piping::Ran(ran)
    }
}

/// Starts spares for `sandbox` in the background up to [`Siblings::spares`], unless its
/// sandbox is another by now.
fn make_spare<S: Sandbox>(slot: &SlotOf<S>, siblings: &std::sync::Arc<S::Siblings>, sandbox: u64) {
    let current = slot.beside.borrow().as_ref().map(|b| b.sandbox);
    let mut spares = slot
        .spares
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if current != Some(sandbox) {
        return;
    }
    while spares.len() < siblings.spares() {
        let siblings = siblings.clone();
        let task = tokio::spawn(async move {
            let started = tokio::time::timeout(SPARE_START, siblings.start()).await;
            started.ok().and_then(Result::ok)
        });
        spares.push(Spare { sandbox, task });
    }
}

/// Runs `pipe` in `spare`, or in a fresh shell started beside the session's; once more in a
/// fresh one when the spare had died.
async fn piped<T: Siblings>(
    siblings: &T,
    mut spare: Option<Spare<T>>,
    pipe: &Pipe<'_>,
) -> Result<Piped, ToolError> {
    let deadline = Instant::from_std(pipe.deadline);
    let late = || {
        ToolError::new(
            ErrorKind::Timeout,
            "a client's transfer beside the session's shell did not end by its tool's timeout: \
             it was stopped",
        )
    };
    loop {
        let ready = match spare.take() {
            Some(mut spare) => match tokio::time::timeout_at(deadline, &mut spare.task).await {
                Ok(Ok(launched)) => launched,
                Ok(Err(_)) => None,
                Err(_) => return Err(late()),
            },
            None => None,
        };
        let from_spare = ready.is_some();
        let launched = match ready {
            Some(launched) => launched,
            None => tokio::time::timeout_at(deadline, siblings.start())
                .await
                .map_err(|_| late())??,
        };
        let Launched {
            sandbox: mut sibling,
            input,
            output,
            ..
        } = launched;
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
            // A spare that died before it took the command: once more, in a fresh one.
            Ok(Err(Failed::Unstarted(_))) if from_spare => {
                super::kill_tree(pid);
                sibling.close().await;
                continue;
            }
            Ok(Err(Failed::Unstarted(e) | Failed::Broken(e))) => {
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
        return answer;
    }
}

/// Why an exchange failed.
enum Failed {
    /// Before the command ran: its shell took nothing of the input.
    Unstarted(io::Error),
    /// After.
    Broken(io::Error),
}

/// Gives the shell its line and the command its input, and reads what comes back.
async fn exchange(mut input: Input, mut output: Chunks, pipe: &Pipe<'_>) -> Result<Piped, Failed> {
    let line = format!(
        "printf '{}\\n'; exec {}\n",
        String::from_utf8_lossy(&READY[..READY.len() - 1]),
        pipe.command
    );
    input
        .write_all(line.as_bytes())
        .await
        .map_err(Failed::Unstarted)?;
    input.flush().await.map_err(Failed::Unstarted)?;
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
            let chunk = chunk.map_err(|e| match ready {
                Some(_) => Failed::Unstarted(e),
                None => Failed::Broken(e),
            })?;
            match chunk {
                Chunk::Stdout(bytes) if ready.is_some() => {
                    head.extend_from_slice(&bytes);
                    if let Some(rest) = head.strip_prefix(READY) {
                        piped.stdout.extend_from_slice(rest);
                        ready.take().map(|r| r.send(()));
                    } else if !READY.starts_with(&head) {
                        return Err(Failed::Unstarted(io::Error::other(format!(
                            "its shell printed {:?} before the command ran",
                            String::from_utf8_lossy(&head[..head.len().min(80)])
                        ))));
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
            return Err(Failed::Unstarted(io::Error::other(format!(
                "its shell ended before the command ran: {}",
                piped.stderr.trim()
            ))));
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
