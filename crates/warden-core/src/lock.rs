//! Taking a mutex whose holder panicked: every lock of warden's guards state that stays
//! consistent between its statements (a map, a list, a count), so a panic elsewhere is no
//! reason to fail every later call that needs it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex`'s guard, poisoned or not.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
