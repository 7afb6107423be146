//! One container's life: created, attached before it starts (so no output is missed), read
//! under a deadline, and always removed — by the call, or by its guard when the call's future
//! is dropped.

use crate::address::Place;
use crate::cgroup::Cgroup;
use crate::engine::{Engine, missing_image};
use crate::files::{Copied, CopiedIn};
use crate::launch::Started;
use crate::removal::remove;
use bollard::Docker;
use bollard::container::{AttachContainerResults, LogOutput};
use bollard::errors::Error as BollardError;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, StatsOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warden_command::session::{Frames, nonce};
use warden_core::{ToolError, Usage};
use warden_net::{Proxy, Scope, Traffic};

/// How often, and how far apart, a SIGKILLed container's OOM flag is asked for again: the
/// engine's OOM event trails the exit by a few milliseconds under load.
const OOM_FLAG_TRIES: u32 = 10;
const OOM_FLAG_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// A container that is removed (killed first if running) when this is dropped.
pub(crate) struct Container {
    docker: Docker,
    pub id: String,
    removed: bool,
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
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        match docker.create_container(Some(options), body).await {
            Ok(created) => {
                container.id = created.id;
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

    /// Whether a container that died of SIGKILL was killed by its memory limit. The engine
    /// learns of the exit and of the OOM kill from two events (on cgroup v1, the kill from an
    /// eventfd of its own), which can arrive in either order: the flag is asked again for a
    /// short while before the answer is "no".
    pub(crate) async fn oom_killed_after_exit(&self) -> bool {
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

    /// Its cgroup's counters on this machine, while it runs; `None` when they are not here
    /// (always, for an engine elsewhere: its pids are not this machine's).
    pub(crate) async fn cgroup(&self, engine: &Engine) -> Option<Cgroup> {
        if engine.place() == Place::Remote {
            return None;
        }
        let pid = self.pid(engine).await.ok()?;
        let cgroup = Cgroup::of(pid, &self.id);
        if cgroup.is_none() {
            tracing::debug!(container = %self.id, "no cgroup counters on this machine");
        }
        cgroup
    }

    /// True when the engine saw the memory limit kill a process of this container.
    pub(crate) async fn oom_killed(&self) -> bool {
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
    /// its own, so it completes even if the caller is dropped meanwhile.
    pub(crate) async fn remove(mut self) {
        self.removed = true;
        let (docker, id) = (self.docker.clone(), self.id.clone());
        if let Err(e) = tokio::spawn(async move { remove(&docker, &id).await }).await {
            tracing::warn!(container = %self.id, "removing a container failed: {e}");
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (docker, id) = (self.docker.clone(), std::mem::take(&mut self.id));
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move { remove(&docker, &id).await });
            }
            // No runtime to spawn on (it is shutting down): remove it from a thread of its own.
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("warden-docker-remove".into())
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build();
                        if let Ok(rt) = rt {
                            rt.block_on(remove(&docker, &id));
                        }
                    })
                    .map(std::thread::JoinHandle::join);
            }
        }
    }
}

/// How a per-call container's command ended.
pub(crate) enum Ended {
    Exited {
        code: i64,
        oom: bool,
        stdout: String,
        stderr: String,
    },
    /// The deadline passed; the container was removed.
    TimedOut { stdout: String, stderr: String },
}

/// The shell of a per-call container, reading its command on stdin.
pub(crate) const SHELL: &str = "/bin/sh";

/// What a per-call container's shell is sent: one `{ …; }` list, which the shell reads whole
/// before it runs any of it. It prints the start line on both streams, runs `argv` with stdin
/// on `/dev/null`, prints the end line on both streams (stdout's with the command's status),
/// and waits for its stdin to close before it exits: warden has the answer at the end line,
/// while the container, and its cgroup's counters, still stand. The lines' nonces travel on
/// stdin, never in argv, so the command cannot read them and end its output early; each
/// argument is one single-quoted word (a template refuses NUL, the one byte a word cannot
/// carry). The start line tells warden that the shell took the command: a pooled container
/// that died while it waited never prints it.
pub(crate) fn script(argv: &[String], start: &str, end: &str) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    format!(
        "{{ printf '\\n%s\\n' '{start}' >&2; printf '\\n%s\\n' '{start}'; set -- {}; \
         \"$@\" </dev/null; r=$?; printf '\\n%s\\n' '{end}' >&2; printf '\\n%s %s\\n' '{end}' \"$r\"; \
         IFS= read -r w; exit \"$r\"; }}\n",
        words.join(" ")
    )
}

/// The status on stdout's end line (` 0`), if that is what follows its marker.
fn status(rest: &[u8]) -> Option<i64> {
    let digits = rest.strip_prefix(b" ")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// What a per-call container's roots came to: the notes for its answer (what was left out,
/// what was written back), or why its read-write roots were not written back.
pub(crate) type FilesOutcome = Result<Vec<String>, ToolError>;

/// One command for a started per-call container: its argv, output cap and deadline, the scope
/// its gate (if any) refuses into, and its copied roots (with the tool's name), if any.
pub(crate) struct OneCall<'a> {
    pub argv: &'a [String],
    pub output_limit: u64,
    pub deadline: Instant,
    pub scope: Scope,
    pub copied: Option<(&'a Copied, &'a str)>,
}

/// What a per-call container came to: how its command ended, what went through its gate,
/// what its cgroup counted, and what became of its copied roots.
pub(crate) struct Ran {
    pub ended: Ended,
    pub traffic: Option<Traffic>,
    pub used: Usage,
    pub files: FilesOutcome,
}

/// Runs one command in `started`, a per-call container, to its end or its deadline; the
/// caller removes the container after. With `copied` roots, the command starts once they are
/// in, and its read-write roots are written back when it ends (not at the deadline). Answers
/// what went through the gate too, and the CPU and memory figures the container's cgroup had
/// at the command's end (or at the deadline); `None` when the container's shell ended before
/// it took the command (it died while it waited).
pub(crate) async fn run_once(
    engine: &Engine,
    started: &mut Started,
    call: OneCall<'_>,
) -> Result<Option<Ran>, ToolError> {
    let OneCall {
        argv,
        output_limit,
        deadline,
        scope,
        copied,
    } = call;
    let copied_in = match copied {
        Some((copied, _)) => Some(
            copied
                .copy_in(engine, &started.docker, &started.container.id)
                .await?,
        ),
        None => None,
    };
    if let Some(gate) = &started.gate {
        gate.begin(scope);
    }
    let (start, end) = (nonce(), nonce());
    // The command starts here. A failed write shows as output ending without the start line.
    let _ = started
        .attached
        .input
        .write_all(script(argv, &start, &end).as_bytes())
        .await;
    let run = Run {
        container: &started.container,
        cgroup: started.cgroup.as_ref(),
        engine,
        docker: &started.docker,
        output_limit,
        deadline,
        copied: copied
            .zip(copied_in.as_ref())
            .map(|((c, tool), i)| (c, i, tool)),
    };
    let read = run.read_to_end(&mut started.attached, &start, &end).await;
    let traffic = started.gate.as_ref().map(Proxy::end);
    let Some((ended, used, files)) = read else {
        return Ok(None);
    };
    let mut notes = copied_in.map(|c| c.notes).unwrap_or_default();
    let files = match files {
        Some(Ok(written)) => {
            notes.extend(written);
            Ok(notes)
        }
        Some(Err(e)) => Err(e),
        None => Ok(notes),
    };
    Ok(Some(Ran {
        ended: ended?,
        traffic,
        used,
        files,
    }))
}

/// One per-call container while it runs.
struct Run<'a> {
    container: &'a Container,
    /// Its cgroup's counters, when they are on this machine.
    cgroup: Option<&'a Cgroup>,
    engine: &'a Engine,
    docker: &'a Docker,
    /// Its copied roots, what was copied in, and the tool's name.
    copied: Option<(&'a Copied, &'a CopiedIn, &'a str)>,
    output_limit: u64,
    deadline: Instant,
}

impl Run<'_> {
    /// Reads its output, from the start lines `start` until the end lines `end` or the
    /// deadline. At the end lines, or at the deadline, the container's counters are read
    /// first: they go with its cgroup. At the end lines its read-write roots are written back,
    /// while it still runs (their copies go with it), and the command's status is on stdout's:
    /// the answer needs nothing more of the container. `None` when the output ended before the
    /// start line: the shell never took the command.
    async fn read_to_end(
        &self,
        attached: &mut AttachContainerResults,
        start: &str,
        end: &str,
    ) -> Option<(Result<Ended, ToolError>, Usage, Option<FilesOutcome>)> {
        let (start, end) = (format!("\n{start}"), format!("\n{end}"));
        let is_status = |rest: &[u8]| status(rest).is_some();
        let mut stdout = Frames::new(&start, &end, is_status, self.output_limit);
        let mut stderr = Frames::between(&start, &end, self.output_limit);
        loop {
            match tokio::time::timeout_at(self.deadline, attached.output.next()).await {
                Err(_) => {
                    // No write-back: the call's time is up, and stopping the call midway
                    // would leave it to chance. The answer says so.
                    let ended = Ended::TimedOut {
                        stdout: stdout.text(),
                        stderr: stderr.text(),
                    };
                    return Some((Ok(ended), self.used(), None));
                }
                Ok(None) if !stdout.started() => return None,
                Ok(None) => break,
                Ok(Some(Ok(LogOutput::StdErr { message }))) => stderr.push(&message),
                Ok(Some(Ok(frame))) => stdout.push(&frame.into_bytes()),
                Ok(Some(Err(e))) => {
                    tracing::warn!(container = %self.container.id, "reading output failed: {e}");
                    break;
                }
            }
            if let (true, Some(code)) = (stderr.done(), stdout.rest().and_then(status)) {
                let used = self.used();
                let written = self.write_back().await;
                // The shell exits once its stdin closes; the container is removed after.
                let _ = attached.input.shutdown().await;
                let oom = code == 137 && self.container.oom_killed_after_exit().await;
                let ended = Ended::Exited {
                    code,
                    oom,
                    stdout: stdout.text(),
                    stderr: stderr.text(),
                };
                return Some((Ok(ended), used, written));
            }
        }
        // Without its end lines the container ended first (its shell was killed: the memory
        // limit, say): its status is the container's, nothing was measured, and its
        // read-write copies are gone (which the write-back finds, and says).
        let status =
            tokio::time::timeout_at(self.deadline, self.container.exit_status(self.engine)).await;
        let ended = match status {
            Ok(Ok((code, oom))) => Ok(Ended::Exited {
                code,
                oom,
                stdout: stdout.text(),
                stderr: stderr.text(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(Ended::TimedOut {
                stdout: stdout.text(),
                stderr: stderr.text(),
            }),
        };
        Some((ended, Usage::default(), self.write_back().await))
    }

    /// Writes its read-write roots back; `None` without copied roots.
    async fn write_back(&self) -> Option<FilesOutcome> {
        let (copied, copied_in, tool) = self.copied?;
        Some(
            copied_in
                .write_back(copied, self.engine, self.docker, &self.container.id, tool)
                .await,
        )
    }

    /// The container's CPU and memory peak so far.
    fn used(&self) -> Usage {
        let Some(cgroup) = self.cgroup else {
            return Usage::default();
        };
        Usage {
            cpu_ms: cgroup.cpu_ms(),
            peak_memory_bytes: cgroup.peak(),
            ..Usage::default()
        }
    }
}
