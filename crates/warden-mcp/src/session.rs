//! One MCP connection's session, and the header that names it to an HTTP client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use warden_core::{CallerEnv, Dispatcher, lock};

/// The header naming a client's session.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";

/// One MCP connection's session: its calls share per-session sandboxes (the Docker shell).
/// It ends when the connection does (the last handler is dropped, or [`Session::close`]).
#[derive(Default)]
pub(crate) struct Session {
    current: Mutex<Option<Dispatcher>>,
    /// The variables its client set at `initialize`, by tool.
    caller_env: Mutex<BTreeMap<String, CallerEnv>>,
}

impl Session {
    /// This connection's dispatcher over `base`'s toolbox. After a reload the toolbox is new:
    /// the old session ends and a new one starts.
    pub(crate) fn dispatcher(&self, base: &Dispatcher) -> Dispatcher {
        let mut current = lock(&self.current);
        match current.as_ref() {
            Some(d) if Arc::ptr_eq(d.toolbox(), base.toolbox()) => d.clone(),
            _ => {
                let d = base.new_session_with(lock(&self.caller_env).clone());
                *current = Some(d.clone());
                d
            }
        }
    }

    /// Sets the variables the client asks for, by tool, before its first call.
    pub(crate) fn set_caller_env(&self, env: BTreeMap<String, CallerEnv>) {
        *lock(&self.caller_env) = env;
    }

    /// Ends the session now, and waits until its sandboxes are gone.
    pub(crate) async fn close(&self) {
        let current = lock(&self.current).take();
        if let Some(d) = current {
            d.close().await;
        }
    }
}
