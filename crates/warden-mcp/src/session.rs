//! One MCP connection's session, the header that names it to an HTTP client, and how long
//! it may sit idle.

use rmcp::model::MetaObject;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_core::{ClientChoices, Dispatcher, Toolbox, lock};
use warden_snapshot::ForkRoots;

/// The header naming a client's session.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";

/// The `_meta` key of `initialize` that sets the session's own idle limit, in seconds.
pub(crate) const IDLE_KEY: &str = "warden/idle";

/// One MCP connection's session: its calls share per-session sandboxes (the Docker shell).
/// It ends when the connection does (the last handler is dropped, or [`Session::close`]).
#[derive(Default)]
pub(crate) struct Session {
    current: Mutex<Current>,
    /// What its client chose at `initialize`, by tool.
    choices: Mutex<ClientChoices>,
    activity: Activity,
}

/// The session's dispatcher, and what a fork set: one lock, taken once a call.
#[derive(Default)]
struct Current {
    dispatcher: Option<Dispatcher>,
    /// The session's own toolbox and the copies of roots it sees.
    fork: Option<Fork>,
}

/// A fork's toolbox (its read-write roots moved to copies), kept whatever the server reloads
/// since: a reload must not move the fork back onto the real folders.
struct Fork {
    toolbox: Arc<Toolbox>,
    /// Removed when the session's sandboxes are gone.
    roots: Arc<ForkRoots>,
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
    /// the old session ends and a new one starts; a fork's session keeps its own toolbox.
    pub(crate) fn dispatcher(&self, base: &Dispatcher) -> Dispatcher {
        let mut current = lock(&self.current);
        let toolbox = current.fork.as_ref().map_or(base.toolbox(), |f| &f.toolbox);
        match &current.dispatcher {
            Some(d) if Arc::ptr_eq(d.toolbox(), toolbox) => d.clone(),
            _ => {
                let choices = lock(&self.choices).clone();
                let d = match &current.fork {
                    Some(fork) => base.new_session_over(fork.toolbox.clone(), choices),
                    None => base.new_session_with(choices),
                };
                current.dispatcher = Some(d.clone());
                d
            }
        }
    }

    /// Makes the session a fork's: from now on its calls run over `toolbox`, whose sandboxes
    /// see `roots` in place of the real folders. Sandboxes it had are ended first.
    pub(crate) async fn fork(&self, toolbox: Arc<Toolbox>, roots: ForkRoots) {
        // Under one lock: a request meanwhile starts its session over the fork's toolbox.
        let (replaced, before) = {
            let mut current = lock(&self.current);
            let fork = Fork {
                toolbox,
                roots: Arc::new(roots),
            };
            (current.fork.replace(fork), current.dispatcher.take())
        };
        if let Some(d) = before {
            d.close().await;
        }
        // An earlier fork's copies go once nothing runs on them.
        drop(replaced);
    }

    /// The copies of the roots a fork's sandboxes see, when the session is a fork's.
    pub(crate) fn fork_roots(&self) -> Option<Arc<ForkRoots>> {
        lock(&self.current).fork.as_ref().map(|f| f.roots.clone())
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
        let current = lock(&self.current).dispatcher.take();
        if let Some(d) = current {
            d.close().await;
        }
        // The copies of a fork's roots, once its sandboxes are gone.
        lock(&self.current).fork.take();
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
