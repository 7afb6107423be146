//! A function's next sandbox, prepared ahead of its call. Once a call's answer is out, in the
//! caller's spare time ([`warden_core::after_answer::spare_time`]), a fresh store is built
//! and the component instantiated in it; the function's next call claims it, binds it to
//! itself and only calls the export. Each prepared sandbox serves exactly one call, as one
//! built on the call's path does, and a call that finds none builds its own.
//!
//! Only a sandbox whose making reads nothing that may change before its call is prepared: a
//! function of a component granted folders (opened as the sandbox is made), variables from
//! warden's environment or credentials (read at call time) always builds its own. Until it is
//! bound the sandbox's network is shut: a guest that reaches for it while it is instantiated
//! ahead loses its spare, and its function prepares no more. At most [`MAX_WAITING`]
//! sandboxes wait in the process at once, since each holds a slot of the engine's pool.

use crate::sandbox::Sandbox;
use crate::shared::Shared;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use warden_core::{Grants, Limits};
use wasmtime::component::Instance;

/// Sandboxes prepared and not yet claimed, across the process, at most.
pub(crate) const MAX_WAITING: usize = 32;

/// Sandboxes waiting or being prepared now.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Whether a sandbox under `grants` may be made ahead of its call: nothing its making reads
/// can change in between.
pub(crate) fn preparable(grants: &Grants) -> bool {
    grants.fs.is_empty() && grants.env_from_host.is_empty() && grants.net.credentials.is_empty()
}

/// One function's next sandbox.
pub(crate) struct Spare(Mutex<State>);

#[allow(
    clippy::large_enum_variant,
    reason = "one a function, kept in place in its mutex: boxing the sandbox would cost each \
              prepared call an allocation"
)]
enum State {
    /// None waits; one may be prepared.
    Empty,
    /// One is being prepared.
    Preparing,
    Ready(Prepared),
    /// The function prepares none: its grants are read at call time, or preparing one failed.
    Off,
}

/// A sandbox with the component instantiated in it, for one call.
pub(crate) struct Prepared {
    sandbox: Sandbox,
    instance: Instance,
    /// The limits it was made under: a call under others builds its own.
    limits: Limits,
    /// The CPU its instantiation took, which counts to the call it serves.
    cpu: Duration,
    _held: Held,
}

impl Prepared {
    /// The sandbox, its instance and the CPU the instantiation took.
    pub(crate) fn into_parts(self) -> (Sandbox, Instance, Duration) {
        (self.sandbox, self.instance, self.cpu)
    }
}

/// One of the [`MAX_WAITING`].
struct Held;

impl Held {
    fn take() -> Option<Held> {
        WAITING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_WAITING).then_some(n + 1)
            })
            .ok()
            .map(|_| Held)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Spare {
    /// A spare for a function under `grants`; always empty when they are not [`preparable`].
    pub(crate) fn new(grants: &Grants) -> Spare {
        Spare(Mutex::new(if preparable(grants) {
            State::Empty
        } else {
            State::Off
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The waiting sandbox, when it was made under `limits`; one made under others is dropped.
    pub(crate) fn claim(&self, limits: &Limits) -> Option<Prepared> {
        let mut state = self.state();
        if !matches!(*state, State::Ready(_)) {
            return None;
        }
        let State::Ready(prepared) = std::mem::replace(&mut *state, State::Empty) else {
            return None;
        };
        drop(state);
        (prepared.limits == *limits).then_some(prepared)
    }

    /// Leaves the preparing of the next sandbox under `limits` for after the answer, when the
    /// caller has time then and none waits (which the preparing checks: a caller without
    /// spare time pays nothing here, not even the lock).
    pub(crate) fn refill(self: &Arc<Self>, shared: &Arc<Shared>, limits: Limits) {
        warden_core::after_answer::spare_time(|| {
            let (spare, shared) = (self.clone(), shared.clone());
            async move { spare.prepare(&shared, limits).await }
        });
    }

    async fn prepare(&self, shared: &Shared, limits: Limits) {
        let held = {
            let mut state = self.state();
            if !matches!(*state, State::Empty) {
                return;
            }
            let Some(held) = Held::take() else {
                return;
            };
            *state = State::Preparing;
            held
        };
        let next = match shared.prepare(&limits).await {
            Ok((sandbox, _)) if sandbox.used_network_early() => {
                tracing::debug!("a guest used the network while instantiated ahead: no spares");
                State::Off
            }
            Ok((sandbox, (instance, cpu))) => State::Ready(Prepared {
                sandbox,
                instance,
                limits,
                cpu,
                _held: held,
            }),
            Err(e) => {
                tracing::debug!("cannot prepare a sandbox ahead, so none will be: {e}");
                State::Off
            }
        };
        *self.state() = next;
    }
}
