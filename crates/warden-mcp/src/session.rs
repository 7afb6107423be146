//! One MCP connection's session, and the header that names it to an HTTP client.

use std::sync::Arc;
use std::sync::Mutex;
use warden_core::Dispatcher;

/// The header naming a client's session.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";

/// One MCP connection's session: its calls share per-session sandboxes (the Docker shell).
/// It ends when the connection does (the last handler is dropped, or [`Session::close`]).
#[derive(Default)]
pub(crate) struct Session {
    current: Mutex<Option<Dispatcher>>,
}

impl Session {
    /// This connection's dispatcher over `base`'s toolbox. After a reload the toolbox is new:
    /// the old session ends and a new one starts.
    pub(crate) fn dispatcher(&self, base: &Dispatcher) -> Dispatcher {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match current.as_ref() {
            Some(d) if Arc::ptr_eq(d.toolbox(), base.toolbox()) => d.clone(),
            _ => {
                let d = base.new_session();
                *current = Some(d.clone());
                d
            }
        }
    }

    /// Ends the session now, and waits until its sandboxes are gone.
    pub(crate) async fn close(&self) {
        let current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(d) = current {
            d.close().await;
        }
    }
}
