//! Work that may wait until a call's answer is out: an executor hands over what it is done
//! with (a WebAssembly store, whose pool slot is reset when it is dropped) with [`defer`],
//! and a caller that writes the answer itself runs the call inside [`answering`] and drops
//! what comes back once the answer is written. Everywhere else, [`defer`] drops at once.
//!
//! Nothing deferred is reachable by anyone: it only ends later, on the caller's task.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

type Bin = Arc<Mutex<Vec<Box<dyn Any + Send>>>>;

tokio::task_local! {
    static AFTER_ANSWER: Bin;
}

/// What a call deferred until its answer is out; dropping it ends them.
#[must_use = "dropping it at once ends what was deferred before the answer is out"]
pub struct Deferred {
    _values: Vec<Box<dyn Any + Send>>,
}

/// Runs `call`, keeping what it [`defer`]s for the caller to drop after writing its answer.
pub async fn answering<F: Future>(call: F) -> (F::Output, Deferred) {
    let bin = Bin::default();
    let output = AFTER_ANSWER.scope(bin.clone(), call).await;
    let deferred = std::mem::take(&mut *bin.lock().unwrap_or_else(PoisonError::into_inner));
    (output, Deferred { _values: deferred })
}

/// Ends `value` after the answer of the call running in this task when its caller asked for
/// that ([`answering`]), else now.
pub fn defer<T: Send + 'static>(value: T) {
    // Outside `answering` this is `Err`, and the value ended with the closure that held it.
    let _ = AFTER_ANSWER.try_with(|bin| {
        bin.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(value))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn deferred_values_end_when_the_caller_drops_them_and_at_once_elsewhere() {
        let ended = Arc::new(AtomicUsize::new(0));
        defer(Counted(ended.clone()));
        assert_eq!(
            ended.load(Ordering::SeqCst),
            1,
            "outside answering: at once"
        );
        let ((), deferred) = answering(async {
            defer(Counted(ended.clone()));
            defer(Counted(ended.clone()));
        })
        .await;
        assert_eq!(
            ended.load(Ordering::SeqCst),
            1,
            "kept until the answer is out"
        );
        drop(deferred);
        assert_eq!(ended.load(Ordering::SeqCst), 3);
    }
}
