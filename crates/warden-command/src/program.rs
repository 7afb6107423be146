//! What docker and host share about a program of `warden exec` once its sandbox runs: its
//! input fed as it comes, its signals passed on (with a grace period after `SIGTERM` or
//! `SIGHUP`), its wall clock kept. Each executor relays the program's output its own way.

use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use warden_core::{BoxFuture, Program};

/// `SIGHUP` and `SIGTERM` on Linux: after them the program has [`Program::GRACE`] to end.
const SIGHUP: i32 = 1;
const SIGTERM: i32 = 15;

/// A running program's sandbox, as the driver reaches it.
pub trait Running: Sync {
    /// Passes `signal` on to the program.
    fn signal(&self, signal: i32) -> BoxFuture<'_, ()>;
    /// Kills the program and everything of its sandbox.
    fn kill(&self) -> BoxFuture<'_, ()>;
}

/// How the driver left a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driven {
    /// Its output ended.
    Ended,
    /// Its time limit came first; it was killed.
    TimedOut,
    /// It outlived its grace period after a `SIGTERM` or `SIGHUP`; it was killed.
    Killed,
}

/// Drives a started program until `output` (the executor's relay of its output, which ends
/// when the program's side of it is gone) is done: feeds `stdin` to the program's `input`,
/// passes `signals` on, and kills the program at `timeout` from now or at the end of a grace
/// period.
pub async fn drive(
    program: &impl Running,
    stdin: impl AsyncRead + Unpin,
    input: impl AsyncWrite + Unpin,
    output: impl Future<Output = ()>,
    signals: &mut UnboundedReceiver<i32>,
    timeout: Option<Duration>,
) -> Driven {
    let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
    let deadline = timeout.map_or(far, |t| Instant::now() + t);
    let feed = relay(stdin, input);
    tokio::pin!(feed, output);
    let (mut fed, mut signals_open) = (false, true);
    let mut grace: Option<Instant> = None;
    let mut driven = Driven::Ended;
    loop {
        tokio::select! {
            () = &mut output => return driven,
            () = &mut feed, if !fed => fed = true,
            signal = signals.recv(), if signals_open => match signal {
                Some(signal) => {
                    program.signal(signal).await;
                    if signal == SIGTERM || signal == SIGHUP {
                        grace.get_or_insert(Instant::now() + Program::GRACE);
                    }
                }
                None => signals_open = false,
            },
            () = tokio::time::sleep_until(deadline), if driven == Driven::Ended => {
                driven = Driven::TimedOut;
                program.kill().await;
            }
            () = tokio::time::sleep_until(grace.unwrap_or(far)), if grace.is_some() => {
                grace = None;
                if driven == Driven::Ended {
                    driven = Driven::Killed;
                }
                program.kill().await;
            }
        }
    }
}

/// Copies `from` to `to` as it comes, then shuts `to` down (which lets a redactor's held tail
/// out, and closes a pipe). Stops at the first failure on either side: a reader gone (warden's
/// stdout closed early) ends the copy, so that the program meets a closed pipe as it would
/// anyway once its side is dropped.
pub async fn relay(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() || to.flush().await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}
