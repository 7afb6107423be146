//! Sandboxes made ahead of their calls, each for one call: the bookkeeping that a host tool's
//! prepared sandboxes and a docker tool's warm pool share. A call takes a spare that is still
//! alive, or none (and starts its sandbox on its own path); either way the caller learns how
//! many to make in the background to keep the depth, and counts them as being made until it
//! hands each back with [`Spares::made`]. What makes them, checks them and removes them is the
//! executor's.

use std::collections::VecDeque;
use std::sync::Mutex;

/// A sandbox made ahead.
pub trait Spare: Send {
    /// False once it cannot serve a call (its process died, its container stopped).
    fn alive(&self) -> bool;
}

/// Up to `depth` spares of one tool.
pub struct Spares<T> {
    depth: usize,
    state: Mutex<State<T>>,
}

struct State<T> {
    ready: VecDeque<T>,
    /// Being made in the background.
    making: usize,
}

impl<T: Spare> Spares<T> {
    /// Keeps `depth` spares; 0 keeps none.
    pub fn new(depth: usize) -> Self {
        Spares {
            depth,
            state: Mutex::new(State {
                ready: VecDeque::new(),
                making: 0,
            }),
        }
    }

    /// How many it keeps.
    pub fn depth(&self) -> usize {
        self.depth
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A spare still alive, if one is ready (the oldest first); the dead ones found on the
    /// way, for the caller to dispose of; and how many to make now to keep the depth (counted
    /// as being made from here).
    pub fn take(&self) -> Taken<T> {
        let mut state = self.lock();
        let mut dead = Vec::new();
        let mut spare = None;
        while let Some(next) = state.ready.pop_front() {
            if next.alive() {
                spare = Some(next);
                break;
            }
            dead.push(next);
        }
        let make = Self::wanted(self.depth, &mut state);
        Taken { spare, dead, make }
    }

    /// Takes out every spare that died while waiting, and says how many to make to keep the
    /// depth (counted as being made from here).
    pub fn prune(&self) -> (Vec<T>, usize) {
        let mut state = self.lock();
        let mut dead = Vec::new();
        for spare in std::mem::take(&mut state.ready) {
            if spare.alive() {
                state.ready.push_back(spare);
            } else {
                dead.push(spare);
            }
        }
        let make = Self::wanted(self.depth, &mut state);
        (dead, make)
    }

    fn wanted(depth: usize, state: &mut State<T>) -> usize {
        let make = depth.saturating_sub(state.ready.len() + state.making);
        state.making += make;
        make
    }

    /// One of the spares counted as being made is done: `Some` when it was made.
    pub fn made(&self, spare: Option<T>) {
        let mut state = self.lock();
        state.making = state.making.saturating_sub(1);
        state.ready.extend(spare);
    }

    /// Every spare waiting now, taken out: at the end, to dispose of them.
    pub fn drain(&self) -> Vec<T> {
        self.lock().ready.drain(..).collect()
    }
}

/// What [`Spares::take`] found.
pub struct Taken<T> {
    /// A spare still alive.
    pub spare: Option<T>,
    /// Spares that died while waiting.
    pub dead: Vec<T>,
    /// How many to make in the background.
    pub make: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(bool);
    impl Spare for Fake {
        fn alive(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn a_dead_spare_is_never_taken_and_the_depth_is_kept() {
        let spares = Spares::new(2);
        let first = spares.take();
        assert!(first.spare.is_none() && first.dead.is_empty());
        assert_eq!(first.make, 2);
        assert_eq!(spares.take().make, 0, "two are being made");
        spares.made(Some(Fake(false)));
        spares.made(Some(Fake(true)));
        let taken = spares.take();
        assert!(taken.spare.is_some_and(|s| s.0));
        assert_eq!(taken.dead.len(), 1);
        assert_eq!(taken.make, 2);
        spares.made(None);
        spares.made(Some(Fake(false)));
        let (dead, make) = spares.prune();
        assert_eq!((dead.len(), make), (1, 2));
        assert!(spares.drain().is_empty());
    }
}
