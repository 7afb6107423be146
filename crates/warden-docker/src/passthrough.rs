//! A program of `warden exec` in a docker sandbox: a container with the body a call's gets,
//! attached before it starts, its streams relayed to and from the program's own as they flow,
//! driven by `warden_command::program`, and removed when the program ends. Its read-write
//! roots are seen through a view where a call's container's would be (see `crate::view`),
//! settled as a call's once every process of the container is gone.

use crate::launch::{Recipe, Started};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{KillContainerOptionsBuilder, ResizeContainerTTYOptionsBuilder};
use futures::StreamExt;
use std::collections::BTreeMap;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use warden_command::program::{Driven, Running, drive};
use warden_core::{BoxFuture, ErrorKind, Exit, Finished, Held, Program, ToolError, WindowSize};
use warden_net::Scope;
use warden_tx::settle::Settling;

/// A deadline for the gate of a program without one: far enough never to come.
const NEVER: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// Runs `argv` as the program, in a container `recipe` makes for the tool.
pub(crate) async fn run(
    recipe: &Recipe,
    argv: Vec<String>,
    program: Program,
    held: Held,
) -> Result<Finished, ToolError> {
    let engine = &*recipe.engine;
    if recipe.plan.copied.is_some() {
        return Err(ToolError::new(
            ErrorKind::Unavailable,
            "this engine cannot mount the tool's roots, so its calls get copies; `warden exec` \
             runs programs only where the roots are mounted: use an engine on this machine",
        ));
    }
    let Program {
        stdin,
        stdout,
        stderr,
        timeout,
        mut signals,
        terminal,
        ..
    } = program;
    let started = recipe
        .launch(
            held_until_told(argv, terminal.is_some()),
            &recipe.grants.resolve_env(&BTreeMap::new())?,
            held.limits.memory,
            "exec",
            terminal.is_some(),
            recipe.programs.as_ref(),
        )
        .await?;
    let Started {
        docker,
        container,
        attached,
        gate,
        sandboxed: _sandboxed,
        view,
        init,
        ..
    } = started;
    if let Some(proxy) = &gate {
        let ends = tokio::time::Instant::now() + timeout.unwrap_or(NEVER);
        proxy.begin(Scope {
            denials: held.denials.clone(),
            deadline: ends.into_std(),
        });
    }
    let running = InContainer {
        docker: &docker,
        id: &container.id,
    };
    let (mut input, mut frames) = (attached.input, attached.output);
    let mut early = Vec::new();
    if let Some(size) = &terminal {
        let now = *size.borrow();
        running.resize(now).await;
        // The terminal would echo the line that starts the program: it is sent once the
        // shell has turned the echo off and said so.
        early = echo_off(&mut frames).await;
    }
    // The program starts here; a failed write shows as its container's exit status (125).
    let _ = input.write_all(b"go\n").await;
    let output = relay_frames(early, frames, stdout, stderr, &running);
    let driven = match terminal {
        Some(size) => {
            tokio::select! {
                driven = drive(&running, stdin, input, output, &mut signals, timeout) => driven,
                never = running.follow(size) => match never {},
            }
        }
        None => drive(&running, stdin, input, output, &mut signals, timeout).await,
    };
    let status = container.exit_status(engine).await;
    if let Some(traffic) = gate.map(|p| p.end()) {
        traffic.count_in(&held.usage);
    }
    let ended = match (driven, status) {
        (Driven::TimedOut, _) => Ok(Exit::TimedOut),
        (Driven::Killed, _) => Ok(Exit::Signal(9)),
        (Driven::Ended, Ok((code, _))) => Ok(Exit::Code(i32::try_from(code).unwrap_or(-1))),
        (Driven::Ended, Err(e)) => Err(e),
    };
    // Its view, kept only when the program ended on its own, is final once every process of
    // the container is gone.
    let kept = view.is_some() && matches!(ended, Ok(exit) if exit.on_its_own());
    let gone = match &init {
        _ if !kept => false,
        Some(init) => init.end().await,
        // gVisor's file server, or an engine whose processes are not seen here.
        None => container.stop_all().await,
    };
    container.remove().await;
    let whose = Settling {
        call: &held.call_id,
        tool: &recipe.plan.tool,
        limit: held.limits.changes,
    };
    warden_tx::settle::settle_program(view, gone, whose, ended)
}

/// The command line of a program's container: `/bin/sh` waits for one line (sent once the
/// gate listens, when there is one), then becomes the program, which reads the rest of stdin.
/// At a terminal it first turns the echo off and says so with [`ECHO_OFF`], and turns the
/// echo back on after the line.
fn held_until_told(argv: Vec<String>, terminal: bool) -> Vec<String> {
    let script = if terminal {
        "stty -echo 2>/dev/null; printf '\\006'; IFS= read -r w || exit 125; \
         stty echo 2>/dev/null; exec \"$@\""
    } else {
        "IFS= read -r w || exit 125; exec \"$@\""
    };
    let mut held = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "sh".to_owned(),
    ];
    held.extend(argv);
    held
}

/// What a program's shell at a terminal prints once the echo is off (ACK). Not 0, 1 or 2:
/// the engine's attach stream of a terminal is raw, and its client takes a read that
/// begins with one of those for a frame header.
const ECHO_OFF: u8 = 6;

/// How long a program's shell at a terminal may take to turn the echo off.
const ECHO_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads frames up to [`ECHO_OFF`] and answers what came after it in its frame.
async fn echo_off(
    frames: &mut (impl futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin),
) -> Vec<u8> {
    let waited = tokio::time::timeout(ECHO_WAIT, async {
        while let Some(Ok(frame)) = frames.next().await {
            let bytes = frame.into_bytes();
            if let Some(at) = bytes.iter().position(|&b| b == ECHO_OFF) {
                return bytes[at + 1..].to_vec();
            }
        }
        Vec::new()
    });
    waited.await.unwrap_or_default()
}

/// Copies the attached frames to the program's stdout and stderr as they come, then shuts
/// both down. A reader gone (warden's stdout closed early) kills the program, which has no
/// other way to learn that nobody reads it.
async fn relay_frames(
    early: Vec<u8>,
    mut frames: impl futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
    mut stdout: impl AsyncWrite + Unpin,
    mut stderr: impl AsyncWrite + Unpin,
    running: &InContainer<'_>,
) {
    if !early.is_empty() && write(&mut stdout, &early).await.is_err() {
        running.kill().await;
    }
    while let Some(Ok(frame)) = frames.next().await {
        let written = match frame {
            LogOutput::StdErr { message } => write(&mut stderr, &message).await,
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                write(&mut stdout, &message).await
            }
            LogOutput::StdIn { .. } => Ok(()),
        };
        if written.is_err() {
            running.kill().await;
            break;
        }
    }
    let _ = stdout.shutdown().await;
    let _ = stderr.shutdown().await;
}

async fn write(to: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    to.write_all(bytes).await?;
    to.flush().await
}

/// A program's running container, as the driver reaches it: signals go to its init, which
/// passes them on to the program.
struct InContainer<'a> {
    docker: &'a Docker,
    id: &'a str,
}

impl InContainer<'_> {
    /// Sets the container's terminal to `size`.
    async fn resize(&self, size: WindowSize) {
        let options = ResizeContainerTTYOptionsBuilder::new()
            .h(i32::from(size.rows))
            .w(i32::from(size.cols))
            .build();
        if let Err(e) = self.docker.resize_container_tty(self.id, options).await {
            tracing::debug!(container = %self.id, "resizing its terminal: {e}");
        }
    }

    /// Follows `size` onto the container's terminal until dropped.
    async fn follow(&self, mut size: watch::Receiver<WindowSize>) -> std::convert::Infallible {
        loop {
            if size.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            let now = *size.borrow_and_update();
            self.resize(now).await;
        }
    }

    async fn send(&self, signal: i32) {
        let options = KillContainerOptionsBuilder::new()
            .signal(&signal.to_string())
            .build();
        // A container that has just ended has nothing left to signal.
        let _ = self.docker.kill_container(self.id, Some(options)).await;
    }
}

impl Running for InContainer<'_> {
    fn signal(&self, signal: i32) -> BoxFuture<'_, ()> {
        Box::pin(self.send(signal))
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.send(9))
    }
}
