//! One MCP connection's session, the header that names it to an HTTP client, and how long
//! it may sit idle.

use rmcp::model::MetaObject;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_core::{ClientChoices, Dispatcher, lock};

/// The header naming a client's session.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";

/// The `_meta` key of `initialize` that sets the session's own idle limit, in seconds.
pub(crate) const IDLE_KEY: &str = "warden/idle";

/// One MCP connection's session: its calls share per-session sandboxes (the Docker shell).
/// It ends when the connection does (the last handler is dropped, or [`Session::close`]).
#[derive(Default)]
pub(crate) struct Session {
    current: Mutex<Option<Dispatcher>>,
    /// What its client chose at `initialize`, by tool.
    choices: Mutex<ClientChoices>,
    activity: Activity,
}

/// When an HTTP session was last used, how many of its requests are being answered, and
/// the idle limit its client set.
struct Activity {
    last: Mutex<Instant>,
    busy: AtomicUsize,
    limit: Mutex<Option<Duration>>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            last: Mutex::new(Instant::now()),
            busy: AtomicUsize::new(0),
            limit: Mutex::new(None),
        }
    }
}

/// A request of a session being answered: the session is not idle until it is dropped.
pub(crate) struct Busy(Arc<Session>);

impl Drop for Busy {
    fn drop(&mut self) {
        // The time first: a sweep that sees no request busy also sees this one's end.
        self.0.touch();
        self.0.activity.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Session {
    /// This connection's dispatcher over `base`'s toolbox. After a reload the toolbox is new:
    /// the old session ends and a new one starts.
    pub(crate) fn dispatcher(&self, base: &Dispatcher) -> Dispatcher {
        let mut current = lock(&self.current);
        match current.as_ref() {
            Some(d) if Arc::ptr_eq(d.toolbox(), base.toolbox()) => d.clone(),
            _ => {
                let d = base.new_session_with(lock(&self.choices).clone());
                *current = Some(d.clone());
                d
            }
        }
    }

    /// Sets what the client chose for its tools, before its first call.
    pub(crate) fn set_choices(&self, choices: ClientChoices) {
        *lock(&self.choices) = choices;
    }

    /// Sets the session's own idle limit, in place of the server's.
    pub(crate) fn set_idle_limit(&self, limit: Option<Duration>) {
        *lock(&self.activity.limit) = limit;
    }

    /// Marks a request of the session as being answered, until the guard is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        self.activity.busy.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// Notes that the session was used now.
    pub(crate) fn touch(&self) {
        *lock(&self.activity.last) = Instant::now();
    }

    /// Whether no request of the session is being answered and none has been for longer
    /// than its own limit, else `default` (the server's; `None`: never).
    pub(crate) fn idle_past(&self, default: Option<Duration>, now: Instant) -> bool {
        let Some(limit) = (*lock(&self.activity.limit)).or(default) else {
            return false;
        };
        self.activity.busy.load(Ordering::SeqCst) == 0
            && now.saturating_duration_since(*lock(&self.activity.last)) >= limit
    }

    /// Ends the session now, and waits until its sandboxes are gone.
    pub(crate) async fn close(&self) {
        let current = lock(&self.current).take();
        if let Some(d) = current {
            d.close().await;
        }
    }
}

/// The idle limit `meta` (an `initialize`'s) sets: `_meta["warden/idle"]`, a number of
/// seconds above 0; or why it is refused, for the client.
pub(crate) fn read_idle_limit(meta: &MetaObject) -> Result<Option<Duration>, String> {
    let Some(value) = meta.get(IDLE_KEY) else {
        return Ok(None);
    };
    value
        .as_f64()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "`_meta[\"{IDLE_KEY}\"]` must be a number of seconds above 0 (how long the \
                 session may sit idle before it ends), not {}",
                Value::to_string(value)
            )
        })
}
