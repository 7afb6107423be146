//! A client's command beside a session's shell, its bytes passed through raw
//! ([`warden_core::Pipe`]), carried by a shell started beside the session's that serves one
//! transfer after another ([`Courier`]). A session keeps [`KEPT`] of them from its first
//! transfer on: one that carried a transfer is kept for the next, and one used up is
//! replaced ahead of the next. Each is one more idle shell among the sandbox's processes;
//! one that died (a command killed it) or came out of step is passed over for a fresh start.
//! Where none can run (a `dd` without `iflag=fullblock`), the session's transfers go through
//! its shell instead ([`Piping::NotBeside`]).

use super::courier::{Carried, Courier, Failed, Unstarted};
use super::{Sandbox, Sessions, Siblings, SlotOf};
use std::sync::Arc;
use tokio::time::Instant;
use warden_core::{ErrorKind, Pipe, Piped, Piping, SessionId, ToolError};

/// How many couriers a session keeps for its client's transfers: they come one after
/// another (a sync client's), so one is enough to start none on their way.
const KEPT: usize = 1;

/// How long a courier may take to start before it is given up.
const START: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a session's end waits for a courier still starting.
const END_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A courier of the session's, for the sandbox of that [`super::shell::Live::id`].
pub(super) struct Spare<T: Siblings> {
    sandbox: u64,
    courier: Kept<T::Sibling>,
}

enum Kept<S> {
    Starting(Starting<S>),
    /// It carried a transfer and waits for the next.
    Ready(Courier<S>),
}

/// A courier's start, running or done; dropped, it is stopped, and a shell it started goes
/// with it.
struct Starting<S>(tokio::task::JoinHandle<Option<Courier<S>>>);

impl<S> Drop for Starting<S> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T: Siblings> Spare<T> {
    fn is_ready(&self) -> bool {
        match &self.courier {
            Kept::Ready(_) => true,
            Kept::Starting(start) => start.0.is_finished(),
        }
    }

    /// Its courier once started, None when its start failed; Err past `deadline`.
    async fn courier(self, deadline: Instant) -> Result<Option<Courier<T::Sibling>>, ()> {
        match self.courier {
            Kept::Ready(courier) => Ok(Some(courier)),
            Kept::Starting(mut start) => {
                match tokio::time::timeout_at(deadline, &mut start.0).await {
                    Ok(started) => Ok(started.ok().flatten()),
                    Err(_) => Err(()),
                }
            }
        }
    }
}

/// The slot's couriers.
pub(super) type SparesOf<S> = Vec<Spare<<S as Sandbox>::Siblings>>;

/// A courier of the slot's for `sandbox`, a ready one first; those for another sandbox (one
/// that ended) are dropped, and their shells with them.
fn take_spare<S: Sandbox>(slot: &SlotOf<S>, sandbox: u64) -> Option<Spare<S::Siblings>> {
    let mut spares = slot
        .spares
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    spares.retain(|s| s.sandbox == sandbox);
    let first = spares.iter().position(Spare::is_ready).unwrap_or(0);
    (!spares.is_empty()).then(|| spares.remove(first))
}

/// Ends the slot's couriers by the end of their input, one still starting once it started
/// (within [`END_WAIT`]): a shell killed instead is an orphan, whose sandbox's end then waits
/// until this machine's init has reaped it (1–2 s here, on the host).
pub(super) async fn end_spares<S: Sandbox>(slot: &SlotOf<S>) {
    let spares = std::mem::take(
        &mut *slot
            .spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for spare in spares {
        if let Ok(Some(courier)) = spare.courier(Instant::now() + END_WAIT).await {
            courier.close().await;
        }
    }
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
        if slot.unsuited.load(std::sync::atomic::Ordering::Relaxed) {
            return Piping::NotBeside;
        }
        let offered = slot.beside.borrow().clone();
        let Some(beside) = offered else {
            // A shell that is free and not there; else one that is there and starts none
            // beside it (a busy shell that could is offered).
            return match slot.held.try_lock() {
                Ok(held) if held.live.is_none() => Piping::NoShellYet,
                _ => Piping::NotBeside,
            };
        };
        if beside.siblings.viewed() {
            // Each shell beside this one settles one command's view: transfers, which may
            // write the roots, are the session's shell's.
            return Piping::NotBeside;
        }
        let spare = take_spare(&slot, beside.sandbox);
        let (ran, courier) = match piped(&*beside.siblings, spare, pipe).await {
            Carrying::Ran(ran, courier) => (ran, courier),
            Carrying::Unsuited => {
                tracing::info!(
                    "this sandbox's dd does not take iflag=fullblock: a client's transfers go \
                     through the session's shell"
                );
                slot.unsuited
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                return Piping::NotBeside;
            }
        };
        if let Some(courier) = courier {
            keep(&slot, beside.sandbox, courier).await;
        }
        make_spare(&slot, &beside.siblings, beside.sandbox);
        Piping::Ran(ran)
    }
}

/// Keeps `courier` for the next transfer, unless the slot has enough or its sandbox is
/// another by now.
async fn keep<S: Sandbox>(
    slot: &SlotOf<S>,
    sandbox: u64,
    courier: Courier<<S::Siblings as Siblings>::Sibling>,
) {
    let surplus = {
        let current = slot.beside.borrow().as_ref().map(|b| b.sandbox);
        let mut spares = slot
            .spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current == Some(sandbox) && spares.len() < KEPT {
            spares.push(Spare {
                sandbox,
                courier: Kept::Ready(courier),
            });
            None
        } else {
            Some(courier)
        }
    };
    if let Some(courier) = surplus {
        courier.close().await;
    }
}

/// Starts couriers for `sandbox` in the background up to [`KEPT`], unless its sandbox is
/// another by now.
fn make_spare<S: Sandbox>(slot: &SlotOf<S>, siblings: &Arc<S::Siblings>, sandbox: u64) {
    let current = slot.beside.borrow().as_ref().map(|b| b.sandbox);
    let mut spares = slot
        .spares
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if current != Some(sandbox) {
        return;
    }
    while spares.len() < KEPT {
        let siblings = siblings.clone();
        let task = tokio::spawn(async move {
            let started = tokio::time::timeout(START, Courier::start(&*siblings)).await;
            started.ok().and_then(Result::ok)
        });
        spares.push(Spare {
            sandbox,
            courier: Kept::Starting(Starting(task)),
        });
    }
}

/// What came of a transfer.
enum Carrying<C> {
    /// Its answer, and the courier when it may carry the next transfer.
    Ran(Result<Piped, ToolError>, Option<C>),
    /// No courier can run in the sandbox.
    Unsuited,
}

/// Runs `pipe` with `spare`'s courier, or with a fresh one; once more with a fresh one when
/// the spare's had died.
async fn piped<T: Siblings>(
    siblings: &T,
    mut spare: Option<Spare<T>>,
    pipe: &Pipe<'_>,
) -> Carrying<Courier<T::Sibling>> {
    let deadline = Instant::from_std(pipe.deadline);
    let late = || {
        ToolError::new(
            ErrorKind::Timeout,
            "a client's transfer beside the session's shell did not end by its tool's timeout: \
             it was stopped",
        )
    };
    loop {
        let kept = match spare.take() {
            Some(spare) => match spare.courier(deadline).await {
                Ok(kept) => kept,
                Err(()) => return Carrying::Ran(Err(late()), None),
            },
            None => None,
        };
        let from_spare = kept.is_some();
        let mut courier = match kept {
            Some(courier) => courier,
            None => match tokio::time::timeout_at(deadline, Courier::start(siblings)).await {
                Ok(Ok(courier)) => courier,
                Ok(Err(Unstarted::Unsuited)) => return Carrying::Unsuited,
                Ok(Err(Unstarted::Failed(e))) => return Carrying::Ran(Err(e), None),
                Err(_) => return Carrying::Ran(Err(late()), None),
            },
        };
        let pid = courier.pid();
        let carried = tokio::time::timeout_at(deadline, courier.carry(pipe)).await;
        let answer = match carried {
            Ok(Ok(Carried { piped, again: true })) => {
                return Carrying::Ran(Ok(piped), Some(courier));
            }
            Ok(Ok(Carried { piped, .. })) => Ok(piped),
            // A kept courier that died before it took the command: once more, a fresh one.
            Ok(Err(Failed::Unstarted(_))) if from_spare => {
                super::kill_tree(pid);
                courier.close().await;
                continue;
            }
            Ok(Err(Failed::Unstarted(e) | Failed::Broken(e))) => Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("a client's transfer beside the session's shell failed: {e}"),
            )),
            Err(_) => Err(late()),
        };
        super::kill_tree(pid);
        courier.close().await;
        return Carrying::Ran(answer, None);
    }
}
