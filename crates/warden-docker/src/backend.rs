//! The docker backend: turns a `kind = "docker"` policy into its one tool. Loading never
//! talks to the engine, so a toolbox loads (and its other tools run) with Docker down.

use crate::address::{EngineAddress, Place};
use crate::config::DockerConfig;
use crate::engine::Engine;
use crate::engine_guard::refuse_engine_reach;
use crate::files::{FILES_ENV, Files};
use crate::launch::Recipe;
use crate::plan::Plan;
use crate::pool::Pool;
use crate::runtime::Runtime;
use crate::tool::DockerTool;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use warden_command::{Template, session_shell};
use warden_core::{
    Access, Backend, ByteSize, Capabilities, ExecutorKind, Grants, Loaded, LoadedTool, Paths,
    Policy, PolicyError, Reach, Report, ReportLine, Support, ToolSpec,
};
use warden_net::{Egress, Gate};
use warden_tx::Store;

/// Loads `kind = "docker"` policies; the tools on one engine share its connection and lease
/// (`engine`: the process's own, then the others policies name, by address). Clones share
/// them.
#[derive(Clone)]
pub struct DockerBackend {
    engine: Arc<Engine>,
    others: Arc<Mutex<HashMap<EngineAddress, Arc<Engine>>>>,
    egress: Egress,
    views: Option<Arc<Store>>,
}

impl DockerBackend {
    /// Docker tools on `engine`, unless their policy names another.
    pub fn new(engine: Engine) -> Self {
        Self {
            engine: Arc::new(engine),
            others: Arc::default(),
            egress: Egress::default(),
            views: None,
        }
    }

    /// Makes each call of a container per call a transaction over its read-write roots, its
    /// views and records in `store` (see `warden_tx`): a call warden ends leaves nothing
    /// behind, one that ends on its own commits, undoably; so do `exec`'s programs and a
    /// session's commands (under runc). Copied roots still write in place (see `crate::view`).
    pub fn transactions(mut self, store: Arc<Store>) -> Self {
        self.views = Some(store);
        self
    }

    /// Reaches out for tools' gates as `egress` says (resolver, upstream roots).
    pub fn egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// The process's own engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The engine of a policy: the one it names (shared with every policy naming the same
    /// address), else the process's own, whose refused setting is a load error.
    fn engine_for(&self, policy: &Policy, cfg: &DockerConfig) -> Result<Arc<Engine>, PolicyError> {
        let Some(named) = &cfg.engine else {
            return match self.engine.address() {
                Ok(_) => Ok(self.engine.clone()),
                Err(why) => Err(PolicyError::new(
                    &policy.path,
                    Some(policy.executor.kind_line()),
                    format!(
                        "a docker tool needs an engine warden accepts: {why}; or name one in the \
                         policy (engine = \"tcp://host:2376\", engine_certs = \"certs\")"
                    ),
                )),
            };
        };
        if self.engine.address() == Ok(&named.value) {
            return Ok(self.engine.clone());
        }
        let mut others = self
            .others
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(others
            .entry(named.value.clone())
            .or_insert_with(|| Arc::new(self.engine.sibling(named.value.clone())))
            .clone())
    }
}

impl ExecutorKind for DockerBackend {
    fn kind(&self) -> &'static str {
        "docker"
    }

    fn capabilities(&self) -> Capabilities {
        warden_command::capabilities(Paths::Guest, Support::Honoured)
    }
}

impl Backend for DockerBackend {
    fn load(&self, policy: &Arc<Policy>) -> Result<Loaded, PolicyError> {
        let err = |line: Option<usize>, msg: String| PolicyError::new(&policy.path, line, msg);
        let cfg = &DockerConfig::from_policy(policy)?;
        let template = Template::parse(&cfg.argv.value)
            .map_err(|e| err(Some(cfg.argv.line), e.to_string()))?;
        let shell = session_shell(&policy.executor, &cfg.argv, &template, cfg.session)?;
        let engine = self.engine_for(policy, cfg)?;
        let files = files(cfg, &engine).map_err(|(line, msg)| err(line, msg))?;
        refuse_unwritten(policy, cfg, files)?;
        let mut plan = Plan::new(cfg, &policy.grants, files)
            .map_err(|e| err(Some(cfg.argv.line), e.to_string()))?;
        let user_line = cfg.user.as_ref().map(|u| u.line);
        refuse_engine_reach(policy, plan.user, engine.address().ok(), user_line)?;
        let limits = policy.limits_for(&cfg.name);
        let spec = ToolSpec {
            name: cfg.name.clone(),
            description: cfg
                .description
                .clone()
                .unwrap_or_else(|| describe(&template, shell.is_some(), cfg)),
            input_schema: template.schema(limits.timeout, shell.is_some()),
            output_schema: None,
        };
        // With net grants and no opt-in to every host, each container gets warden's gate.
        let gate = if cfg.network.value.gated(&policy.grants) {
            if let Some(why) = crate::gate::unsupported() {
                return Err(err(
                    Some(cfg.network.line),
                    format!("net grants cannot be kept for a docker tool here: {why}"),
                ));
            }
            if engine.place() == Place::Remote {
                let line = cfg.engine.as_ref().map_or(cfg.network.line, |e| e.line);
                let address = engine.shown_address();
                return Err(err(
                    Some(line),
                    format!(
                        "the engine {address} cannot keep net grants: {}",
                        crate::gate::REMOTE
                    ),
                ));
            }
            Some(Gate::new(
                Arc::new(policy.grants.net.clone()),
                self.egress.clone(),
            ))
        } else {
            None
        };
        let runtime =
            runtime(cfg, &engine, gate.is_some()).map_err(|(line, why)| err(line, why))?;
        // A runtime the engine did not describe is taken for gVisor by its usual name.
        plan.gvisor = match &runtime {
            Some(found) => found.is_gvisor(),
            None => cfg
                .runtime
                .as_ref()
                .is_some_and(|r| r.value.starts_with("runsc")),
        };
        let report = report(cfg, &plan, &policy.grants, &engine, runtime.as_ref());
        let session = shell.is_some();
        let in_place = crate::view::in_place(&plan, self.views.is_some());
        let unreviewed = match session {
            true => Some(warden_tx::settle::SESSION_UNREVIEWED),
            false => in_place,
        };
        warden_tx::settle::refuse_review_in_place(policy, unreviewed)?;
        // A session's commands are transactions where a call's would be, and its container's
        // processes are this machine's.
        let viewed = in_place.is_none() && (!session || crate::view::session_viewed(&plan));
        // A session's read-write copies are settled command by command, read back from its
        // container.
        let copies = in_place.is_none()
            && session
            && plan
                .copied
                .as_ref()
                .is_some_and(crate::files::Copied::writes_back);
        let recipe = Recipe {
            engine,
            plan,
            shell: shell.unwrap_or_else(|| crate::per_call::SHELL.to_owned()),
            grants: policy.grants.clone(),
            gate,
            views: self.views.clone().filter(|_| viewed),
            programs: self.views.clone().filter(|_| in_place.is_none()),
            copies: self.views.clone().filter(|_| copies),
        };
        let pool = cfg
            .pool
            .as_ref()
            .map(|p| Pool::new(recipe.clone(), p.value as usize, limits.memory));
        let tool = DockerTool::new(recipe, template, session, pool, cfg.transfer);
        Ok(Loaded {
            tools: vec![LoadedTool {
                function: cfg.name.clone(),
                spec,
                executor: Arc::new(tool),
            }],
            report,
        })
    }
}

/// The runtime the policy names, as the engine has it: `None` when it names none, or when the
/// engine did not answer (its calls will say what it says). A name the engine lacks, or a
/// runtime that cannot keep a gate for a gated tool, is refused with the line.
fn runtime(
    cfg: &DockerConfig,
    engine: &Engine,
    gated: bool,
) -> Result<Option<Runtime>, (Option<usize>, String)> {
    let (Some(named), Ok(address)) = (&cfg.runtime, engine.address()) else {
        return Ok(None);
    };
    let found = crate::runtime::find(address, &named.value)
        .map_err(|e| (Some(named.line), e.to_string()))?;
    if gated && let Some(why) = found.as_ref().and_then(Runtime::refuses_gate) {
        return Err((
            Some(named.line),
            format!("net grants cannot be kept for this docker tool: {why}"),
        ));
    }
    if found.is_none() {
        tracing::warn!(runtime = %named.value,
            "the Docker engine did not answer: the runtime is not checked until a call");
    }
    Ok(found)
}

/// How the tool's roots reach its containers: as the policy's `files` says, else as the
/// engine has them. An engine elsewhere cannot mount this machine's folders.
fn files(cfg: &DockerConfig, engine: &Engine) -> Result<Files, (Option<usize>, String)> {
    match &cfg.files {
        None => Ok(engine.files()),
        Some(f) if f.value == Files::Mounted && engine.place() == Place::Remote => Err((
            Some(f.line),
            format!(
                "files = \"mount\" cannot be kept: the Docker engine {} runs elsewhere, and \
                 a bind names a folder of its own machine; drop it (an engine elsewhere gets \
                 the roots copied in)",
                engine.shown_address()
            ),
        )),
        Some(f) => Ok(f.value),
    }
}

/// Where roots are copied in, a read-write root needs `copy_back = true`:
/// without it the container's changes would be lost at its end, unlike a mount's.
fn refuse_unwritten(policy: &Policy, cfg: &DockerConfig, files: Files) -> Result<(), PolicyError> {
    if files == Files::Mounted || cfg.copy_back.as_ref().is_some_and(|c| c.value) {
        return Ok(());
    }
    let Some((index, grant)) = policy
        .grants
        .fs
        .iter()
        .enumerate()
        .find(|(_, g)| g.access == Access::ReadWrite)
    else {
        return Ok(());
    };
    let turned_off = cfg
        .copy_back
        .as_ref()
        .map(|c| format!(" (line {} sets it to false)", c.line))
        .unwrap_or_default();
    Err(PolicyError::new(
        &policy.path,
        policy.grant_lines.fs.get(index).copied(),
        format!(
            "the read-write root {grant} is not mounted: this tool's roots are copied into its \
             containers (its engine runs on another machine, {FILES_ENV}=copy, or the \
             policy's `files = \"copy\"`), and a \
             read-write root is copied only with `copy_back = true` in [executor]{turned_off}, \
             which writes each container's changes back to the folder when the container ends \
             (refused whole when the folder changed meanwhile where the container changed it \
             too): add it, or grant the root read-only"
        ),
    ))
}

/// How each root reaches the containers, for the audit: "HOST -> GUEST (ACCESS): how".
fn roots(plan: &Plan, grants: &Grants) -> Vec<String> {
    grants
        .fs
        .iter()
        .map(|g| {
            let how = match &plan.copied {
                None => "mounted".to_owned(),
                Some(c) if g.access == Access::ReadWrite => format!(
                    "copied in, written back at the end (cap {} for all roots)",
                    ByteSize(c.limit)
                ),
                Some(c) => format!("copied in (cap {} for all roots)", ByteSize(c.limit)),
            };
            format!("{g}: {how}")
        })
        .collect()
}

/// What every container of the tool gets, for the audit.
fn report(
    cfg: &DockerConfig,
    plan: &Plan,
    grants: &Grants,
    engine: &Engine,
    runtime: Option<&Runtime>,
) -> Report {
    let audit = Audit::new(cfg, plan, grants, engine, runtime);
    let network = cfg.network.value.reach(grants);
    Report {
        settings: audit.settings(),
        lines: audit.lines(engine),
        network,
        flags: flags(cfg, engine, network),
    }
}

/// What the audit says of every container of a tool, worked out once for both its settings
/// and its lines.
struct Audit<'a> {
    cfg: &'a DockerConfig,
    plan: &'a Plan,
    grants: &'a Grants,
    /// What a container is for: "session" or "call".
    mode: &'static str,
    cpus: f64,
    tmp: String,
    hardening: Vec<&'static str>,
    /// The engine's address as shown.
    address: String,
    /// The runtime as found, or as named.
    runtime: String,
}

impl<'a> Audit<'a> {
    fn new(
        cfg: &'a DockerConfig,
        plan: &'a Plan,
        grants: &'a Grants,
        engine: &Engine,
        runtime: Option<&Runtime>,
    ) -> Self {
        let runtime = match (&cfg.runtime, runtime) {
            (_, Some(found)) => found.describe(),
            (Some(named), None) => {
                format!("{} (not checked: the engine did not answer)", named.value)
            }
            (None, None) => "the engine's default (runc: the host's kernel)".to_owned(),
        };
        Audit {
            cfg,
            plan,
            grants,
            mode: if cfg.session { "session" } else { "call" },
            cpus: cfg.nano_cpus as f64 / 1e9,
            tmp: ByteSize(cfg.tmp).to_string(),
            hardening: hardening(plan.gvisor),
            address: engine.shown_address(),
            runtime,
        }
    }

    /// The audit's settings, as JSON.
    fn settings(&self) -> serde_json::Map<String, serde_json::Value> {
        let (cfg, plan) = (self.cfg, self.plan);
        let settings = json!({
            "engine": self.address,
            "runtime": self.runtime,
            "pool": cfg.pool.as_ref().map(|p| p.value),
            "image": cfg.image.value,
            "images": cfg.images,
            "transfer": cfg.transfer.map(|b| warden_core::ByteSize(b).to_string()),
            "argv": cfg.argv.value,
            "workdir": cfg.workdir.as_ref().map(|w| w.value.clone()),
            "mode": self.mode,
            "user": plan.user.to_string(),
            "pids": cfg.pids,
            "cpus": self.cpus,
            "tmp": self.tmp,
            "hardening": self.hardening,
            "roots": roots(plan, self.grants),
        });
        settings.as_object().cloned().unwrap_or_default()
    }

    /// The audit's lines: the executor, its engine and runtime, a container, the pool, the
    /// roots.
    fn lines(&self, engine: &Engine) -> Vec<ReportLine> {
        let (cfg, plan, mode) = (self.cfg, self.plan, self.mode);
        let place = engine
            .address()
            .map_or_else(ToString::to_string, EngineAddress::describe);
        let pids = if plan.gvisor {
            format!(
                "{} (a cgroup of {} host pids under gVisor)",
                cfg.pids,
                plan.pids_limit()
            )
        } else {
            cfg.pids.to_string()
        };
        let mut lines = vec![
            ReportLine {
                label: "executor",
                text: format!(
                    "docker {} {:?} (a container per {mode})",
                    cfg.image.value, cfg.argv.value
                ),
            },
            ReportLine {
                label: "engine",
                text: place,
            },
            ReportLine {
                label: "runtime",
                text: self.runtime.clone(),
            },
            ReportLine {
                label: "container",
                text: format!(
                    "user {}, pids {pids}, cpus {}, /tmp {}; {}",
                    plan.user,
                    self.cpus,
                    self.tmp,
                    self.hardening.join(", ")
                ),
            },
        ];
        if !cfg.images.is_empty() {
            lines.push(ReportLine {
                label: "images",
                text: format!(
                    "a session's client may choose instead: {}",
                    cfg.images.join(", ")
                ),
            });
        }
        if let Some(n) = cfg.pool.as_ref().map(|p| p.value) {
            let each = if cfg.session {
                "each for one session"
            } else {
                "each for one call and removed after"
            };
            lines.push(ReportLine {
                label: "pool",
                text: format!("{n} containers kept started and waiting, {each}"),
            });
        }
        lines.extend(warden_command::transfer_line(cfg.transfer, cfg.session));
        lines.extend(roots(plan, self.grants).into_iter().map(|text| ReportLine {
            label: "root",
            text,
        }));
        lines
    }
}

/// The hardening of every container, for the audit.
fn hardening(gvisor: bool) -> Vec<&'static str> {
    const HARDENING: [&str; 9] = [
        "read-only root filesystem",
        "all capabilities dropped",
        "no-new-privileges",
        "seccomp: the engine's default profile, sockets only unix, TCP and UDP",
        "non-root user",
        "no log driver",
        "init reaps orphans",
        "only granted folders mounted",
        "only granted env",
    ];
    // Under gVisor what runs inside meets gVisor's kernel: the profile holds gVisor itself.
    let mut hardening = HARDENING.to_vec();
    if gvisor && let Some(seccomp) = hardening.iter_mut().find(|h| h.starts_with("seccomp")) {
        *seccomp = "seccomp: the engine's default profile on gVisor's own processes; \
            inside, gVisor's kernel, whose sockets are unix, TCP and UDP (netlink route and \
            uevent answered by gVisor itself)";
    }
    hardening
}

/// What the audit flags: an unrestricted network, an image by tag, an engine elsewhere.
fn flags(cfg: &DockerConfig, engine: &Engine, network: Reach) -> Vec<String> {
    let mut flags = Vec::new();
    if network == Reach::Unrestricted {
        flags.push(
            "unrestricted network: the container may reach any host (Docker cannot enforce an \
             allowlist)"
                .into(),
        );
    }
    if !cfg.image.value.contains("@sha256:") {
        flags.push(format!(
            "image by tag ({}), not by digest: whatever is tagged so runs",
            cfg.image.value
        ));
    }
    if engine.place() == Place::Remote {
        let address = engine.shown_address();
        flags.push(format!(
            "engine elsewhere ({address}): whoever holds its API is root there; no CPU or \
             memory figures from this machine"
        ));
    }
    flags
}

/// The description of a tool whose policy writes none.
fn describe(template: &Template, session: bool, cfg: &DockerConfig) -> String {
    let fresh = if session { "" } else { "fresh " };
    template.describe(
        session,
        &format!("in a {fresh}sandboxed container ({})", cfg.image.value),
    )
}
