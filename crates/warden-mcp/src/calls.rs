//! The calls in flight across the server, whatever their transport or session, and how they
//! end when the server is told to stop ([`Server::stop`](crate::Server::stop)): no new call is
//! taken (each is answered `unavailable`), those in flight have until the drain's deadline to
//! answer, and those still running then are cancelled and answered `unavailable`. Every one
//! is answered and logged once, through the dispatcher, as any call is.

use std::time::Duration;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use warden_core::{ErrorKind, ToolError};

/// The calls in flight, and the server's stop.
pub(crate) struct Calls {
    /// Every call in flight holds a token of it until its answer is written.
    in_flight: TaskTracker,
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
    _token: TaskTrackerToken,
}

impl Calls {
    pub(crate) fn new(drain: Duration) -> Self {
        Self {
            in_flight: TaskTracker::new(),
            stopping: CancellationToken::new(),
            cut: CancellationToken::new(),
            drain,
        }
    }

    /// A place for a call that has just arrived; once the server is stopping, why it is
    /// refused.
    pub(crate) fn enter(&self) -> Result<Place, ToolError> {
        if self.stopping.is_cancelled() {
            return Err(stopping());
        }
        Ok(Place {
            _token: self.in_flight.token(),
        })
    }

    /// Tells the server to stop.
    pub(crate) fn stop(&self) {
        self.stopping.cancel();
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
        let calls = Calls::new(Duration::from_millis(50));
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
}
