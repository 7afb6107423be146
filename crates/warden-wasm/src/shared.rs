//! What every tool of one component shares: its engine and pre-instantiated component, its
//! grants, and how a call's sandbox is made from them.

use crate::net::NetGate;
use crate::sandbox::{CallIo, CallState, Sandbox};
use crate::view::Views;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Grants, Limits, Meter, NetGrants, ToolError};
use warden_net::{Credentials, Egress};
use wasmtime::Engine;
use wasmtime::component::{ComponentExportIndex, Instance, InstancePre, Val};

/// Why a sandbox could not be made ahead of its call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    /// The sandbox itself (its env, its credentials) could not be made.
    #[error("{}", .0.message)]
    Sandbox(#[source] ToolError),
    /// The component would not instantiate in it.
    #[error("{0:#}")]
    Instantiate(wasmtime::Error),
}

/// What every tool of one component shares.
pub(crate) struct Shared {
    pub engine: Engine,
    pub pre: InstancePre<CallState>,
    pub grants: Grants,
    pub net: Arc<NetGrants>,
    pub egress: Egress,
    /// Whether calls measure what they use (off only in the benchmark that prices it).
    pub accounting: bool,
    /// Where calls' views are made, when calls are transactions over read-write roots.
    pub views: Option<Views>,
}

impl Shared {
    /// The sandbox of one call under `limits`, stopped at `deadline`, with everything its
    /// grants give it read now; it serves the call once [bound](Sandbox::bind).
    pub(crate) fn sandbox(
        &self,
        limits: &Limits,
        io: CallIo<'_>,
        deadline: Instant,
    ) -> Result<Sandbox, ToolError> {
        // A wasm tool takes no client's variables (its capabilities refuse `env_from_caller`,
        // and the dispatcher refuses a client's variables the policy does not allow).
        let mut env = self.grants.resolve_env(&BTreeMap::new())?;
        // Fresh placeholders each call: a wasm tool's sandbox lives for one call.
        let credentials = Credentials::new(self.grants.resolve_credentials()?);
        env.extend(credentials.sandbox_env());
        let gate = NetGate::new(
            self.net.clone(),
            self.egress.clone(),
            credentials,
            limits.response,
        );
        let Some(views) = &self.views else {
            return Sandbox::new(&self.engine, &self.grants, &env, limits, gate, io, deadline);
        };
        let mounted = views.mount()?;
        // Its read-write roots opened at their views.
        let mut grants = self.grants.clone();
        for g in &mut grants.fs {
            if let Some(at) = mounted.path_of(&g.host) {
                g.host = at;
            }
        }
        let mut sandbox = Sandbox::new(&self.engine, &grants, &env, limits, gate, io, deadline)?;
        // The preopens hold the overlays now: their descriptors may go.
        sandbox.view = Some(mounted.view);
        Ok(sandbox)
    }

    /// A function's sandbox made ahead of its call under `limits` (see [`crate::spare`]):
    /// the component instantiated in it, and the CPU that took.
    pub(crate) async fn prepare(
        &self,
        limits: &Limits,
    ) -> Result<(Sandbox, (Instance, Duration)), PrepareError> {
        let mut sandbox = self
            .sandbox(limits, CallIo::NONE, Instant::now() + limits.timeout)
            .map_err(PrepareError::Sandbox)?;
        let (instance, cpu) = on_cpu(self.pre.instantiate_async(&mut sandbox.store)).await;
        let instance = instance.map_err(PrepareError::Instantiate)?;
        Ok((sandbox, (instance, cpu)))
    }

    /// Instantiates the component in `sandbox`, unless `ahead` holds the instance made in it
    /// before the call and the CPU that took, and calls one export; what it used (the CPU of
    /// its polls, its memories' peak) goes to `usage`, whether it succeeds or not.
    pub(crate) async fn call(
        &self,
        sandbox: &mut Sandbox,
        ahead: Option<(Instance, Duration)>,
        index: &ComponentExportIndex,
        params: &[Val],
        results: &mut [Val],
        usage: &Meter,
    ) -> Result<(), wasmtime::Error> {
        let (ready, before) = ahead.unzip();
        let run = async {
            let instance = match ready {
                Some(instance) => instance,
                None => self.pre.instantiate_async(&mut sandbox.store).await?,
            };
            let func = instance
                .get_func(&mut sandbox.store, index)
                .ok_or_else(|| wasmtime::format_err!("the export vanished from the instance"))?;
            func.call_async(&mut sandbox.store, params, results).await
        };
        if !self.accounting {
            return run.await;
        }
        let (result, cpu) = on_cpu(run).await;
        let cpu = cpu + before.unwrap_or_default();
        let peak = sandbox.memory_peak();
        usage.record(|u| {
            u.cpu_ms = Some(warden_core::millis(cpu));
            u.peak_memory_bytes = Some(peak);
        });
        result
    }
}

/// Runs `fut`, adding up this thread's CPU time across its polls: the call's own work, not
/// whatever else the runtime runs between them.
async fn on_cpu<F: std::future::Future>(fut: F) -> (F::Output, Duration) {
    let mut fut = std::pin::pin!(fut);
    let mut spent = Duration::ZERO;
    let output = std::future::poll_fn(|cx| {
        let start = thread_cpu();
        let polled = fut.as_mut().poll(cx);
        spent += thread_cpu().saturating_sub(start);
        polled
    })
    .await;
    (output, spent)
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}
