//! The seam between the toolbox and each executor kind: a [`Backend`] states what it can
//! honour, turns a policy of its kind into tools, and reports what it enforces.

use crate::capability::ExecutorKind;
use crate::executor::{BoxFuture, Executor};
use crate::located::PolicyError;
use crate::message::ToolError;
use crate::policy::Policy;
use crate::spec::ToolSpec;
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Turns policies of one executor kind into tools. A new kind is a crate implementing this,
/// and one line adding it to the list the binary loads toolboxes with.
pub trait Backend: ExecutorKind + Send + Sync {
    /// Parses the policy's `[executor]` table and prepares every tool of the policy; an error
    /// names what cannot be honoured.
    fn load(&self, policy: &Arc<Policy>) -> Result<Loaded, PolicyError>;

    /// The names of the tools `policy` serves (before its `prefix`), where this backend can
    /// tell them without loading it (from what a load of the same policy over the same code
    /// recorded); `None` where only a load tells. A name a backend answers here, it must serve
    /// when loaded: a toolbox loaded for one call leaves out the policies whose names miss it.
    fn names(&self, policy: &Policy) -> Option<Vec<String>> {
        let _ = policy;
        None
    }

    /// Runs a harmless call as the policy's tools would, to tell what this machine puts in
    /// force; `None` when nothing depends on the machine.
    fn probe(&self, policy: &Arc<Policy>) -> BoxFuture<'_, Option<Result<Probe, ProbeError>>> {
        let _ = policy;
        Box::pin(async { None })
    }
}

/// What a backend made of one policy.
pub struct Loaded {
    pub tools: Vec<LoadedTool>,
    pub report: Report,
}

/// One tool that a backend found in a policy.
pub struct LoadedTool {
    /// The function's name inside its sandbox (the key of `[functions.NAME]`).
    pub function: String,
    /// The spec, named without the policy's prefix.
    pub spec: ToolSpec,
    pub executor: Arc<dyn Executor>,
}

/// What a backend enforces for one policy, in its own words: the audit prints it and MCP
/// annotations read it, so no front end matches on executor kinds.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The executor's settings with their defaults filled in, as the audit's JSON shows them.
    pub settings: Map<String, Value>,
    /// The same for people: one labelled line each.
    pub lines: Vec<ReportLine>,
    /// What the tools can reach on the network.
    pub network: Reach,
    /// What a reviewer should look at (an unpinned component, an image by tag…).
    pub flags: Vec<String>,
}

/// One line of a report: `executor  docker warden-sandbox:latest …`.
#[derive(Debug, Clone, Serialize)]
pub struct ReportLine {
    pub label: &'static str,
    pub text: String,
}

/// What a tool can reach on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Only what `net` grants (nothing when it grants nothing).
    Grants,
    /// Nothing at all.
    None,
    /// Every host: an explicit opt-in the audit flags.
    Unrestricted,
}

impl Reach {
    /// True when the tool can talk to the world beyond its sandbox.
    pub fn is_open(self, grants: &crate::Grants) -> bool {
        match self {
            Self::Grants => !grants.net.is_empty(),
            Self::None => false,
            Self::Unrestricted => true,
        }
    }
}

/// What a probe found in force on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// One line per protection, the missing ones included.
    pub in_force: Vec<String>,
    /// The protections this machine could not give.
    pub missing: Vec<String>,
}

/// Why a probe found that calls would be refused on this machine.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProbeError {
    /// The policy cannot be turned into a tool here.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The harmless call failed; its message says why, as the model would read it.
    #[error("{}", .0.message)]
    Call(#[source] ToolError),
}
