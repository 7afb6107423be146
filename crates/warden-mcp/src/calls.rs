//! The calls in flight across the server, whatever their transport or session: how many may
//! be, and how they end when the server is told to stop.
//!
//! A call holds a place from its arrival until its answer is written. There are places for
//! as many calls as the dispatcher runs at once (its global concurrency: the engine's
//! capacity, which holds more) and for a queue of calls waiting for those; the dispatcher's
//! admission decides which waiting call runs next. A call over HTTP that finds no place is
//! answered `unavailable` at once; over stdio the reader waits for a place before it reads
//! on, so the client's pipe holds the rest of a burst, whatever its size.
//!
//! When the server is told to stop ([`Server::stop`](crate::Server::stop)), no new call is
//! taken (each is answered `unavailable`), those in flight have until the drain's deadline to
//! answer, and those still running then are cancelled and answered `unavailable`. Every one
//! is answered and logged once, through the dispatcher, as any call is.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use warden_core::{ErrorKind, ToolError};

/// The calls in flight, and the server's stop.
pub(crate) struct Calls {
    /// Every call in flight holds a token of it until its answer is written.
    in_flight: TaskTracker,
    /// Every call in flight holds one: `running` + `queued` of them.
    places: Arc<Semaphore>,
    running: usize,
    queued: usize,
    /// Cancelled when the server is told to stop.
    stopping: CancellationToken,
    /// Cancelled when the drain's deadline has passed: the calls still running are cut.
    cut: CancellationToken,
    /// How long calls in flight at the stop may take to answer.
    drain: Duration,
}

/// A call's place among those in flight: held until its answer is written, so that a drain
/// ends only once the answers are out.
pub(crate) struct Place {
    _permit: OwnedSemaphorePermit,
    _token: TaskTrackerToken,
}

/// A place the stdio reader found for a call it hands to rmcp, carried in the request's
/// extensions to the handler, which takes it.
#[derive(Clone)]
pub(crate) struct Reserved(Arc<Mutex<Option<Place>>>);

impl Reserved {
    pub(crate) fn new(place: Place) -> Self {
        Self(Arc::new(Mutex::new(Some(place))))
    }

    /// The place, to the first who asks.
    pub(crate) fn take(&self) -> Option<Place> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl Calls {
    /// Places for `running` calls and `queued` more waiting, and `drain` for a stop.
    pub(crate) fn new(running: usize, queued: usize, drain: Duration) -> Self {
        let running = running.max(1);
        Self {
            places: Arc::new(Semaphore::new(running.saturating_add(queued))),
            running,
            queued,
            in_flight: TaskTracker::new(),
            stopping: CancellationToken::new(),
            cut: CancellationToken::new(),
            drain,
        }
    }

    /// A place for a call that has just arrived, or why it is refused: every place is taken,
    /// or the server is stopping.
    pub(crate) fn enter(&self) -> Result<Place, ToolError> {
        if self.stopping.is_cancelled() {
            return Err(stopping());
        }
        match self.places.clone().try_acquire_owned() {
            Ok(permit) => Ok(self.place(permit)),
            Err(_) => Err(ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "warden has as many calls in flight as it takes: {} running or about to, \
                     and {} waiting for them (--max-queued-calls); make the call again once \
                     some have answered",
                    self.running, self.queued
                ),
            )),
        }
    }

    /// A place for a call that has just arrived, waiting for one while every place is taken;
    /// refused only once the server is stopping.
    pub(crate) async fn wait_to_enter(&self) -> Result<Place, ToolError> {
        // Without waiting when there is room: no waker registered, no budget spent.
        if self.stopping.is_cancelled() {
            return Err(stopping());
        }
        if let Ok(permit) = self.places.clone().try_acquire_owned() {
            return Ok(self.place(permit));
        }
        let permit = tokio::select! {
            biased;
            () = self.stopping.cancelled() => return Err(stopping()),
            permit = self.places.clone().acquire_owned() => permit,
        };
        // The semaphore is never closed, so there is always a permit.
        permit.map(|p| self.place(p)).map_err(|_| stopping())
    }

    fn place(&self, permit: OwnedSemaphorePermit) -> Place {
        Place {
            _permit: permit,
            _token: self.in_flight.token(),
        }
    }

    /// Tells the server to stop.
    pub(crate) fn stop(&self) {
        self.stopping.cancel();
    }

    /// Whether the server has been told to stop.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Resolves once the server is told to stop.
    pub(crate) fn stopping(&self) -> WaitForCancellationFuture<'_> {
        self.stopping.cancelled()
    }

    /// Resolves once the calls still running are to be cut: the drain's deadline has passed.
    pub(crate) fn cut(&self) -> WaitForCancellationFuture<'_> {
        self.cut.cancelled()
    }

    /// Why a call cut by the drain's deadline is answered as it is.
    pub(crate) fn cut_error(&self) -> ToolError {
        ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "cancelled: warden was told to stop and the call had not finished {:?} later; \
                 its sandbox was stopped, and the call may be made again once warden has \
                 restarted",
                self.drain
            ),
        )
        .with_detail("cancelled", true)
    }

    /// Once the server is told to stop: waits until every call in flight has answered,
    /// cutting those still running after the drain's deadline. Those cut answer at once.
    pub(crate) async fn drain(&self) {
        self.stopping.cancelled().await;
        self.in_flight.close();
        if tokio::time::timeout(self.drain, self.in_flight.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "{} calls still running {:?} after warden was told to stop: cancelling them",
                self.in_flight.len(),
                self.drain
            );
            self.cut.cancel();
            self.in_flight.wait().await;
        }
    }
}

/// Why a call that arrives once the server is stopping is refused.
fn stopping() -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        "warden is stopping and takes no new calls: make the call again once it has \
         restarted, or on another server",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_waits_for_places_and_cuts_at_its_deadline() {
        let calls = Calls::new(4, 0, Duration::from_millis(50));
        let quick = calls.enter().unwrap();
        let slow = calls.enter().unwrap();
        calls.stop();
        assert!(calls.enter().is_err(), "no new call once stopping");
        let drained = calls.drain();
        tokio::pin!(drained);
        // The quick call answers; the slow one holds its place until it is cut.
        drop(quick);
        tokio::select! {
            () = &mut drained => panic!("drained with a call in flight"),
            () = calls.cut() => drop(slow),
        }
        drained.await;
    }

    #[tokio::test]
    async fn places_run_out_then_wait_or_refuse() {
        let calls = Calls::new(1, 1, Duration::from_secs(1));
        let first = calls.enter().unwrap();
        let _second = calls.enter().unwrap();
        let full = calls.enter().map(drop).unwrap_err();
        assert!(full.message.contains("--max-queued-calls"), "{full:?}");
        let waiting = calls.wait_to_enter();
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("a place while all are taken"),
            () = tokio::task::yield_now() => {}
        }
        drop(first);
        waiting.await.unwrap();
    }
}
