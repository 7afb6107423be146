//! Work that may wait until a call's answer is out: an executor hands over what it is done
//! with (a WebAssembly store, whose pool slot is reset when it is dropped) with [`defer`],
//! and work a later call would otherwise do on its own path (preparing its sandbox) with
//! [`spare_time`]. A caller that writes the answer itself runs the call inside [`answering`]
//! and, once the answer is written, [`Deferred::finish`]es what comes back. Everywhere else
//! [`defer`] drops at once and [`spare_time`] does nothing: there is no moment after the
//! answer to use.
//!
//! Nothing deferred is reachable by anyone: it only ends, or runs, later on the caller's task.

use std::any::Any;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What one call left for after its answer: values to end, then work to run.
#[derive(Default)]
struct Later {
    ends: Vec<Box<dyn Any + Send>>,
    work: Vec<Work>,
}

type Bin = Arc<Mutex<Later>>;

tokio::task_local! {
    static AFTER_ANSWER: Bin;
}

/// What a call deferred until its answer is out. [`Deferred::finish`] ends the values and
/// runs the work; dropping it only ends the values.
#[must_use = "dropping it at once ends what was deferred before the answer is out"]
pub struct Deferred(Later);

impl Deferred {
    /// Ends what was [`defer`]red, then runs what was left for [`spare_time`], in order.
    pub async fn finish(self) {
        let Later { ends, work } = self.0;
        drop(ends);
        for w in work {
            w.await;
        }
    }
}

/// Runs `call`, keeping what it [`defer`]s and leaves for [`spare_time`] for the caller to
/// finish after writing its answer.
pub async fn answering<F: Future>(call: F) -> (F::Output, Deferred) {
    let bin = Bin::default();
    let output = AFTER_ANSWER.scope(bin.clone(), call).await;
    let later = std::mem::take(&mut *bin.lock().unwrap_or_else(PoisonError::into_inner));
    (output, Deferred(later))
}

/// Ends `value` after the answer of the call running in this task when its caller asked for
/// that ([`answering`]), else now.
pub fn defer<T: Send + 'static>(value: T) {
    // Outside `answering` this is `Err`, and the value ended with the closure that held it.
    let _ = AFTER_ANSWER.try_with(|bin| {
        bin.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ends
            .push(Box::new(value))
    });
}

/// Runs the work `make` returns after the answer of the call running in this task when its
/// caller asked for that ([`answering`]); elsewhere `make` is not even called. Only for work
/// that is worth doing ahead and harmless to skip: a later call does it itself otherwise.
pub fn spare_time<F, W>(make: F)
where
    F: FnOnce() -> W,
    W: Future<Output = ()> + Send + 'static,
{
    let _ = AFTER_ANSWER.try_with(|bin| {
        bin.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .work
            .push(Box::pin(make()))
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

    #[tokio::test]
    async fn spare_time_work_runs_only_when_finished_after_the_ends() {
        let ended = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        // The work notes how many values had ended when it ran.
        let work = || {
            let (ended, ran) = (ended.clone(), ran.clone());
            move || async move {
                ran.store(100 + ended.load(Ordering::SeqCst), Ordering::SeqCst);
            }
        };
        spare_time(|| -> std::future::Ready<()> { panic!("outside answering: never made") });
        let ((), deferred) = answering(async {
            spare_time(work());
            defer(Counted(ended.clone()));
        })
        .await;
        drop(deferred);
        assert_eq!(ended.load(Ordering::SeqCst), 1);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "dropped: ended, not run");

        let ((), deferred) = answering(async {
            spare_time(work());
            defer(Counted(ended.clone()));
        })
        .await;
        assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing before the answer");
        deferred.finish().await;
        assert_eq!(
            ran.load(Ordering::SeqCst),
            102,
            "ran once its value had ended"
        );
    }
}
