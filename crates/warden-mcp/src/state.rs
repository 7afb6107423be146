//! What every session shares: the toolbox in force, its dispatcher, the clients to tell
//! when it changes.

use crate::calls::Calls;
use crate::convert;
use crate::review::ElicitationReviewer;
use crate::session::Session;
use crate::stateless_review::StatelessReview;
use rmcp::{Peer, RoleServer};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};
use warden_core::{Admission, CallLog, Dispatcher, Policy, Reviewer, Toolbox, ToolboxError};

/// Loads the toolbox afresh: once before serving, and again whenever its policies change.
pub type Loader = Arc<dyn Fn() -> Result<Toolbox, ToolboxError> + Send + Sync>;

/// Loads the tools of one policy, as the toolbox's backends do: a fork's, its read-write
/// roots moved to copies.
pub type PolicyLoader = Arc<dyn Fn(Policy) -> Result<Toolbox, ToolboxError> + Send + Sync>;

/// How the server runs calls.
#[derive(Clone)]
pub struct Options {
    /// Admission for all sessions together: global concurrency, memory budget, run limits.
    pub admission: Admission,
    /// Where every call is recorded.
    pub call_log: Option<Arc<CallLog>>,
    /// The toolbox folder whose `*.toml` files are watched; `None` never reloads.
    pub watch: Option<PathBuf>,
    /// How often the policy files are looked at.
    pub poll_interval: Duration,
    /// Calls that may wait for one of the places the admission's global concurrency gives,
    /// across the server; a call past them is answered `unavailable` over HTTP, while over
    /// stdio the server reads no further until one has answered.
    pub queue: usize,
    /// How long the calls in flight when the server is told to stop ([`Server::stop`]) may
    /// take to answer; those still running then are cancelled.
    pub drain: Duration,
    /// The transactions its calls commit, which a client may undo (`warden/undo`,
    /// `warden/rewind`: see `crate::undo`); `None`: those requests are refused.
    pub transactions: Option<Arc<warden_tx::Store>>,
    /// The snapshots a client takes of its sessions' sandboxes and restores into them
    /// (`warden/snapshot`, `warden/restore`: see `crate::snapshot`); `None`: refused.
    pub snapshots: Option<Arc<warden_snapshot::Snapshots>>,
    /// Loads a fork's policies again with its read-write roots moved to copies
    /// (`warden/restore` with `"fork": true` of a snapshot that marks roots); `None`: such a
    /// fork is refused.
    pub policy_loader: Option<PolicyLoader>,
    /// Who reviews every call that needs review, instead of the client that sent it
    /// (`warden serve --console`: a person at the console's page); `None`: the client.
    pub reviewer: Option<Arc<dyn Reviewer>>,
}

impl Options {
    /// The default [`Options::queue`].
    pub const QUEUE: usize = 1024;
    /// The default [`Options::drain`].
    pub const DRAIN: Duration = Duration::from_secs(2);
}

impl Default for Options {
    fn default() -> Self {
        Self {
            admission: Admission::default(),
            call_log: None,
            watch: None,
            poll_interval: Duration::from_secs(1),
            queue: Self::QUEUE,
            drain: Self::DRAIN,
            transactions: None,
            snapshots: None,
            policy_loader: None,
            reviewer: None,
        }
    }
}

/// The toolbox in force, with what `tools/list` shows of it.
pub(crate) struct Snapshot {
    pub dispatcher: Dispatcher,
    pub tools: Vec<rmcp::model::Tool>,
}

/// An MCP server over a toolbox. Cheap to clone: clones share everything.
#[derive(Clone)]
pub struct Server {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    current: RwLock<Arc<Snapshot>>,
    pub loader: Loader,
    pub options: Options,
    pub reviewer: Arc<ElicitationReviewer>,
    /// Review on protocol 2026-07-28, by input requests.
    pub stateless: Arc<StatelessReview>,
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// The sessions of HTTP clients by their `Mcp-Session-Id`, so that a client's `DELETE`
    /// can end its session's sandboxes before it is answered. Weak: a session that ends
    /// otherwise (its transport closed) is not kept alive by this map.
    sessions: Mutex<HashMap<String, Weak<Session>>>,
    /// `mcp-<run>-`: what this server's call ids start with, `run` drawn at its start, so
    /// that the records of two runs or two replicas in one call log never share an id.
    call_prefix: String,
    next_call: AtomicU64,
    /// The calls in flight, over every transport.
    pub calls: Calls,
}

impl Server {
    /// Loads the toolbox now, so that the very first request is answered from it.
    pub fn new(loader: Loader, options: Options) -> Result<Server, crate::Error> {
        let toolbox = loader()?;
        let reviewer = Arc::new(ElicitationReviewer::default());
        let snapshot = snapshot(toolbox, &options, &reviewer);
        let calls = Calls::new(
            options.admission.global_concurrency,
            options.queue,
            options.drain,
        );
        Ok(Server {
            shared: Arc::new(Shared {
                current: RwLock::new(Arc::new(snapshot)),
                loader,
                options,
                reviewer,
                stateless: Arc::new(
                    StatelessReview::new().map_err(|e| crate::Error::Random(e.to_string()))?,
                ),
                peers: Mutex::default(),
                sessions: Mutex::default(),
                call_prefix: call_prefix()?,
                next_call: AtomicU64::new(1),
                calls,
            }),
        })
    }

    /// Stops the server: from now on every new call is answered `unavailable`, and the
    /// calls in flight have [`Options::drain`] to answer, after which those still running
    /// are cancelled (answered `unavailable` too). Each is answered and logged once. Serving
    /// ([`Server::serve_io`], [`HttpServer::run`](crate::HttpServer::run)) then ends and
    /// returns.
    pub fn stop(&self) {
        self.shared.calls.stop();
    }

    /// The names of the tools in force.
    pub fn tool_names(&self) -> Vec<String> {
        let snapshot = self.shared.snapshot();
        snapshot.tools.iter().map(|t| t.name.to_string()).collect()
    }
}

fn snapshot(toolbox: Toolbox, options: &Options, reviewer: &Arc<ElicitationReviewer>) -> Snapshot {
    let tools = toolbox.tools().map(convert::tool).collect();
    let reviewer: Arc<dyn Reviewer> = match &options.reviewer {
        Some(theirs) => theirs.clone(),
        None => reviewer.clone(),
    };
    let mut dispatcher =
        Dispatcher::with_admission(Arc::new(toolbox), options.admission).reviewer(reviewer);
    if let Some(log) = &options.call_log {
        dispatcher = dispatcher.call_log(log.clone());
    }
    Snapshot { dispatcher, tools }
}

impl Shared {
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Gets the tools in force ready ahead of their first calls (warm pools fill): when
    /// serving starts, and for each reloaded toolbox.
    pub(crate) fn warm(&self) {
        self.snapshot().dispatcher.toolbox().warm();
    }

    /// A `tool_call_id` unique across runs (JSON-RPC ids repeat across sessions).
    pub(crate) fn next_call_id(&self) -> String {
        // Written by hand: `format!`'s machinery took ~1 % of the server's CPU a call.
        let n = self.next_call.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(32);
        id.push_str(&self.call_prefix);
        id.push_str(itoa::Buffer::new().format(n));
        id
    }

    /// Remembers a client to tell when the tool list changes.
    pub(crate) fn add_peer(&self, peer: Peer<RoleServer>) {
        let mut peers = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// Remembers the session an HTTP client's `Mcp-Session-Id` names.
    pub(crate) fn add_session(&self, id: &str, session: &Arc<Session>) {
        let mut sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.retain(|_, s| s.strong_count() > 0);
        sessions.insert(id.to_owned(), Arc::downgrade(session));
    }

    /// Forgets the session `id` names, and hands it over if it still runs.
    pub(crate) fn take_session(&self, id: &str) -> Option<Arc<Session>> {
        let mut sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.remove(id).and_then(|s| s.upgrade())
    }

    /// The ids of the HTTP sessions idle past their limit (else `default`) at `now`.
    pub(crate) fn idle_sessions(&self, default: Option<Duration>, now: Instant) -> Vec<String> {
        let sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions
            .iter()
            .filter(|(_, s)| s.upgrade().is_some_and(|s| s.idle_past(default, now)))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The HTTP session `id` names, if it still runs.
    pub(crate) fn session(&self, id: &str) -> Option<Arc<Session>> {
        let sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.get(id).and_then(Weak::upgrade)
    }

    /// Ends every HTTP session still open, and waits until their sandboxes are gone.
    pub(crate) async fn close_sessions(&self) {
        let sessions: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain()
            .filter_map(|(_, s)| s.upgrade())
            .collect();
        for session in sessions {
            session.close().await;
        }
    }

    /// Loads the toolbox again; on success it replaces the one in force (calls already running
    /// finish on the old one) and clients hear of it when the list changed. On failure the old
    /// toolbox stays.
    pub(crate) async fn reload(&self) {
        let loader = self.loader.clone();
        let toolbox = match tokio::task::spawn_blocking(move || loader()).await {
            Ok(Ok(toolbox)) => toolbox,
            Ok(Err(e)) => {
                tracing::error!(
                    "the policies changed but do not load, so the previous toolbox stays in force: {e}"
                );
                return;
            }
            Err(e) => {
                tracing::error!("reloading the toolbox failed: {e}");
                return;
            }
        };
        // A policy served now that no longer loads (a bad edit, or no descriptor left to read
        // it with) keeps the toolbox in force rather than take its tools away.
        let lost = {
            let current = self.snapshot();
            let served = current.dispatcher.toolbox().policies();
            toolbox
                .broken()
                .iter()
                .find(|b| served.iter().any(|p| p.policy.path == b.path))
                .map(|b| b.error.to_string())
        };
        if let Some(e) = lost {
            tracing::error!(
                "the policies changed but one served now does not load, so the previous toolbox \
                 stays in force: {e}"
            );
            return;
        }
        let next = Arc::new(snapshot(toolbox, &self.options, &self.reviewer));
        next.dispatcher.toolbox().warm();
        let changed = {
            let mut current = self
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let changed = current.tools != next.tools;
            *current = next;
            changed
        };
        tracing::info!(changed, "reloaded the toolbox");
        if changed {
            self.notify_list_changed().await;
        }
    }

    async fn notify_list_changed(&self) {
        let peers: Vec<Peer<RoleServer>> = {
            let mut peers = self
                .peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!("cannot tell a client that the tools changed: {e}");
            }
        }
    }
}

/// `mcp-` and 8 random hex digits, then `-`: one server run's call ids.
fn call_prefix() -> Result<String, crate::Error> {
    let mut run = [0u8; 4];
    getrandom::fill(&mut run).map_err(|e| crate::Error::Random(e.to_string()))?;
    Ok(format!("mcp-{}-", hex::encode(run)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_draws_its_own_call_id_prefix() {
        let (a, b) = (call_prefix().unwrap(), call_prefix().unwrap());
        assert_ne!(a, b);
        assert!(
            a.starts_with("mcp-") && a.ends_with('-') && a.len() == 13,
            "{a}"
        );
    }
}
