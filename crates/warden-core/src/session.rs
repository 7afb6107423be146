//! The session a dispatcher runs its calls in, and its end.

use crate::executor::{Executor, SessionId};
use crate::grants::CallerEnv;
use crate::toolbox::Toolbox;
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a session's client chose for its tools, each within what the tool's policy allows:
/// checked when the client chooses, and again at each call (the toolbox may have been
/// reloaded since).
#[derive(Debug, Clone, Default)]
pub struct ClientChoices {
    /// Variables, by tool: each a name the policy's `env_from_caller` allows.
    pub env: BTreeMap<String, CallerEnv>,
    /// The image each tool's containers run, by tool: one its policy lists (a docker tool's
    /// `image` or `images`).
    pub images: BTreeMap<String, Arc<str>>,
}

/// Ends its session on every executor of its toolbox, when closed or at the latest when the
/// last dispatcher sharing it is dropped.
pub(crate) struct Scope {
    pub id: SessionId,
    /// What the session's client chose, by tool.
    pub choices: ClientChoices,
    toolbox: Arc<Toolbox>,
    /// A call ran since the session last ended: there may be something to free.
    used: AtomicBool,
}

impl Scope {
    pub(crate) fn new(toolbox: Arc<Toolbox>, choices: ClientChoices) -> Self {
        Self {
            id: SessionId::fresh(),
            choices,
            toolbox,
            used: AtomicBool::new(false),
        }
    }

    /// Notes that a call is about to run in the session.
    pub(crate) fn touch(&self) {
        self.used.store(true, Ordering::Release);
    }

    /// Every executor once (tools of one component share theirs).
    fn executors(&self) -> Vec<Arc<dyn Executor>> {
        let mut seen = HashSet::new();
        self.toolbox
            .tools()
            .filter(|t| seen.insert(Arc::as_ptr(&t.executor) as *const () as usize))
            .map(|t| t.executor.clone())
            .collect()
    }

    /// Ends the session now and waits until every executor has freed it.
    pub(crate) async fn close(&self) {
        if !self.used.swap(false, Ordering::AcqRel) {
            return;
        }
        let ends = self.executors();
        futures::future::join_all(ends.iter().map(|e| e.end_session(self.id))).await;
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if !self.used.load(Ordering::Acquire) {
            return;
        }
        // Without a runtime nothing can be awaited; executors free their sessions when they
        // are dropped themselves.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = self.id;
        for executor in self.executors() {
            handle.spawn(async move { executor.end_session(id).await });
        }
    }
}
