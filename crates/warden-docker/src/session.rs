//! Session mode's Docker side: a session's shell runs alone (under an init) in a container
//! of its own, driven over attach by the shared session driver (`warden_command::session`),
//! which frames commands, keeps deadlines and resets. `exec` per command would be slower
//! (26–43 ms here) and would not keep `cd`: only a command that overlaps another gets one
//! (`crate::beside`).

use crate::beside::DockerSiblings;
use crate::container::Container;
use crate::engine::Engine;
use crate::files::CopiedIn;
use crate::gate::Sandboxed;
use crate::joined::Joining;
use crate::launch::{Recipe, Started};
use crate::plan::Plan;
use crate::pool::Pool;
use bollard::container::LogOutput;
use futures::StreamExt;
use std::borrow::Cow;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use warden_command::Cause;
use warden_command::cgroup::{Cgroup, Readings};
use warden_command::session::{Children, Chunk, Counters, Launched, Launcher, Processes, Sandbox};
use warden_core::Output;
use warden_core::{ErrorKind, Limits, ToolError};
use warden_net::{Proxy, Scope, Traffic};
use warden_tx::settle::Settling;
use warden_tx::{SessionView, Store};

/// How long a session's shell, whose read-write roots are seen through a view, may take to
/// show as its container's init's child.
const SHELL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where a container's pids cgroup shows inside it: cgroup v2, then v1.
const PIDS_CGROUPS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/pids"];

/// Starts a tool's session shells, each in a new container (a pooled one when ready).
pub(crate) struct DockerShells {
    /// Its shell is the template's (`/bin/sh`).
    pub recipe: Recipe,
    pub pool: Option<Pool>,
}

impl Launcher for DockerShells {
    type Sandbox = ShellContainer;
    const FRESH: &'static str = "a fresh shell in a new container";

    fn processes(&self) -> Option<Processes> {
        Some(Processes {
            // What the cgroup counts and holds (host pids, under gVisor more than processes).
            limit: u64::from(self.recipe.plan.pids_limit()),
            cgroups: PIDS_CGROUPS.map(str::to_owned).to_vec(),
        })
    }

    async fn launch(
        &self,
        env: &[(String, String)],
        limits: &Limits,
        image: Option<&str>,
    ) -> Result<Launched<ShellContainer>, ToolError> {
        let (engine, plan) = (&self.recipe.engine, &self.recipe.plan);
        let recipe = self.recipe.for_image(image);
        // The pool's containers run the policy's own image.
        let pool = self
            .pool
            .as_ref()
            .filter(|_| matches!(recipe, Cow::Borrowed(_)));
        let started = match pool.and_then(|p| p.take(env, limits.memory)) {
            Some(started) => started,
            None => recipe.start(env, limits.memory, "session").await?,
        };
        let Started {
            docker,
            container,
            attached,
            gate,
            sandboxed,
            pid,
            cgroup,
            view,
            guests,
            init: _,
        } = started;
        // In before the first command is sent.
        let copied_in = match &plan.copied {
            Some(copied) => match copied.copy_in(engine, &docker, &container.id).await {
                Ok(copied_in) => {
                    for note in &copied_in.notes {
                        tracing::info!(tool = %plan.tool, "{note}");
                    }
                    Some(copied_in)
                }
                Err(e) => {
                    container.remove().await;
                    return Err(e);
                }
            },
            None => None,
        };
        // Its shell as this machine sees it, where the shell's children are the command's
        // processes: runc's containers on this machine (gVisor's run inside its sandbox). The
        // container's first process is its init; the shell is that init's one child.
        let runc = !plan.gvisor && plan.runtime.as_deref().is_none_or(|r| r == "runc");
        let here = pid.filter(|_| runc).and_then(|pid| i32::try_from(pid).ok());
        let mut shell = here.and_then(Children::only_child);
        // A view is written through the shell's `/proc/PID/root`: its init may not have
        // started it yet.
        if let (Some(init), true) = (here, view.is_some()) {
            let by = tokio::time::Instant::now() + SHELL_WAIT;
            while shell.is_none() && tokio::time::Instant::now() < by {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                shell = Children::only_child(init);
            }
        }
        let output = attached.output.map(|frame| match frame {
            Ok(LogOutput::StdErr { message }) => Ok(Chunk::Stderr(message.to_vec())),
            Ok(frame) => Ok(Chunk::Stdout(frame.into_bytes().to_vec())),
            Err(e) => Err(io::Error::other(e)),
        });
        // The view is written through where the shell sees it (its `/proc/PID/root`), or,
        // under gVisor, through the engine's mount of each volume, which the sandbox's file
        // server serves; a command beside the shell would write into it unsettled, so with a
        // view, commands take turns.
        let merged = match (&view, shell, plan.gvisor) {
            (Some(_), None, true) => container.mounted_at(&guests).await,
            _ => None,
        };
        // Where the shell's view is reached through its `/proc/PID/root`, a shell beside it
        // may join its container with a view of its own.
        let joining = match (&view, here, shell, &self.recipe.views) {
            (Some(view), Some(init), Some(_), Some(store)) if gate.is_none() => {
                let roots = view.roots().iter().cloned().zip(guests.iter().cloned());
                let (mounted, tool, shell) = (plan.mount_points(), &plan.tool, &self.recipe.shell);
                Joining::offered(init, roots.collect(), mounted, store.clone(), tool, shell)
                    .await
                    .map(Arc::new)
            }
            _ => None,
        };
        let view = match (view, shell, merged) {
            (Some(view), Some(shell), _) => Some(SessionView::new(view, &plan.tool, shell, guests)),
            (Some(view), None, Some(merged)) => {
                Some(SessionView::mounted_at(view, &plan.tool, merged))
            }
            (Some(_), None, None) if plan.gvisor => {
                container.remove().await;
                return Err(ToolError::new(
                    ErrorKind::Unavailable,
                    "the engine did not say where it mounted the session's read-write roots, \
                     so they cannot be seen through a view: the engine is not on this machine, \
                     or too old to report its containers' mounts",
                ));
            }
            (Some(_), None, None) => {
                container.remove().await;
                return Err(ToolError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the session's shell did not show on this machine within {} s, so its \
                         read-write roots cannot be seen through a view: the engine is slow \
                         to answer, or its container's processes are not this machine's",
                        SHELL_WAIT.as_secs()
                    ),
                ));
            }
            (None, ..) => None,
        };
        // A command beside the shell would write into copies that are settled by command, or,
        // by `exec`, into the shell's view.
        let copies = self.recipe.copies.clone().filter(|_| copied_in.is_some());
        let beside = view.is_none() || joining.is_some();
        let siblings =
            (here.is_some() && gate.is_none() && beside && copies.is_none()).then(|| {
                DockerSiblings {
                    engine: engine.clone(),
                    docker: docker.clone(),
                    container: container.id.clone(),
                    shell: self.recipe.shell.clone(),
                    joining,
                }
            });
        Ok(Launched {
            sandbox: ShellContainer {
                engine: engine.clone(),
                docker,
                plan: plan.clone(),
                copied_in,
                copies,
                container,
                oom_seen: false,
                cgroup,
                readings: Readings::default(),
                shell,
                children: None,
                gate,
                siblings,
                _sandboxed: sandboxed,
            },
            input: attached.input,
            output: Box::pin(output),
            view,
        })
    }
}

/// The container of one session shell; removed when closed or dropped.
pub(crate) struct ShellContainer {
    engine: Arc<Engine>,
    docker: bollard::Docker,
    plan: Plan,
    /// What its copied roots held at its start or its last settled command, when they are
    /// copied.
    copied_in: Option<CopiedIn>,
    /// Where its commands' changes to its copies are committed, when they are transactions
    /// (else its copies are written back in place when it goes).
    copies: Option<Arc<Store>>,
    container: Container,
    /// The engine had already reported an OOM kill before the current command.
    oom_seen: bool,
    /// Its cgroup's counters, when they are on this machine.
    cgroup: Option<Cgroup>,
    readings: Readings,
    /// Its shell's pid on this machine, where a timeout can stop a command's processes alone.
    shell: Option<i32>,
    /// The shell's children as the running command began: what a stop leaves alone.
    children: Option<Children>,
    gate: Option<Proxy>,
    /// What starts shells beside its own, where it can: its processes on this machine (a
    /// command's stop), no gate (which serves one command at a time).
    siblings: Option<DockerSiblings>,
    /// Its credentials and the bundle it trusts, kept as long as it runs.
    _sandboxed: Option<Sandboxed>,
}

impl Sandbox for ShellContainer {
    type Siblings = DockerSiblings;

    fn siblings(&self) -> Option<DockerSiblings> {
        self.siblings.clone()
    }

    fn shell_pid(&self) -> Option<i32> {
        self.shell
    }

    async fn exit_status(&mut self) -> Result<(i64, Cause), ToolError> {
        let (code, oom) = self.container.exit_status(&self.engine).await?;
        Ok((code, Cause::of_memory(oom && !self.oom_seen)))
    }

    async fn memory_killed(&mut self) -> bool {
        let killed = self.container.oom_killed().await;
        let new = killed && !self.oom_seen;
        self.oom_seen |= killed;
        new
    }

    async fn processes(&mut self) -> Option<u64> {
        self.container.processes().await
    }

    fn counters(&mut self) -> Counters {
        match &self.cgroup {
            Some(cgroup) => self.readings.read(cgroup),
            None => Counters::default(),
        }
    }

    fn command_starts(&mut self, scope: Scope) {
        if let Some(gate) = &self.gate {
            gate.begin(scope);
        }
        self.children = self.shell.and_then(Children::of);
    }

    fn stop_command(&mut self) -> bool {
        match (self.shell, &self.children) {
            (Some(shell), Some(children)) => children.kill_new(shell),
            _ => false,
        }
    }

    fn command_ended(&mut self) -> Option<Traffic> {
        self.gate.as_ref().map(Proxy::end)
    }

    /// Its copies are current when every read-write root holds what they were last settled
    /// against (read off the runtime's threads: a walk of each root).
    async fn current(&mut self) -> bool {
        let (Some(_), Some(copied), Some(copied_in)) =
            (&self.copies, &self.plan.copied, &self.copied_in)
        else {
            return true;
        };
        let (copied, copied_in) = (copied.clone(), copied_in.clone());
        tokio::task::spawn_blocking(move || copied_in.current(&copied))
            .await
            .unwrap_or(false)
    }

    /// Reads its read-write copies back, stages what they changed since the last settled
    /// command in a view of the roots, and commits it as call `call`: the copies' new state
    /// is then what the next command's changes are read against. A command warden ended, or
    /// changes that could not be applied, leave the copies holding what the roots do not:
    /// the session starts afresh.
    async fn settle(
        &mut self,
        call: &str,
        limit: u64,
        answered: Result<Output, ToolError>,
    ) -> (Result<Output, ToolError>, bool) {
        let (Some(store), Some(copied), Some(copied_in)) =
            (&self.copies, &self.plan.copied, &mut self.copied_in)
        else {
            return (answered, true);
        };
        let whose = Settling {
            call,
            tool: &self.plan.tool,
            limit,
        };
        let roots: Vec<PathBuf> = copied
            .roots
            .iter()
            .filter(|r| r.write_back)
            .map(|r| r.host.clone())
            .collect();
        // A command warden ended has nothing of it read back.
        let staged = match warden_core::changes::ended_on_its_own(&answered) {
            true => Some(
                async {
                    let view = store.view(&roots).map_err(|e| {
                        ToolError::internal(format!("a view of the copied roots: {e}"))
                    })?;
                    let copies = copied_in
                        .read_back(copied, &self.engine, &self.docker, &self.container.id)
                        .await?;
                    crate::files::staged(copies, view).await
                }
                .await,
            ),
            false => None,
        };
        let (view, rebase) = match staged {
            Some(Ok((view, staged))) => {
                for note in &staged.notes {
                    tracing::info!(tool = %self.plan.tool, "{note}");
                }
                (Some(Ok(view)), Some(staged))
            }
            Some(Err(e)) => (Some(Err(e)), None),
            None => (None, None),
        };
        let (answered, committed) = warden_tx::settle::settle_staged(view, whose, answered);
        if let (true, Some(staged)) = (committed, rebase) {
            copied_in.rebase(copied, staged);
        }
        (answered, committed)
    }

    /// Writes its read-write roots back first (see [`Sandbox::close_noting`]); the session's
    /// end has no call to answer, so what that came to goes to the log only.
    async fn close(self) {
        self.close_noting().await;
    }

    /// Writes its read-write roots back first, while it still runs, and answers how that
    /// went. In a task of its own: a call stopped at its deadline meanwhile (a timeout's
    /// reset runs at the end of the call's time) does not stop it, and the log has its result.
    async fn close_noting(self) -> Vec<String> {
        let tool = self.plan.tool.clone();
        match tokio::spawn(self.write_back_and_remove()).await {
            Ok(notes) => notes,
            Err(e) => {
                tracing::error!(tool = %tool, "closing a session's container failed: {e}");
                Vec::new()
            }
        }
    }
}

impl ShellContainer {
    /// Its read-write roots written back (logged too: a refused or failed write-back as an
    /// error, naming the paths and where the container's copy was kept), then removed.
    /// With its commands settled as they end, nothing is written back: what its copies hold
    /// since the last settled command goes with it.
    async fn write_back_and_remove(self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.copies.is_some() {
            notes.push(
                "what the session wrote to its read-write roots since its last answer, if \
                 anything, was not kept"
                    .to_owned(),
            );
        } else if let (Some(copied), Some(copied_in)) = (&self.plan.copied, &self.copied_in) {
            let written = copied_in
                .write_back(
                    copied,
                    &self.engine,
                    &self.docker,
                    &self.container.id,
                    &self.plan.tool,
                )
                .await;
            match written {
                Ok(written) => {
                    for note in &written {
                        tracing::info!(tool = %self.plan.tool, "{note}");
                    }
                    notes = written;
                }
                Err(e) => {
                    let note = format!(
                        "the session's read-write roots were not written back: {}",
                        e.message
                    );
                    tracing::error!(tool = %self.plan.tool, "{note}");
                    notes.push(note);
                }
            }
        }
        self.container.remove().await;
        notes
    }
}
