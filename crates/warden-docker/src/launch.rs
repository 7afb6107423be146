//! Starting a tool's container: every container warden starts runs a shell that reads what to
//! run on its stdin, so a per-call container, a pooled one and a session's are started alike
//! and can be started before their call. What each is sent then differs: one command and the
//! end of its input ([`crate::per_call::run_once`]), or a session's commands.

use crate::container::Container;
use crate::engine::Engine;
use crate::gate::Sandboxed;
use crate::init::Init;
use crate::plan::Plan;
use bollard::Docker;
use bollard::container::AttachContainerResults;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use warden_command::cgroup::Cgroup;
use warden_core::{ErrorKind, Grants, ToolError};
use warden_net::{Credentials, Gate, Proxy};
use warden_tx::{Store, View};

/// How long finding a container's counters may take (one inspect): an engine slower than
/// that costs its calls their CPU and memory figures, not their answers.
const COUNTERS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How a tool's containers are started.
#[derive(Clone)]
pub(crate) struct Recipe {
    pub engine: Arc<Engine>,
    pub plan: Plan,
    /// The shell the container runs, reading commands on its stdin: the session's (the
    /// template's), or `/bin/sh` for a container per call.
    pub shell: String,
    /// The grants, for each container's own credentials.
    pub grants: Grants,
    /// The net grants' gate, when the policy grants hosts.
    pub gate: Option<Gate>,
    /// Where each container [`Recipe::start`]s gets a view of its read-write roots, when
    /// its calls (or a session's commands) are transactions (see `crate::view`).
    pub views: Option<Arc<Store>>,
    /// Where a program of `warden exec` gets its view: as `views`, but for a session's tool
    /// too (a program's container is its own, never the session's).
    pub programs: Option<Arc<Store>>,
    /// Where a session's commands over roots copied in (an engine elsewhere) are settled,
    /// each a transaction read back from the copies (`ShellContainer::settle`).
    pub copies: Option<Arc<Store>>,
}

/// A container started and waiting for its commands: its shell reads its stdin, its gate
/// (when it has one) is bound and lets nothing through until a command starts.
pub(crate) struct Started {
    pub docker: Docker,
    pub container: Container,
    pub attached: AttachContainerResults,
    pub gate: Option<Proxy>,
    /// Its credentials and the bundle it trusts, kept as long as it runs.
    pub sandboxed: Option<Sandboxed>,
    /// Its first process's pid on this machine, when the engine is here.
    pub pid: Option<i64>,
    /// Its cgroup's counters, when they are on this machine.
    pub cgroup: Option<Cgroup>,
    /// Its view of the read-write roots, when its call is a transaction; with it, its init,
    /// when the engine is here and runs the container's processes as this machine's.
    pub view: Option<View>,
    /// Where the container sees each root of `view`, in its order.
    pub guests: Vec<PathBuf>,
    pub init: Option<Init>,
}

impl Recipe {
    /// This recipe, or one whose containers run `image` instead of the plan's (a session's
    /// client chose it, within the policy's `images`).
    pub(crate) fn for_image(&self, image: Option<&str>) -> Cow<'_, Recipe> {
        match image {
            Some(image) if image != self.plan.image => {
                let mut other = self.clone();
                other.plan.image = image.to_owned();
                Cow::Owned(other)
            }
            _ => Cow::Borrowed(self),
        }
    }

    /// Starts a container running the shell with `env` (the tool's granted env), `memory`
    /// bytes at most, and the label `warden.mode=mode`; with a view of its read-write roots
    /// when the recipe's calls are transactions.
    pub(crate) async fn start(
        &self,
        env: &[(String, String)],
        memory: u64,
        mode: &str,
    ) -> Result<Started, ToolError> {
        let cmd = vec![self.shell.clone()];
        self.launch(cmd, env, memory, mode, false, self.views.as_ref())
            .await
    }

    /// Starts a container running `cmd`, at a terminal when `tty`, its read-write roots seen
    /// through a view kept in `views` when given, else mounted as they are.
    pub(crate) async fn launch(
        &self,
        cmd: Vec<String>,
        env: &[(String, String)],
        memory: u64,
        mode: &str,
        tty: bool,
        views: Option<&Arc<Store>>,
    ) -> Result<Started, ToolError> {
        let engine = &self.engine;
        let docker = engine.client().await?;
        engine.ensure_image(&docker, &self.plan.image).await?;
        // Its own credentials: placeholders drawn for it alone, and its CA.
        let sandboxed = match &self.gate {
            Some(_) => Some(Sandboxed::new(&self.grants)?),
            None => None,
        };
        let env = env
            .iter()
            .cloned()
            .chain(sandboxed.iter().flat_map(Sandboxed::env))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut body =
            self.plan
                .container(cmd, env, memory, engine.labels(&self.plan.tool, mode), true);
        body.tty = Some(tty);
        let mounts = body.host_config.as_mut().and_then(|h| h.mounts.as_mut());
        let (view, guests) = match (views, &self.plan.copied, mounts) {
            (Some(store), Some(copied), _) => crate::view::of_copies(store, copied),
            (Some(store), None, Some(mounts)) => crate::view::viewed(store, mounts),
            _ => Ok(None),
        }
        .map_err(|e| ToolError::internal(format!("a view of the call's read-write roots: {e}")))?
        .unzip();
        if let Some(s) = &sandboxed {
            s.mount_into(&mut body);
        }
        let mut container = Container::create(engine, &docker, &self.plan.image, body).await?;
        let attached = container.attach_and_start(engine, true).await?;
        let gate = match self.gate.clone().zip(sandboxed.as_ref()) {
            Some((gate, s)) => {
                match open_gate(engine, &container, gate, s.credentials.clone()).await {
                    Ok(proxy) => Some(proxy),
                    Err(e) => {
                        container.remove().await;
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        let pid = tokio::time::timeout(COUNTERS_WAIT, container.local_pid(engine))
            .await
            .ok()
            .flatten();
        let cgroup = pid.and_then(|pid| container.cgroup(pid));
        // Before its first command: every kill of its memory limit is seen.
        if let Some(cgroup) = &cgroup {
            container.watch_oom(cgroup);
        }
        Ok(Started {
            docker,
            container,
            attached,
            gate,
            sandboxed,
            init: pid
                .filter(|_| view.is_some() && !self.plan.gvisor)
                .and_then(Init::of),
            pid,
            cgroup,
            view,
            guests: guests.unwrap_or_default(),
        })
    }
}

/// The gate of a started container (nothing gets through before [`Proxy::begin`]).
async fn open_gate(
    engine: &Engine,
    container: &Container,
    gate: Gate,
    credentials: Credentials,
) -> Result<Proxy, ToolError> {
    let listener = crate::gate::listen_in(engine, container.pid(engine).await?).await?;
    Proxy::start(listener, gate, credentials)
        .map_err(|e| ToolError::new(ErrorKind::Internal, format!("serving the gate: {e}")))
}
