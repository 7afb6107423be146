//! Shells beside a session's, for commands that overlap (`warden_command::session`'s
//! contract): each through a helper that joins the session's sandbox ([`crate::join`]).
//! Where the session sees its read-write roots through a view, each shell beside it sees
//! them through one of its own, made for it in warden's store: its one command's
//! transaction, settled as a call's once everything it started is gone.

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
use warden_core::{Invocation, Output, ToolError};
use warden_tx::View;
use warden_tx::settle::Settling;

/// Starts shells in one session's sandbox, with the session shell's call.
#[derive(Clone)]
pub(crate) struct HostSiblings {
    pub starter: Arc<Starter>,
    /// The session shell's call: its shell, environment and rlimits.
    pub call: Call,
    /// The session's sandbox; each shell's view is added to it.
    pub join: Join,
    /// The session sees its roots through a view (and keeps a stash for views of shells
    /// beside it).
    pub viewed: bool,
}

impl Siblings for HostSiblings {
    type Sibling = HostSibling;

    fn viewed(&self) -> bool {
        self.viewed
    }

    async fn start(&self) -> Result<Launched<HostSibling>, ToolError> {
        let (view, layers) = match self.viewed {
            true => self
                .starter
                .sandboxes
                .view_beside()
                .map(|(v, l)| (Some(v), Some(l)))?,
            false => (None, None),
        };
        let join = Join {
            view: layers,
            ..self.join.clone()
        };
        let mut started = self.starter.sandboxes.join(join).await?;
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
        // With a view, the helper's child is its PID namespace's parent, whose one child is
        // that namespace's `init`, whose one child is the shell, which said `ready`.
        let pid = match view {
            Some(_) => only_child(pid).and_then(only_child).ok_or_else(|| {
                unavailable("a shell beside the session's was not found in its namespace")
            })?,
            None => pid,
        };
        let sibling = HostSibling {
            helper,
            pid,
            reports,
            view,
            tool: self.starter.config().name.clone(),
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
/// Dropped, the helper is killed, and the shell with it (and its view, discarded).
pub(crate) struct HostSibling {
    helper: Forked,
    /// The shell's pid on this machine.
    pid: i32,
    reports: BufReader<Receiver>,
    /// Its own view of the session's read-write roots, if the session has one.
    view: Option<View>,
    /// The session's tool, whose call its command is.
    tool: String,
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

    /// The helper ended on its own only once the shell's namespace's `init` did, which ends
    /// it with the shell and everything the shell started: its view is then final.
    async fn close_settled(
        self,
        inv: &Invocation,
        answered: Result<Output, ToolError>,
    ) -> Result<Output, ToolError> {
        let gone = end(&self.helper).await;
        let whose = Settling {
            call: &inv.call_id,
            tool: &self.tool,
            limit: inv.limits.changes,
        };
        warden_tx::settle::settle(self.view, gone, whose, None, answered)
    }
}

/// Waits for `helper` to end (its shell ends at the end of its input), killing it when it
/// does not; answers whether it ended on its own.
async fn end(helper: &Forked) -> bool {
    if tokio::time::timeout(CLOSE_WAIT, helper.ended())
        .await
        .is_ok()
    {
        return true;
    }
    helper.kill();
    let _ = tokio::time::timeout(CLOSE_WAIT, helper.ended()).await;
    false
}

/// The one child of process `pid`, as this machine numbers it.
fn only_child(pid: i32) -> Option<i32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    let mut children = children.split_whitespace();
    let child = children.next()?.parse().ok()?;
    children.next().is_none().then_some(child)
}
