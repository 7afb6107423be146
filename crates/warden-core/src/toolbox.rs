//! The toolbox: a folder of policy files, and the tools they define.

use crate::backend::{Backend, LoadedTool, Report};
use crate::calllog::PolicyFacts;
use crate::capability::Capabilities;
use crate::capability::ExecutorKind;
use crate::executor::Executor;
use crate::grants::{Access, FsGrant};
use crate::limits::Limits;
use crate::located::PolicyError;
use crate::policy::Policy;
use crate::spec::{ToolSpec, is_valid_tool_name};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Why a toolbox could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ToolboxError {
    #[error(
        "the toolbox folder {0} does not exist: create it, or name another with --toolbox DIR \
         (or WARDEN_TOOLBOX)"
    )]
    Missing(PathBuf),
    #[error("cannot read the toolbox folder {0}: {1}")]
    Unreadable(PathBuf, std::io::Error),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(
        "two tools are named `{name}`: one in {first}, one in {second}; rename one (a `prefix` in the policy does it)"
    )]
    Duplicate {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("{} policies do not load: {}", .0.len(), list(.0))]
    Several(Vec<Broken>),
}

fn list(broken: &[Broken]) -> String {
    let errors: Vec<String> = broken.iter().map(|b| b.error.to_string()).collect();
    errors.join("; ")
}

/// How [`Toolbox::load_with`] takes a policy file that does not load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Loading {
    /// The toolbox serves every policy that loads; each one that does not is kept as a
    /// [`Broken`] (its tools are not served) and logged, so one broken tool does not take the
    /// shells and the other tools down with it.
    #[default]
    Tolerant,
    /// Any policy that does not load fails the whole toolbox, naming each (for CI).
    Strict,
}

/// A policy file of the toolbox that did not load: none of its tools is served.
#[derive(Debug)]
pub struct Broken {
    pub path: PathBuf,
    /// Why, naming file, line and fix.
    pub error: ToolboxError,
}

/// A place of warden's own that grants are kept away from.
#[derive(Debug, Clone)]
pub struct Protected {
    /// What it is, for the error message ("the toolbox", "the compile cache").
    pub what: &'static str,
    pub path: PathBuf,
    pub keep: Keep,
}

/// How far grants are kept from a [`Protected`] place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// No grant may overlap it: a tool reading the toolbox or the call log learns what it
    /// should not, and one writing there widens its own grants or erases its trail.
    Unreached,
    /// No read-write grant may contain it: reading warden's own programs is harmless, but
    /// one replaced from a sandbox would run outside every sandbox.
    Unwritten,
}

impl Protected {
    /// A place no grant may overlap.
    pub fn new(what: &'static str, path: impl Into<PathBuf>) -> Self {
        Self {
            what,
            path: path.into(),
            keep: Keep::Unreached,
        }
    }

    /// A place no read-write grant may contain (it may be read).
    pub fn unwritten(what: &'static str, path: impl Into<PathBuf>) -> Self {
        Self {
            what,
            path: path.into(),
            keep: Keep::Unwritten,
        }
    }

    /// Whether `grant` reaches this place, its path made absolute as `own`.
    fn reached_by(&self, grant: &FsGrant, own: &Path) -> bool {
        match self.keep {
            Keep::Unreached => own.starts_with(&grant.host) || grant.host.starts_with(own),
            Keep::Unwritten => grant.access == Access::ReadWrite && own.starts_with(&grant.host),
        }
    }
}

/// One tool ready to be called.
#[derive(Clone)]
pub struct Tool {
    pub spec: ToolSpec,
    /// The function's name inside its sandbox.
    pub function: String,
    pub policy: Arc<Policy>,
    pub limits: Limits,
    pub review_required: bool,
    /// A person decides, once a call has run, whether its changes are kept.
    pub review_changes: bool,
    /// Transient failures may be retried.
    pub idempotent: bool,
    pub executor: Arc<dyn Executor>,
    /// What its backend enforces (shared by the tools of one policy).
    pub report: Arc<Report>,
    /// Admission for `limits.concurrency`.
    pub(crate) permits: Arc<Semaphore>,
    /// What the call log says the policy gave it, made once at load.
    pub(crate) facts: Arc<PolicyFacts>,
}

impl Tool {
    /// The digest of its policy as the call log names it (`policy_digest`), which a review's
    /// decision is bound to.
    pub fn policy_digest(&self) -> &str {
        &self.facts.policy_digest
    }
}

/// Every tool of a toolbox folder, by name.
#[derive(Default)]
pub struct Toolbox {
    tools: BTreeMap<String, Tool>,
    policies: Vec<LoadedPolicy>,
    broken: Vec<Broken>,
}

/// One policy of a toolbox, with what its backend enforces and can honour.
#[derive(Clone)]
pub struct LoadedPolicy {
    pub policy: Arc<Policy>,
    pub report: Arc<Report>,
    pub capabilities: Capabilities,
}

impl Toolbox {
    /// Loads every `*.toml` in `dir` (sorted by name) with the backend for its executor kind.
    /// Any policy that cannot be honoured fails the whole load ([`Loading::Strict`]).
    pub fn load(
        dir: &Path,
        backends: &[&dyn Backend],
        protected: &[Protected],
    ) -> Result<Toolbox, ToolboxError> {
        Self::load_with(dir, backends, protected, Loading::Strict)
    }

    /// Loads every `*.toml` in `dir` (sorted by name) with the backend for its executor kind,
    /// taking a policy that does not load as `loading` says. A policy is served whole or not at
    /// all: nothing runs half-granted.
    pub fn load_with(
        dir: &Path,
        backends: &[&dyn Backend],
        protected: &[Protected],
        loading: Loading,
    ) -> Result<Toolbox, ToolboxError> {
        Self::load_where(dir, backends, protected, loading, |_, _| true)
    }

    /// As [`Toolbox::load_with`], for a call of `tool` alone: a policy whose backend tells,
    /// without loading it, the names of its tools ([`Backend::names`]), and `tool` is not
    /// among them, is read and checked, never loaded, and serves nothing. `None` where only
    /// the whole toolbox tells what the call meets: `tool` is not among the tools loaded, or
    /// two policies name one tool.
    pub fn load_for(
        dir: &Path,
        backends: &[&dyn Backend],
        protected: &[Protected],
        loading: Loading,
        tool: &str,
    ) -> Result<Option<Toolbox>, ToolboxError> {
        let mut skipped: Vec<String> = Vec::new();
        let toolbox = Self::load_where(dir, backends, protected, loading, |backend, policy| {
            let Some(names) = backend.names(policy) else {
                return true;
            };
            let names: Vec<String> = names
                .iter()
                .map(|n| format!("{}{n}", policy.prefix))
                .collect();
            let serves = names.iter().any(|n| n == tool);
            if !serves {
                skipped.extend(names);
            }
            serves
        })?;
        let mut named: Vec<&str> = skipped.iter().map(String::as_str).collect();
        named.extend(toolbox.tools.keys().map(String::as_str));
        named.sort_unstable();
        let clash = named.windows(2).any(|pair| pair[0] == pair[1]);
        Ok((toolbox.get(tool).is_some() && !clash).then_some(toolbox))
    }

    /// As [`Toolbox::load_with`], but a policy that `wanted` declines (given its backend and
    /// the policy, read and checked) is never loaded (a wasm policy's component is not read),
    /// and serves nothing.
    pub fn load_where(
        dir: &Path,
        backends: &[&dyn Backend],
        protected: &[Protected],
        loading: Loading,
        mut wanted: impl FnMut(&dyn Backend, &Policy) -> bool,
    ) -> Result<Toolbox, ToolboxError> {
        if !dir.is_dir() {
            return Err(ToolboxError::Missing(dir.to_owned()));
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| ToolboxError::Unreadable(dir.to_owned(), e))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "toml") && p.is_file())
            .collect();
        files.sort();
        let kinds: Vec<&dyn ExecutorKind> = backends.iter().map(|&b| b as _).collect();
        let mut toolbox = Toolbox::default();
        for file in files {
            let added = Policy::load(&file, &kinds)
                .map_err(ToolboxError::from)
                .and_then(|policy| {
                    check_protected(&policy, protected)?;
                    let kind = policy.kind.value.as_str();
                    match backends.iter().find(|b| b.kind() == kind) {
                        Some(backend) if !wanted(*backend, &policy) => Ok(()),
                        _ => toolbox.add_policy(Arc::new(policy), backends),
                    }
                });
            if let Err(error) = added {
                toolbox.broken.push(Broken { path: file, error });
            }
        }
        match (loading, toolbox.broken.len()) {
            (Loading::Strict, 1) => Err(toolbox.broken.remove(0).error),
            (Loading::Strict, 2..) => Err(ToolboxError::Several(toolbox.broken)),
            _ => {
                for b in &toolbox.broken {
                    tracing::warn!(
                        "a policy does not load, and its tools are not served: {}",
                        b.error
                    );
                }
                Ok(toolbox)
            }
        }
    }

    /// The policy files that did not load ([`Loading::Tolerant`]), in load order.
    pub fn broken(&self) -> &[Broken] {
        &self.broken
    }

    /// Adds the tools of one checked policy.
    pub fn add_policy(
        &mut self,
        policy: Arc<Policy>,
        backends: &[&dyn Backend],
    ) -> Result<(), ToolboxError> {
        let kind = &policy.kind;
        let backend = backends
            .iter()
            .find(|b| b.kind() == kind.value)
            .ok_or_else(|| {
                PolicyError::new(
                    &policy.path,
                    Some(kind.line),
                    format!(
                        "executor kind `{}` is not available in this build",
                        kind.value
                    ),
                )
            })?;
        let crate::backend::Loaded {
            tools: loaded,
            report,
        } = backend.load(&policy)?;
        let report = Arc::new(report);
        functions_named(&policy, &loaded)?;
        // Every name is checked before any tool is added: a policy is added whole or not at all.
        let mut named = Vec::with_capacity(loaded.len());
        for tool in loaded {
            let name = format!("{}{}", policy.prefix, tool.spec.name);
            if !is_valid_tool_name(&name) {
                return Err(PolicyError::new(
                    &policy.path,
                    None,
                    format!(
                        "tool name `{name}` does not fit ^[a-zA-Z0-9_-]{{1,64}}$ (OpenAI and MCP require it)"
                    ),
                )
                .into());
            }
            if let Some(existing) = self.tools.get(&name) {
                return Err(ToolboxError::Duplicate {
                    name,
                    first: existing.policy.path.clone(),
                    second: policy.path.clone(),
                });
            }
            named.push((name, tool));
        }
        for (name, tool) in named {
            let mut spec = tool.spec;
            spec.name = name;
            let over = policy.functions.get(&tool.function);
            let limits = policy.limits_for(&tool.function);
            let review_required = over
                .and_then(|o| o.review_required)
                .unwrap_or(policy.review_required);
            let review_changes = over
                .and_then(|o| o.review_changes)
                .unwrap_or(policy.review_changes);
            let idempotent = over.and_then(|o| o.idempotent).unwrap_or(policy.idempotent);
            let permits = Arc::new(Semaphore::new(limits.concurrency as usize));
            let facts = Arc::new(PolicyFacts::new(
                policy.kind.value.clone(),
                policy.path.display().to_string(),
                policy.grants.describe(),
                limits.describe(),
            ));
            self.tools.insert(
                spec.name.clone(),
                Tool {
                    spec,
                    function: tool.function,
                    policy: policy.clone(),
                    limits,
                    review_required,
                    review_changes,
                    idempotent,
                    executor: tool.executor,
                    report: report.clone(),
                    permits,
                    facts,
                },
            );
        }
        self.policies.push(LoadedPolicy {
            policy,
            report,
            capabilities: backend.capabilities(),
        });
        Ok(())
    }

    /// The tool of that name.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// Gets every tool ready ahead of its first call ([`crate::Executor::warm`]): inside a
    /// tokio runtime.
    pub fn warm(&self) {
        for tool in self.tools() {
            tool.executor.warm();
        }
    }

    /// Every tool, sorted by name.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }

    /// Every policy, in load order, with what its backend enforces.
    pub fn policies(&self) -> &[LoadedPolicy] {
        &self.policies
    }

    /// This toolbox with the tools of `relocated` in place of its own of the same name:
    /// `relocated` loaded one of its policies again, its read-write roots elsewhere (a fork's
    /// copies). Each keeps what the call log and the admission know of the tool it replaces
    /// (its policy's digest and grants as written, its concurrency), since the policy is the
    /// same; a tool `relocated` has and this toolbox lacks is left out.
    pub fn with_relocated(&self, relocated: &Toolbox) -> Toolbox {
        let mut tools = self.tools.clone();
        for (name, tool) in &relocated.tools {
            if let Some(own) = tools.get_mut(name) {
                own.executor = tool.executor.clone();
                own.report = tool.report.clone();
                own.policy = tool.policy.clone();
            }
        }
        Toolbox {
            tools,
            policies: self.policies.clone(),
            broken: Vec::new(),
        }
    }

    /// Every tool name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// The known name closest to `name`, if one is close enough to be a likely typo.
    pub fn closest(&self, name: &str) -> Option<&str> {
        self.tools
            .keys()
            .map(|k| (edit_distance(&k.to_lowercase(), &name.to_lowercase()), k))
            .filter(|(d, k)| *d <= 3.max(k.len() / 3))
            .min()
            .map(|(_, k)| k.as_str())
    }
}

/// Refuses filesystem grants that overlap warden's own files.
fn check_protected(policy: &Policy, protected: &[Protected]) -> Result<(), PolicyError> {
    for (index, grant) in policy.grants.fs.iter().enumerate() {
        for p in protected {
            let Ok(own) = p.path.canonicalize().or_else(|_| absolute(&p.path)) else {
                continue;
            };
            if !p.reached_by(grant, &own) {
                continue;
            }
            let (reach, fix) = match p.keep {
                Keep::Unreached => ("overlaps", "grant a folder outside it"),
                Keep::Unwritten => (
                    "contains",
                    "grant a folder beside it, or this one read-only",
                ),
            };
            return Err(PolicyError::new(
                &policy.path,
                policy.grant_lines.fs.get(index).copied(),
                format!(
                    "the fs grant of {} {reach} {} ({}); a tool must never reach warden's own \
                     files: {fix}",
                    grant.host.display(),
                    p.what,
                    own.display()
                ),
            ));
        }
    }
    Ok(())
}

fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    std::path::absolute(path)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Refuses a `[functions.NAME]` that names no function the backend loaded.
fn functions_named(policy: &Policy, loaded: &[LoadedTool]) -> Result<(), PolicyError> {
    for (name, f) in &policy.functions {
        if !loaded.iter().any(|t| &t.function == name) {
            let known: Vec<&str> = loaded.iter().map(|t| t.function.as_str()).collect();
            return Err(PolicyError::new(
                &policy.path,
                Some(f.line),
                format!(
                    "[functions.{name}] names no function of this tool; it has: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("read-file", "read-file"), 0);
        assert_eq!(edit_distance("read_file", "read-file"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
