//! What each executor kind can honour, and the one check of every policy against it.
//!
//! A backend states its [`Capabilities`] as a struct literal, so a new field here does not
//! compile until every backend has decided about it; the check destructures every grant and
//! limit without `..`, so a new grant or limit does not compile until it is decided here.

use crate::grants::{GrantsSpec, Paths};
use crate::limits::LimitsFile;
use crate::located::{PolicyError, line_of};
use crate::units::ByteSize;
use serde::Serialize;
use std::path::Path;
use toml::Spanned;

/// Whether an executor honours a grant form or limit; when it does not, why, and what bounds
/// the tool instead (said in the load error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    Honoured,
    Refused(&'static str),
}

/// How an executor holds a tool to the hosts in `net`: every executor checks each connection
/// against the grants. One form left, kept so the audit's JSON keeps its `net` field for this
/// release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetHosts {
    /// Every connection is checked against the grants.
    Enforced,
}

/// An executor kind as a policy's check sees it: its name, and what it honours. Every
/// [`crate::Backend`] is one; the check needs nothing more of it.
pub trait ExecutorKind {
    /// The `kind` policies write for it (`"wasm"`).
    fn kind(&self) -> &'static str;

    /// What its tools can be granted and held to; the toolbox refuses every other grant or
    /// limit at load, naming file and line.
    fn capabilities(&self) -> Capabilities;
}

/// What one executor kind honours. Everything else a policy writes is refused at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Filesystem roots and the paths the tool sees them at.
    pub paths: Paths,
    /// `env`, `env_from_host` and `secret_env`.
    pub env: Support,
    /// `env_from_caller`: variables a client sets for its session.
    pub caller_env: Support,
    /// `net` host grants.
    pub net: NetHosts,
    /// `dns = true`: the tool's own name lookups.
    pub dns: Support,
    /// `net_credentials`: headers added on the host side.
    pub credentials: Support,
    /// `limits.fuel`.
    pub fuel: Support,
    /// `limits.response`: a cap on each HTTP response body.
    pub response: Support,
    /// The largest `limits.memory` the executor can give, when it has a ceiling.
    pub memory_ceiling: Option<u64>,
    /// State kept per session (a long-lived shell), freed at `Executor::end_session`.
    pub sessions: bool,
    /// Whole programs run in the sandbox a call gets (`Executor::exec`, `warden exec`).
    pub programs: bool,
    /// Each call reports the filesystem roots it opened ([`crate::Meter::open_root`]), so the
    /// usage report can name the roots no call opened.
    pub roots_observed: bool,
    /// A call's changes to its read-write roots held for a reviewer before they are applied
    /// (`[review] changes = true`, see [`crate::HeldChanges`]).
    pub changes: Support,
}

/// Where the check reports: the file, its text and the executor kind.
pub(crate) struct Checked<'a> {
    pub file: &'a Path,
    pub text: &'a str,
    pub kind: &'a str,
}

impl Checked<'_> {
    fn refuse(&self, span: std::ops::Range<usize>, what: &str, why: &str) -> PolicyError {
        PolicyError::new(
            self.file,
            Some(line_of(self.text, span.start)),
            format!("{what} cannot be honoured for a {} tool: {why}", self.kind),
        )
    }

    /// Refuses every grant the executor cannot honour.
    pub(crate) fn grants(
        &self,
        caps: &Capabilities,
        grants: &GrantsSpec,
    ) -> Result<(), PolicyError> {
        let GrantsSpec {
            env,
            env_from_host,
            secret_env,
            env_from_caller,
            fs: _,  // seen at guest or host paths: resolved by `Capabilities::paths`
            net: _, // the form of each host grant is the executor's: see `NetHosts`
            dns,
            net_credentials,
            credential_host_shared: _, // meaningful only beside credentials, checked below
        } = grants;
        if let Support::Refused(why) = caps.env {
            let first = env
                .as_ref()
                .filter(|e| !e.get_ref().is_empty())
                .map(Spanned::span)
                .or_else(|| env_from_host.first().map(toml::Spanned::span))
                .or_else(|| secret_env.first().map(toml::Spanned::span));
            if let Some(span) = first {
                return Err(self.refuse(span, "an env grant", why));
            }
        }
        if let (Support::Refused(why), Some(first)) = (caps.caller_env, env_from_caller.first()) {
            return Err(self.refuse(first.span(), "env_from_caller", why));
        }
        if let (Support::Refused(why), Some(on)) = (caps.dns, dns)
            && *on.get_ref()
        {
            return Err(self.refuse(on.span(), "dns = true", why));
        }
        if let (Support::Refused(why), Some(first)) = (caps.credentials, net_credentials.first()) {
            return Err(self.refuse(first.span(), "net_credentials", why));
        }
        Ok(())
    }

    /// Refuses `changes = true` in a review table (`table`) where the executor cannot hold a
    /// call's changes for the reviewer.
    pub(crate) fn review(
        &self,
        caps: &Capabilities,
        changes: Option<&Spanned<bool>>,
    ) -> Result<(), PolicyError> {
        match (caps.changes, changes) {
            (Support::Refused(why), Some(on)) if *on.get_ref() => {
                Err(self.refuse(on.span(), "review of changes (`changes = true`)", why))
            }
            _ => Ok(()),
        }
    }

    /// Refuses every limit the executor cannot honour; `table` names where it was written.
    pub(crate) fn limits(
        &self,
        caps: &Capabilities,
        table: &str,
        limits: &LimitsFile,
    ) -> Result<(), PolicyError> {
        let LimitsFile {
            timeout: _,
            memory,
            fuel,
            output: _,
            response,
            concurrency: _,
            // Bounds a call's transaction wherever it has one (see `warden_tx`).
            changes: _,
        } = limits;
        if let (Support::Refused(why), Some(f)) = (caps.fuel, fuel) {
            return Err(self.refuse(f.span(), &format!("{table} fuel"), why));
        }
        if let (Support::Refused(why), Some(r)) = (caps.response, response) {
            return Err(self.refuse(r.span(), &format!("{table} response"), why));
        }
        if let (Some(ceiling), Some(m)) = (caps.memory_ceiling, memory)
            && m.get_ref().0 > ceiling
        {
            return Err(self.refuse(
                m.span(),
                &format!("{table} memory = \"{}\"", m.get_ref()),
                &format!("it can have at most {}", ByteSize(ceiling)),
            ));
        }
        Ok(())
    }
}
