//! A session: one container running one long-lived shell, driven over attach. `exec` would be
//! slower (26–43 ms here), would not keep `cd` and cannot be killed; a shell reading commands
//! on its stdin keeps its state, and each command ends with a marker line carrying its status.

use crate::container::Container;
use crate::engine::Engine;
use crate::output::UntilMarker;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::ContainerCreateBody;
use futures::{Stream, StreamExt};
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use warden_core::{ErrorKind, ToolError};

/// How long stderr's marker may trail stdout's (they travel on separate pipes).
const STDERR_GRACE: Duration = Duration::from_secs(2);

type Frames = Pin<Box<dyn Stream<Item = Result<LogOutput, BollardError>> + Send>>;

/// One live shell in one container.
pub(crate) struct Session {
    container: Container,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    output: Frames,
    /// The engine had already reported an OOM kill before the current command.
    oom_seen: bool,
}

/// How one command of a session ended.
pub(crate) enum Outcome {
    /// It finished; the shell lives on.
    Finished {
        code: i64,
        oom: bool,
        stdout: String,
        stderr: String,
    },
    /// The shell itself ended (`exit`, `exec`, a kill): the session is over.
    ShellEnded {
        code: i64,
        oom: bool,
        stdout: String,
        stderr: String,
    },
    /// The deadline passed with the command still running.
    TimedOut { stdout: String, stderr: String },
}

impl Session {
    /// Starts a container whose only process (under an init) is `shell`, reading stdin.
    pub(crate) async fn start(
        engine: &Engine,
        docker: &Docker,
        image: &str,
        body: ContainerCreateBody,
    ) -> Result<Session, ToolError> {
        let container = Container::create(engine, docker, image, body).await?;
        let attached = container.attach_and_start(engine, true).await?;
        Ok(Session {
            container,
            input: attached.input,
            output: attached.output,
            oom_seen: false,
        })
    }

    /// Runs one command under `deadline`; output beyond `limit` bytes per stream is cut.
    pub(crate) async fn run(
        &mut self,
        engine: &Engine,
        command: &str,
        limit: u64,
        deadline: Instant,
    ) -> Result<Outcome, ToolError> {
        let marker = format!("\n__WARDEN_END_{}:", nonce());
        let mut stdout = UntilMarker::new(&marker, limit);
        let mut stderr = UntilMarker::new(&marker, limit);
        let script = script(command, &marker[1..]);
        let write = async {
            self.input.write_all(script.as_bytes()).await?;
            self.input.flush().await
        };
        match tokio::time::timeout_at(deadline, write).await {
            Err(_) => {
                return Ok(Outcome::TimedOut {
                    stdout: String::new(),
                    stderr: String::new(),
                });
            }
            // A closed stdin means the shell is gone; reading says how it ended.
            Ok(Err(e)) => tracing::debug!("writing to the session shell failed: {e}"),
            Ok(Ok(())) => {}
        }
        let mut grace: Option<Instant> = None;
        loop {
            if stdout.done() && stderr.done() {
                break;
            }
            let until = grace.map_or(deadline, |g| g.min(deadline));
            match tokio::time::timeout_at(until, self.output.next()).await {
                Err(_) if grace.is_some() && Instant::now() < deadline => break,
                Err(_) => {
                    return Ok(Outcome::TimedOut {
                        stdout: stdout.text(),
                        stderr: stderr.text(),
                    });
                }
                Ok(Some(Ok(LogOutput::StdErr { message }))) => {
                    stderr.push(&message);
                }
                Ok(Some(Ok(frame))) => {
                    if stdout.push(&frame.into_bytes()) && grace.is_none() {
                        grace = Some(Instant::now() + STDERR_GRACE);
                    }
                }
                Ok(Some(Err(e))) => {
                    tracing::debug!("reading the session shell failed: {e}");
                    return self.ended(engine, stdout.text(), stderr.text()).await;
                }
                Ok(None) => return self.ended(engine, stdout.text(), stderr.text()).await,
            }
        }
        let code = stdout
            .tail()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .ok_or_else(|| {
                ToolError::new(
                    ErrorKind::Internal,
                    "the session shell answered without an exit status",
                )
            })?;
        let oom = code == 137 && self.oom_now().await;
        Ok(Outcome::Finished {
            code,
            oom,
            stdout: stdout.text(),
            stderr: stderr.text(),
        })
    }

    /// The shell's streams closed: collect its exit status.
    async fn ended(
        &mut self,
        engine: &Engine,
        stdout: String,
        stderr: String,
    ) -> Result<Outcome, ToolError> {
        let (code, oom) = self.container.exit_status(engine).await?;
        Ok(Outcome::ShellEnded {
            code,
            oom: oom && !self.oom_seen,
            stdout,
            stderr,
        })
    }

    /// True when an OOM kill happened since the last one seen.
    async fn oom_now(&mut self) -> bool {
        let killed = self.container.oom_killed().await;
        let new = killed && !self.oom_seen;
        self.oom_seen |= killed;
        new
    }

    /// Kills the shell and removes its container.
    pub(crate) async fn close(self) {
        self.container.remove().await;
    }
}

/// The text fed to the shell for one command. The command travels as a quoted string and is
/// run by `command eval`, so a syntax error is its own failure rather than the shell's end,
/// and it reads /dev/null rather than the channel that carries the next commands.
fn script(command: &str, marker: &str) -> String {
    let quoted = command.replace('\'', r"'\''");
    format!(
        "__warden_cmd='{quoted}'\n\
         command eval \"$__warden_cmd\" </dev/null\n\
         __warden_rc=$?\n\
         printf '\\n{marker}\\n' >&2; printf '\\n{marker}%s\\n' \"$__warden_rc\"\n"
    )
}

/// 64 random bits in hex: markers no command prints by accident, container names.
pub(crate) fn nonce() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_quotes_the_command() {
        let s = script("echo 'it''s' \"$HOME\"", "__M:");
        assert!(s.starts_with("__warden_cmd='echo '\\''it'\\'''\\''s'\\'' \"$HOME\"'\n"));
        assert!(s.ends_with("printf '\\n__M:%s\\n' \"$__warden_rc\"\n"));
        assert_ne!(nonce(), nonce());
    }
}
