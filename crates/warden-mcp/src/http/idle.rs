//! When an HTTP session ends for want of use, and when the server stops for it: every
//! [`IDLE_SWEEP`], sessions idle past their limit end as a `DELETE` ends them, sessions their
//! client never finished starting end after [`START_GRACE`], and a server told to
//! (`HttpOptions::stop_idle`) stops once it has held no session and had no request that long.

use super::{Ending, Endpoint};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often sessions are checked for idleness.
const IDLE_SWEEP: Duration = Duration::from_millis(500);

/// How long a session may go without its client's `notifications/initialized` (it cannot be
/// used before): at most this long, or the server's idle limit when that is shorter.
const START_GRACE: Duration = Duration::from_secs(60);

/// Ends, every [`IDLE_SWEEP`], the sessions idle past their limit (else `default`), and those
/// whose client never finished starting them past [`START_GRACE`]; stops the server once it
/// has been idle `stop_idle`.
pub(super) async fn end_idle_sessions(
    endpoint: Arc<Endpoint>,
    default: Option<Duration>,
    stop_idle: Option<Duration>,
) {
    let mut sweep = tokio::time::interval(IDLE_SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let grace = default.map_or(START_GRACE, |idle| idle.min(START_GRACE));
    // Sessions seen without `initialized`, since when.
    let mut starting = HashMap::new();
    loop {
        sweep.tick().await;
        let now = Instant::now();
        for id in endpoint.ending.shared.idle_sessions(default, now) {
            if endpoint.ending.close(&id).await {
                tracing::info!(session = %id, "ended an idle MCP session and its sandboxes");
            }
        }
        for id in endpoint.ending.unstarted(&mut starting, now, grace).await {
            if endpoint.ending.close(&id).await {
                tracing::info!(session = %id, "ended an MCP session its client never started");
            }
        }
        if let Some(limit) = stop_idle
            && endpoint.idle_for(now).await >= limit
        {
            tracing::info!("stopping: no session and no request for {limit:?}");
            endpoint.ending.shared.calls.stop();
            return;
        }
    }
}

impl Endpoint {
    /// How long the server has held no session, sent no answer and had no request, at `now`.
    async fn idle_for(&self, now: Instant) -> Duration {
        if !self.answers.is_empty() || !self.ending.sessions.sessions.read().await.is_empty() {
            return Duration::ZERO;
        }
        let Some(last) = &self.last_request else {
            return Duration::ZERO;
        };
        let last = *last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        now.saturating_duration_since(last)
    }
}

impl Ending {
    /// The sessions rmcp holds whose `initialized` has not come in `grace` since a sweep first
    /// saw them (`starting` remembers when, for the sessions still starting).
    async fn unstarted(
        &self,
        starting: &mut HashMap<String, Instant>,
        now: Instant,
        grace: Duration,
    ) -> Vec<String> {
        let held: Vec<String> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .map(ToString::to_string)
            .collect();
        starting.retain(|id, _| held.contains(id));
        let mut late = Vec::new();
        for id in held {
            if self.shared.session(&id).is_some() {
                starting.remove(&id);
            } else if now.duration_since(*starting.entry(id.clone()).or_insert(now)) >= grace {
                starting.remove(&id);
                late.push(id);
            }
        }
        late
    }
}
