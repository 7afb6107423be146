//! Shells beside a session's, for commands that overlap (`warden_command::session`'s
//! contract): each through a helper that joins the session's sandbox ([`crate::join`]).

use crate::failure::unavailable;
use crate::forks::Forked;
use crate::plan::{Call, Join, Report};
use crate::reports::{CLOSE_WAIT, next_report};
use crate::sandboxes::Started;
use crate::starter::Starter;
use std::sync::Arc;
use tokio::io::BufReader;
use tokio::net::unix::pipe::Receiver;
use warden_command::session::{Launched, Sibling, Siblings, chunks};
use warden_core::ToolError;

/// Starts shells in one session's sandbox, with the session shell's call.
#[derive(Clone)]
pub(crate) struct HostSiblings {
    pub starter: Arc<Starter>,
    /// The session shell's call: its shell, environment and rlimits.
    pub call: Call,
    pub join: Join,
}

impl Siblings for HostSiblings {
    type Sibling = HostSibling;

    async fn start(&self) -> Result<Launched<HostSibling>, ToolError> {
        let mut started = self.starter.sandboxes.join(self.join).await?;
        started.send_call(&self.call).await?;
        let Started {
            helper,
            stdin,
            stdout,
            stderr,
            reports,
            ..
        } = started;
        let mut reports = BufReader::new(reports);
        // Until the shell is confined and executed: its pid and `ready`, or a failure. The two
        // come from two processes (the helper sends the pid once it has forked, the shell
        // says `ready` before its exec), so either may come first.
        let (mut pid, mut ready, mut failed) = (None, false, None);
        while let Some(report) = next_report(&mut reports).await {
            match report {
                Report::Init { pid: p } => pid = Some(p),
                Report::Ready(_) => ready = true,
                Report::Failed { message, .. } => failed = Some(message),
                Report::Used { .. } | Report::Exited { .. } => {}
            }
            if (ready && pid.is_some()) || failed.is_some() {
                break;
            }
        }
        let Some(pid) = pid.filter(|_| ready && failed.is_none() && helper.running()) else {
            end(&helper).await;
            let why = failed.unwrap_or_else(|| "a shell beside the session's did not start".into());
            return Err(unavailable(&why));
        };
        let sibling = HostSibling {
            helper,
            pid,
            reports,
        };
        Ok(Launched {
            sandbox: sibling,
            input: Box::pin(stdin),
            output: chunks(stdout, stderr),
            view: None,
        })
    }
}

/// One shell beside a session's: the helper that joined the sandbox, and its reports.
/// Dropped, the helper is killed, and the shell with it.
pub(crate) struct HostSibling {
    helper: Forked,
    /// The shell's pid on this machine.
    pid: i32,
    reports: BufReader<Receiver>,
}

impl Sibling for HostSibling {
    fn pid(&self) -> i32 {
        self.pid
    }

    async fn exit_status(&mut self) -> Option<i64> {
        let read = async {
            while let Some(report) = next_report(&mut self.reports).await {
                if let Report::Exited { code, signal } = report {
                    return code.or(signal.map(|s| 128 + s)).map(i64::from);
                }
            }
            None
        };
        tokio::time::timeout(CLOSE_WAIT, read).await.ok().flatten()
    }

    async fn close(self) {
        end(&self.helper).await;
    }
}

/// Waits for `helper` to end (its shell ends at the end of its input), killing it when it
/// does not.
async fn end(helper: &Forked) {
    if tokio::time::timeout(CLOSE_WAIT, helper.ended())
        .await
        .is_err()
    {
        helper.kill();
        let _ = tokio::time::timeout(CLOSE_WAIT, helper.ended()).await;
    }
}
