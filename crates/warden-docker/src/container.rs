//! One container's life: created, attached before it starts (so no output is missed), read
//! under a deadline, and always removed — by the call, or by its guard when the call's future
//! is dropped.

use crate::address::Place;
use crate::engine::{Engine, missing_image};
use crate::oom::{OomWatch, Verdict};
use crate::removal::{finish_apart, remove};
use bollard::Docker;
use bollard::container::AttachContainerResults;
use bollard::errors::Error as BollardError;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
    StatsOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::StreamExt;
use std::path::{Path, PathBuf};
use warden_command::cgroup::Cgroup;
use warden_command::session::nonce;
use warden_core::ToolError;

/// How often, and how far apart, a SIGKILLed container's OOM flag is asked for again: the
/// engine's OOM event trails the exit by a few milliseconds, and under gVisor on a loaded
/// machine (two test runs and a release build on two cores) by more than 200 ms. Only a
/// command killed by SIGKILL without the memory limit waits the whole second.
const OOM_FLAG_TRIES: u32 = 50;
const OOM_FLAG_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// How long a removal waits for a container whose creation was asked for, and never answered,
/// to appear: the engine makes a container in well under a second, even on a loaded machine.
const CREATE_SETTLES: std::time::Duration = std::time::Duration::from_secs(5);

/// A container that is removed (killed first if running) when this is dropped.
pub(crate) struct Container {
    docker: Docker,
    pub id: String,
    removed: bool,
    /// The engine answered its creation: until then `id` is the name it was asked for, which
    /// the engine may still be making when the call is dropped.
    created: bool,
    /// The kernel's word on its memory limit's kills, where warden could ask for it.
    oom: Option<OomWatch>,
}

impl Container {
    /// Creates a container; a missing image is named with the command that builds it.
    pub(crate) async fn create(
        engine: &Engine,
        docker: &Docker,
        image: &str,
        body: ContainerCreateBody,
    ) -> Result<Container, ToolError> {
        // Named before it exists, so that a call dropped while the engine creates it still
        // knows what to remove.
        let name = format!("warden-{}", &nonce()[..16]);
        engine.hold_lease(docker, image).await?;
        let mut container = Container {
            docker: docker.clone(),
            id: name.clone(),
            removed: false,
            created: false,
            oom: None,
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        match docker.create_container(Some(options), body).await {
            Ok(created) => {
                container.id = created.id;
                container.created = true;
                Ok(container)
            }
            Err(e) => {
                container.removed = true;
                Err(match e {
                    BollardError::DockerResponseServerError {
                        status_code: 404, ..
                    } => {
                        engine.forget_image(image);
                        missing_image(image)
                    }
                    e => engine.failure("create a container", &e),
                })
            }
        }
    }

    /// Attaches to its streams (stdin too when `stdin`), then starts it.
    pub(crate) async fn attach_and_start(
        &self,
        engine: &Engine,
        stdin: bool,
    ) -> Result<AttachContainerResults, ToolError> {
        let options = AttachContainerOptionsBuilder::new()
            .stream(true)
            .stdin(stdin)
            .stdout(true)
            .stderr(true)
            .logs(false)
            .build();
        let attached = self
            .docker
            .attach_container(&self.id, Some(options))
            .await
            .map_err(|e| engine.failure("attach to a container", &e))?;
        self.docker
            .start_container(&self.id, None)
            .await
            .map_err(|e| engine.failure("start a container", &e))?;
        Ok(attached)
    }

    /// The exit code once it has stopped, and whether the memory limit killed something.
    pub(crate) async fn exit_status(&self, engine: &Engine) -> Result<(i64, bool), ToolError> {
        let options = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let code = match self
            .docker
            .wait_container(&self.id, Some(options))
            .next()
            .await
        {
            Some(Ok(r)) => r.status_code,
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => return Err(engine.failure("wait for a container", &e)),
            None => -1,
        };
        let oom = code == 137 && self.oom_killed_after_exit().await;
        Ok((code, oom))
    }

    /// Kills every process in it and waits until it has stopped (it stays, to be removed):
    /// true when it has, so nothing of it runs or writes any more.
    pub(crate) async fn stop_all(&self) -> bool {
        let options = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
        match self.docker.kill_container(&self.id, Some(options)).await {
            // 409: it is not running (its shell ended first).
            Ok(())
            | Err(BollardError::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => {
                tracing::warn!(container = %self.id, "cannot kill a container: {e}");
                return false;
            }
        }
        let options = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        match self
            .docker
            .wait_container(&self.id, Some(options))
            .next()
            .await
        {
            Some(Ok(_) | Err(BollardError::DockerContainerWaitError { .. })) => true,
            Some(Err(e)) => {
                tracing::warn!(container = %self.id, "cannot wait for a container: {e}");
                false
            }
            None => false,
        }
    }

    /// Watches its memory limit's kills from now on, through its `cgroup` ([`OomWatch`]).
    pub(crate) fn watch_oom(&mut self, cgroup: &Cgroup) {
        self.oom = OomWatch::on(cgroup);
    }

    /// What the kernel said of its memory limit's kills, where warden watches them.
    fn kernel_says(&self) -> Option<bool> {
        match self.oom.as_ref()?.killed() {
            Verdict::Killed => Some(true),
            Verdict::NotKilled => Some(false),
            Verdict::Unsure => None,
        }
    }

    /// Whether a container that died of SIGKILL was killed by its memory limit: the kernel's
    /// word where warden watches it ([`Container::watch_oom`]), else the engine's. The engine
    /// learns of the exit and of the OOM kill from two events (on cgroup v1, the kill from an
    /// eventfd of its own), which can arrive in either order: its flag is asked again for a
    /// short while before the answer is "no".
    pub(crate) async fn oom_killed_after_exit(&self) -> bool {
        if let Some(said) = self.kernel_says() {
            return said;
        }
        for _ in 0..OOM_FLAG_TRIES {
            if self.oom_killed().await {
                return true;
            }
            tokio::time::sleep(OOM_FLAG_WAIT).await;
        }
        self.oom_killed().await
    }

    /// The pid of its first process, as this machine sees it, while it runs.
    pub(crate) async fn pid(&self, engine: &Engine) -> Result<i64, ToolError> {
        let inspected = self
            .docker
            .inspect_container(&self.id, None)
            .await
            .map_err(|e| engine.failure("inspect a container", &e))?;
        inspected
            .state
            .and_then(|s| s.pid)
            .filter(|pid| *pid > 0)
            .ok_or_else(|| {
                ToolError::new(
                    warden_core::ErrorKind::Unavailable,
                    "the container stopped before warden could open its gate",
                )
            })
    }

    /// The pid of its first process on this machine, while it runs; `None` for an engine
    /// elsewhere, whose pids are not this machine's.
    pub(crate) async fn local_pid(&self, engine: &Engine) -> Option<i64> {
        match engine.place() {
            Place::Local => self.pid(engine).await.ok(),
            Place::Remote => None,
        }
    }

    /// Where this machine holds the mounts it sees at `guests` (a volume's own folder), in
    /// their order, as the engine reports them; `None` when one is not reported.
    pub(crate) async fn mounted_at(&self, guests: &[PathBuf]) -> Option<Vec<PathBuf>> {
        let inspected = self.docker.inspect_container(&self.id, None).await.ok()?;
        let mounts = inspected.mounts.unwrap_or_default();
        guests
            .iter()
            .map(|guest| {
                mounts
                    .iter()
                    .find(|m| m.destination.as_deref().map(Path::new) == Some(guest.as_path()))
                    .and_then(|m| m.source.as_deref())
                    .filter(|source| !source.is_empty())
                    .map(PathBuf::from)
            })
            .collect()
    }

    /// Its cgroup's counters on this machine, found through its first process `pid`.
    pub(crate) fn cgroup(&self, pid: i64) -> Option<Cgroup> {
        let cgroup = Cgroup::of(pid, &self.id);
        if cgroup.is_none() {
            tracing::debug!(container = %self.id, "no cgroup counters on this machine");
        }
        cgroup
    }

    /// True when the memory limit killed a process of this container: the kernel's word where
    /// warden watches it, else the engine's.
    pub(crate) async fn oom_killed(&self) -> bool {
        if let Some(said) = self.kernel_says() {
            return said;
        }
        match self.docker.inspect_container(&self.id, None).await {
            Ok(c) => c.state.and_then(|s| s.oom_killed).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// How many processes it holds, as the engine counts them (its pids cgroup).
    pub(crate) async fn processes(&self) -> Option<u64> {
        let options = StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(true)
            .build();
        match self.docker.stats(&self.id, Some(options)).next().await {
            Some(Ok(stats)) => stats.pids_stats.and_then(|p| p.current),
            _ => None,
        }
    }

    /// Its id, its removal left to the caller: the guard is disarmed.
    pub(crate) fn disarm(mut self) -> String {
        self.removed = true;
        std::mem::take(&mut self.id)
    }

    /// Kills and removes it, and waits until the engine has. The removal runs in a task of
    /// its own, so it completes even if the caller is dropped meanwhile; the task owns the
    /// guard, so a task that never runs (its runtime ending) still removes it.
    pub(crate) async fn remove(self) {
        let id = self.id.clone();
        let removal = tokio::spawn(async move {
            remove(&self.docker, &self.id).await;
            self.disarm();
        });
        if let Err(e) = removal.await {
            tracing::warn!(container = %id, "removing a container failed: {e}");
        }
    }
}

impl Drop for Container {
    /// Its removal is owed: paid by a task on the caller's runtime, or, when there is none or
    /// the task is dropped unrun (a runtime that is ending drops what is spawned on it, even
    /// after the spawn returned), by the debt's own guard from a thread of its own.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let owed = Owed {
            docker: self.docker.clone(),
            id: std::mem::take(&mut self.id),
            created: self.created,
            paid: false,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(owed.pay())),
            Err(_) => drop(owed),
        }
    }
}

/// A removal owed for a container whose guard was dropped.
struct Owed {
    docker: Docker,
    id: String,
    created: bool,
    paid: bool,
}

impl Owed {
    async fn pay(mut self) {
        settle(&self.docker, &self.id, self.created).await;
        self.paid = true;
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        if self.paid {
            return;
        }
        let (docker, id, created) = (
            self.docker.clone(),
            std::mem::take(&mut self.id),
            self.created,
        );
        finish_apart("warden-docker-remove", async move {
            settle(&docker, &id, created).await;
        });
    }
}

/// Removes the container `id`. One whose creation the engine never answered may not exist
/// yet when the removal asks: the engine goes on making it after the call that asked went
/// away. Such a one is asked for again until the engine says the name is free, for at most
/// [`CREATE_SETTLES`].
async fn settle(docker: &Docker, id: &str, created: bool) {
    if remove(docker, id).await || created {
        return;
    }
    let until = tokio::time::Instant::now() + CREATE_SETTLES;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if remove(docker, id).await {
            return;
        }
    }
}
