//! Shells beside a session's, for commands that overlap (`warden_command::session`'s
//! contract): each an `exec` of the session's shell in its container, which runs it as the
//! container's user, in its cgroup, under its seccomp profile, capabilities and limits; or,
//! where the session sees its read-write roots through a view, a shell that joins the
//! container from this machine with a view of its own (`crate::joined`). Offered where the
//! shell's process shows in this machine's `/proc` (runc, an engine here), so that a command
//! past its deadline can be stopped with everything it started.

use crate::engine::Engine;
use crate::joined::{Joined, Joining};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures::StreamExt;
use std::io;
use std::sync::Arc;
use warden_command::session::{Chunk, Launched, Sibling, Siblings};
use warden_core::{ErrorKind, Invocation, Output, ToolError};

/// How often the engine is asked for an exec's pid once started, and for its exit code once
/// its output closed: it has them a little later, mostly within a millisecond or two, so the
/// waits between the asks start at 1 ms and double up to [`EXIT_WAIT`] (about half a second
/// in all).
const EXIT_TRIES: u32 = 54;
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// The wait before ask `n` (from 0) of an exec's pid or exit code.
fn wait(n: u32) -> std::time::Duration {
    std::time::Duration::from_millis(1 << n.min(4)).min(EXIT_WAIT)
}

/// Starts shells in one session's container.
#[derive(Clone)]
pub(crate) struct DockerSiblings {
    pub engine: Arc<Engine>,
    pub docker: Docker,
    /// The session's container.
    pub container: String,
    /// The session's shell (`/bin/sh`).
    pub shell: String,
    /// Where the session sees its read-write roots through a view: how each shell beside
    /// its own joins its container, with a view of its own.
    pub joining: Option<Arc<Joining>>,
}

impl Siblings for DockerSiblings {
    type Sibling = DockerSibling;

    fn relayed(&self) -> bool {
        self.joining.is_none()
    }

    fn viewed(&self) -> bool {
        self.joining.is_some()
    }

    async fn start(&self) -> Result<Launched<DockerSibling>, ToolError> {
        if let Some(joining) = &self.joining {
            let launched = joining.start().await?;
            return Ok(Launched {
                sandbox: DockerSibling::Joined(Box::new(launched.sandbox)),
                input: launched.input,
                output: launched.output,
                view: None,
            });
        }
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec![self.shell.clone()]),
            ..ExecConfig::default()
        };
        let failed = |what: &str, e: &bollard::errors::Error| self.engine.failure(what, e);
        let exec = self
            .docker
            .create_exec(&self.container, config)
            .await
            .map_err(|e| failed("start a shell beside the session's", &e))?;
        let started = self
            .docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
            .map_err(|e| failed("start a shell beside the session's", &e))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(ToolError::internal(
                "the engine started a shell beside the session's detached",
            ));
        };
        let Some(pid) = self.pid_of(&exec.id).await else {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                "the engine did not say where the shell beside the session's runs",
            ));
        };
        let output = output.map(|frame| match frame {
            Ok(LogOutput::StdErr { message }) => Ok(Chunk::Stderr(message.to_vec())),
            Ok(frame) => Ok(Chunk::Stdout(frame.into_bytes().to_vec())),
            Err(e) => Err(io::Error::other(e)),
        });
        Ok(Launched {
            sandbox: DockerSibling::Exec {
                docker: self.docker.clone(),
                exec: exec.id,
                pid,
            },
            input,
            output: Box::pin(output),
            view: None,
        })
    }
}

impl DockerSiblings {
    /// The pid on this machine of `exec`, once the engine has started it.
    async fn pid_of(&self, exec: &str) -> Option<i32> {
        for n in 0..EXIT_TRIES {
            let inspected = self.docker.inspect_exec(exec).await.ok()?;
            let pid = inspected.pid.and_then(|p| i32::try_from(p).ok());
            if let Some(pid) = pid.filter(|&p| p > 1) {
                return Some(pid);
            }
            tokio::time::sleep(wait(n)).await;
        }
        None
    }
}

/// A shell beside a session's: an `exec` in its container, or one that joined it with a view
/// of its own.
pub(crate) enum DockerSibling {
    Exec {
        docker: Docker,
        exec: String,
        /// Its process on this machine.
        pid: i32,
    },
    Joined(Box<Joined>),
}

impl Sibling for DockerSibling {
    fn pid(&self) -> i32 {
        match self {
            DockerSibling::Exec { pid, .. } => *pid,
            DockerSibling::Joined(joined) => joined.pid(),
        }
    }

    /// The engine marks an exec ended a little after its output closed.
    async fn exit_status(&mut self) -> Option<i64> {
        let (docker, exec) = match self {
            DockerSibling::Exec { docker, exec, .. } => (docker, exec),
            DockerSibling::Joined(joined) => return joined.exit_status().await,
        };
        for n in 0..EXIT_TRIES {
            let inspected = docker.inspect_exec(exec).await.ok()?;
            if inspected.running != Some(true) {
                return inspected.exit_code;
            }
            tokio::time::sleep(wait(n)).await;
        }
        None
    }

    /// An exec's shell ends at the end of its input; the engine forgets the exec on its own.
    async fn close(self) {
        if let DockerSibling::Joined(joined) = self {
            joined.close().await;
        }
    }

    async fn close_settled(
        self,
        inv: &Invocation,
        answered: Result<Output, ToolError>,
    ) -> Result<Output, ToolError> {
        match self {
            DockerSibling::Joined(joined) => joined.close_settled(inv, answered).await,
            exec => {
                exec.close().await;
                answered
            }
        }
    }
}
