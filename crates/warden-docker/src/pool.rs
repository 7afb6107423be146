//! A docker tool's warm pool (`pool = N`): N containers created, started and waiting for
//! their command, so a call (or a session's first command) finds its container ready instead
//! of waiting ~100 ms or more for the engine to make one.
//!
//! - **Each is used once**: a per-call container runs one command and is removed after, off
//!   the call's path; a session's runs that session. A pooled container is the same container
//!   a call would have started (same plan, limits, labels, lease, its own credentials and
//!   gate), only started earlier.
//! - **Refilled in the background**, one container at a time: every take makes up the depth
//!   again, and the used ones are removed in the same lane. Filling starts
//!   when a long-running front end gets the tool ready ([`warden_core::Executor::warm`]:
//!   `warden serve` at its start and at each reload); until then (`warden call`, `warden
//!   run`) the pool stays empty and each call starts its own container, as without a pool.
//! - **A container that died while waiting** is seen by a watcher (the engine's wait), taken
//!   out, removed and replaced. One that dies between that and its call never runs the
//!   call: its shell never prints the command's start line, and the call takes another.
//! - **Removed at the end**: the pool's end (the toolbox dropped, a reload, the process
//!   ending) removes what waits and what is still being removed, before it returns; one
//!   still being made when its runtime ends is removed by its guard. A warden killed
//!   outright leaves its pool to the lease: the next warden reaps it.
//! - **Only the tool's own calls**: a call whose memory limit differs from the tool's (no
//!   such call is made today) starts its own container.

use crate::container::Container;
use crate::engine::Engine;
use crate::launch::{Recipe, Started};
use crate::removal::{finish_apart, remove};
use bollard::query_parameters::WaitContainerOptionsBuilder;
use futures::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::task::AbortHandle;
use warden_command::spares::{Spare, Spares, Taken};
use warden_core::lock;

/// How long the pool's end waits for its containers' removal.
const REMOVAL_WAIT: Duration = Duration::from_secs(20);

/// The label `warden.mode` of a pooled container.
const MODE: &str = "pool";

/// A tool's pool. Clones share it.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    recipe: Recipe,
    /// The memory limit of its containers: the tool's.
    memory: u64,
    spares: Spares<Waiting>,
    /// Set by the first [`Pool::fill`]: from then on the pool is kept full.
    warmed: AtomicBool,
    /// Used containers still being removed, by id.
    removing: Mutex<HashSet<String>>,
    /// The pool's work with the engine, one thing at a time: a refill or a removal. Calls
    /// that come in a burst then share the engine (and the machine) with one start or removal,
    /// not with one for each call before them.
    lane: Arc<tokio::sync::Semaphore>,
}

/// A container waiting in the pool, and what watches it.
struct Waiting {
    started: Started,
    dead: Arc<AtomicBool>,
    watcher: AbortHandle,
}

impl Spare for Waiting {
    fn alive(&self) -> bool {
        !self.dead.load(Ordering::Acquire)
    }
}

impl Pool {
    /// A pool of `depth` containers made by `recipe` with `memory` bytes each; empty until
    /// [`Pool::fill`] or the first take.
    pub(crate) fn new(recipe: Recipe, depth: usize, memory: u64) -> Self {
        Pool {
            inner: Arc::new(Inner {
                recipe,
                memory,
                spares: Spares::new(depth),
                warmed: AtomicBool::new(false),
                removing: Mutex::default(),
                lane: Arc::new(tokio::sync::Semaphore::new(1)),
            }),
        }
    }

    /// Makes up the depth in the background, removing what died, and keeps it from now on.
    /// Inside a tokio runtime.
    pub(crate) fn fill(&self) {
        self.inner.warmed.store(true, Ordering::Release);
        let (dead, make) = self.inner.spares.prune();
        self.refill(dead, make);
    }

    /// A waiting container for a call held to `memory` bytes, when one is ready; once the
    /// pool is warm, it is made up again in the background either way.
    pub(crate) fn take(&self, env: &[(String, String)], memory: u64) -> Option<Started> {
        if memory != self.inner.memory || !self.inner.warmed.load(Ordering::Acquire) {
            return None;
        }
        // A session whose client set variables needs a container started with them.
        let spares_env = self.inner.recipe.grants.resolve_env(&BTreeMap::new());
        if spares_env.ok().as_deref() != Some(env) {
            return None;
        }
        let Taken { spare, dead, make } = self.inner.spares.take();
        self.refill(dead, make);
        spare.map(|waiting| {
            waiting.watcher.abort();
            waiting.started
        })
    }

    /// Removes a container a call used, off the call's path.
    pub(crate) fn dispose(&self, started: Started) {
        let id = started.container.id.clone();
        lock(&self.inner.removing).insert(id.clone());
        let inner = Arc::downgrade(&self.inner);
        let lane = self.inner.lane.clone();
        tokio::spawn(async move {
            drop(started.attached);
            let _turn = lane.acquire_owned().await;
            started.container.remove().await;
            if let Some(inner) = inner.upgrade() {
                lock(&inner.removing).remove(&id);
            }
        });
    }

    fn refill(&self, dead: Vec<Waiting>, make: usize) {
        for waiting in dead {
            tracing::info!(container = %waiting.started.container.id,
                "a pooled container stopped while it waited: replaced");
            tokio::spawn(waiting.started.container.remove());
        }
        for _ in 0..make {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                let made = match inner.lane.clone().acquire_owned().await {
                    Ok(_turn) => inner.make().await,
                    Err(_) => None,
                };
                inner.spares.made(made);
            });
        }
    }
}

impl Inner {
    /// One container for the pool, watched; `None` (logged) when it could not be made: the
    /// next call starts its own, and says why if it cannot either.
    async fn make(self: &Arc<Self>) -> Option<Waiting> {
        let started = match self.recipe.grants.resolve_env(&BTreeMap::new()) {
            Ok(env) => self.recipe.start(&env, self.memory, MODE).await,
            Err(e) => Err(e),
        };
        let started = match started {
            Ok(started) => started,
            Err(e) => {
                tracing::warn!(tool = %self.recipe.plan.tool,
                    "a container for the pool could not be started: {}", e.message);
                return None;
            }
        };
        let dead = Arc::new(AtomicBool::new(false));
        let watcher = tokio::spawn(watch(
            started.docker.clone(),
            started.container.id.clone(),
            dead.clone(),
            Arc::downgrade(self),
        ))
        .abort_handle();
        Some(Waiting {
            started,
            dead,
            watcher,
        })
    }
}

/// Waits for a pooled container to stop; then marks it dead and makes the pool whole again.
async fn watch(docker: bollard::Docker, id: String, dead: Arc<AtomicBool>, pool: Weak<Inner>) {
    let options = WaitContainerOptionsBuilder::new()
        .condition("not-running")
        .build();
    let _ = docker.wait_container(&id, Some(options)).next().await;
    dead.store(true, Ordering::Release);
    if let Some(inner) = pool.upgrade() {
        Pool { inner }.fill();
    }
}

impl Drop for Inner {
    /// Removes every container of the pool, waiting and used, before it returns: on a thread
    /// of its own with a client of its own, since the runtime the pool ran on may be ending.
    fn drop(&mut self) {
        let mut ids: Vec<String> = lock(&self.removing).drain().collect();
        for waiting in self.spares.drain() {
            waiting.watcher.abort();
            drop(waiting.started.attached);
            ids.push(Container::disarm(waiting.started.container));
        }
        if ids.is_empty() {
            return;
        }
        let engine = self.recipe.engine.clone();
        finish_apart("warden-docker-pool", async move {
            remove_all(&engine, ids).await;
        });
    }
}

/// Removes `ids` from the engine within [`REMOVAL_WAIT`], with a client of its own.
async fn remove_all(engine: &Engine, ids: Vec<String>) {
    let Some(docker) = engine.fresh_client().await else {
        tracing::warn!("the pool's containers could not be removed: no engine answers");
        return;
    };
    let removals = futures::future::join_all(ids.iter().map(|id| remove(&docker, id)));
    if tokio::time::timeout(REMOVAL_WAIT, removals).await.is_err() {
        tracing::warn!("removing the pool's containers took over {REMOVAL_WAIT:?}");
    }
}
