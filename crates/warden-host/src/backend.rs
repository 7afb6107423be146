//! The host backend: turns a `kind = "host"` policy into its one tool.

use crate::config::{HostConfig, Isolation};
use crate::forks::Forker;
use crate::program::Helper;
use crate::tool::{CallSetup, HostTool};
use serde_json::json;
use std::sync::Arc;
use warden_command::{Template, session_shell};
use warden_core::{
    Backend, BoxFuture, ByteSize, Capabilities, ExecutorKind, HumanDuration, Loaded, LoadedTool,
    Paths, Policy, PolicyError, Probe, ProbeError, Reach, Report, ReportLine, Support, ToolSpec,
};
use warden_net::{Egress, Gate};
use warden_tx::Store;

/// How many sandboxes each host tool keeps prepared ahead of its calls by default: one is
/// enough for calls one after another (it is made up again while a call runs); a batch
/// larger than that starts the rest on the calls' paths, as without preparation.
pub const DEFAULT_PREPARED: usize = 1;

/// Loads `kind = "host"` policies; every tool starts its calls through one helper.
#[derive(Debug, Clone)]
pub struct HostBackend {
    /// The fork server, shared by this backend's clones.
    forker: Arc<Forker>,
    egress: Egress,
    prepared: usize,
    /// Where calls' views of their writable roots are made; `None`: written in place.
    views: Option<Arc<Store>>,
}

impl HostBackend {
    /// Starts every call through `helper`.
    pub fn new(helper: Helper) -> Self {
        Self {
            forker: Arc::new(Forker::new(None, helper)),
            egress: Egress::default(),
            prepared: DEFAULT_PREPARED,
            views: None,
        }
    }

    /// Starts calls through the helper program `name` beside this program when it is of this
    /// build ([`Helper::beside_this_program`], asked once, when the first sandbox or view
    /// starts), else through the helper given to [`HostBackend::new`].
    pub fn preferring_beside(mut self, name: &str) -> Self {
        self.forker = Arc::new(self.forker.preferring_beside(name));
        self
    }

    /// What forks the helper of every call.
    pub(crate) fn forker(&self) -> &Arc<Forker> {
        &self.forker
    }

    /// Keeps `depth` sandboxes prepared ahead per host tool (not in session mode), each for
    /// one call; 0 sets every call's sandbox up on the call's path. Idle prepared sandboxes
    /// cost two processes and a set of namespaces each.
    pub fn prepared(mut self, depth: usize) -> Self {
        self.prepared = depth;
        self
    }

    /// Makes each call a transaction over its writable roots, its views and records in `store`
    /// (see `warden_tx`): a call warden ends leaves nothing behind, and one that ends on its own
    /// commits, undoably. `exec`'s programs and a session's commands are too.
    pub fn transactions(mut self, store: Arc<Store>) -> Self {
        self.views = Some(store);
        self
    }

    /// Mounts the views of calls that run in warden's own process (wasm tools), through this
    /// backend's fork server (see `crate::overlays`), which is looked for and started at the
    /// first view, not here: a process that mounts none pays nothing.
    pub fn overlays(&self) -> Arc<dyn warden_tx::Overlays> {
        Arc::new(crate::overlays::ForkedOverlays {
            backend: self.clone(),
        })
    }

    /// Why this backend cannot hold the changes of `cfg`'s tool's calls for a reviewer, if it
    /// cannot: a session's commands are committed as each ends, and every call without a
    /// store writes in place.
    fn in_place(&self, cfg: &HostConfig) -> Option<&'static str> {
        if cfg.session {
            Some(warden_tx::settle::SESSION_UNREVIEWED)
        } else if self.views.is_none() {
            Some(warden_tx::settle::NO_STORE)
        } else {
            None
        }
    }

    /// Reaches out for tools' gates as `egress` says (resolver, upstream roots).
    pub fn egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// The tool of one host policy, keeping `prepared` sandboxes ahead (the audit probes one
    /// that keeps none).
    fn tool(&self, policy: &Policy, prepared: usize) -> Result<HostTool, PolicyError> {
        let cfg = HostConfig::from_policy(policy)?;
        let err = |m: String| PolicyError::new(&policy.path, Some(cfg.argv.line), m);
        let template = Template::parse(&cfg.argv.value).map_err(|e| err(e.to_string()))?;
        refuse_misplaced_roots(policy)?;
        refuse_closed_roots(policy, &cfg)?;
        let shell = session_shell(&policy.executor, &cfg.argv, &template, cfg.session)?;
        // With net grants and no opt-in to every host, the namespace gets warden's gate.
        let gate = cfg
            .network
            .value
            .gated(&policy.grants)
            .then(|| Gate::new(Arc::new(policy.grants.net.clone()), self.egress.clone()));
        Ok(HostTool::new(
            self.forker().clone(),
            cfg,
            template,
            policy.grants.clone(),
            CallSetup {
                shell,
                gate,
                prepared,
                views: self.views.clone(),
            },
        ))
    }
}

/// Refuses a root the sandbox cannot show at its guest path ([`crate::layout`]).
fn refuse_misplaced_roots(policy: &Policy) -> Result<(), PolicyError> {
    let trust = !policy.grants.net.credentials.is_empty();
    match crate::layout::misplaced(&policy.grants.fs, trust) {
        None => Ok(()),
        Some((index, message)) => Err(PolicyError::new(
            &policy.path,
            policy.grant_lines.fs.get(index).copied(),
            message,
        )),
    }
}

/// Refuses a root its command's user cannot enter and list: `cd` into it would fail, a
/// half-working sandbox. The folders above it are no matter (the sandbox mounts the root
/// where it is seen). The command's user is the policy's when warden is root, else warden's
/// own (the only one an unprivileged user namespace maps).
fn refuse_closed_roots(policy: &Policy, cfg: &HostConfig) -> Result<(), PolicyError> {
    use std::os::unix::fs::MetadataExt;
    let (uid, gid) = if nix::unistd::Uid::effective().is_root() {
        (cfg.user.uid, cfg.user.gid)
    } else {
        (
            nix::unistd::Uid::effective().as_raw(),
            nix::unistd::Gid::effective().as_raw(),
        )
    };
    for (index, grant) in policy.grants.fs.iter().enumerate() {
        let Ok(meta) = std::fs::metadata(&grant.host) else {
            continue;
        };
        let mode = meta.mode();
        let bits = if meta.uid() == uid {
            mode >> 6
        } else if meta.gid() == gid {
            mode >> 3
        } else {
            mode
        };
        if bits & 0o5 != 0o5 {
            let folder = grant.host.display();
            return Err(PolicyError::new(
                &policy.path,
                policy.grant_lines.fs.get(index).copied(),
                format!(
                    "the root {folder} (owner {}, mode {:o}) is not one the command's user \
                     {uid}:{gid} may enter and list: let it in (`chmod o+rx {folder}`), grant \
                     another folder, or set `user` to one that may",
                    meta.uid(),
                    mode & 0o7777,
                ),
            ));
        }
    }
    Ok(())
}

impl ExecutorKind for HostBackend {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn capabilities(&self) -> Capabilities {
        warden_command::capabilities(Paths::Host, Support::Honoured)
    }
}

impl Backend for HostBackend {
    fn probe(&self, policy: &Arc<Policy>) -> BoxFuture<'_, Option<Result<Probe, ProbeError>>> {
        let tool = self.tool(policy, 0);
        Box::pin(async move {
            let tool = match tool {
                Ok(t) => t,
                Err(e) => return Some(Err(e.into())),
            };
            Some(
                tool.probe()
                    .await
                    .map(|p| Probe {
                        in_force: p.describe(),
                        missing: p.missing,
                    })
                    .map_err(ProbeError::Call),
            )
        })
    }

    fn load(&self, policy: &Arc<Policy>) -> Result<Loaded, PolicyError> {
        let tool = self.tool(policy, self.prepared)?;
        let (cfg, template) = (tool.config(), tool.template());
        warden_tx::settle::refuse_review_in_place(policy, self.in_place(cfg))?;
        let limits = policy.limits_for(&cfg.name);
        let roots: Vec<String> = policy
            .grants
            .fs
            .iter()
            .map(|g| format!("{} ({})", g.guest, g.access.as_str()))
            .collect();
        let description = cfg.description.clone().unwrap_or_else(|| {
            let files = if roots.is_empty() {
                "no folders".to_owned()
            } else {
                roots.join(", ")
            };
            template.describe(
                cfg.session,
                &format!(
                    "as a confined host process that sees only {files} (starting in {})",
                    cfg.start_dir(&policy.grants).display()
                ),
            )
        });
        let spec = ToolSpec {
            name: cfg.name.clone(),
            description,
            input_schema: template.schema(limits.timeout, cfg.session),
            output_schema: None,
        };
        let report = report(cfg, policy);
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

/// What every call's process tree gets, for the audit.
fn report(cfg: &HostConfig, policy: &Policy) -> Report {
    let workdir = cfg.start_dir(&policy.grants).display().to_string();
    let cpu_time = cfg
        .cpu_time
        .map_or("the timeout".to_owned(), |c| HumanDuration(c).to_string());
    let (file_size, tmp) = (ByteSize(cfg.file_size), ByteSize(cfg.tmp));
    let isolation = cfg.isolation.value.as_str();
    let mut flags = Vec::new();
    let network = cfg.network.value.reach(&policy.grants);
    if network == Reach::Unrestricted {
        flags.push(
            "unrestricted network: the process shares the host's network (no allowlist)".into(),
        );
    }
    if cfg.isolation.value == Isolation::BestEffort {
        flags.push(
            "isolation = \"best-effort\": runs even where this machine cannot confine it".into(),
        );
    }
    let settings = json!({
        "argv": cfg.argv.value,
        "workdir": workdir,
        "user": cfg.user.to_string(),
        "processes": cfg.processes,
        "cpu_time": cpu_time,
        "open_files": cfg.open_files,
        "file_size": file_size.to_string(),
        "tmp": tmp.to_string(),
        "isolation": isolation,
        "session": cfg.session,
        "transfer": cfg.transfer.map(|b| ByteSize(b).to_string()),
    });
    let transfer = warden_command::transfer_line(cfg.transfer, cfg.session);
    Report {
        settings: settings.as_object().cloned().unwrap_or_default(),
        lines: vec![
            ReportLine {
                label: "executor",
                text: format!(
                    "host {:?} as {} in {workdir} (isolation {isolation}; {})",
                    cfg.argv.value,
                    cfg.user,
                    if cfg.session {
                        "one shell per session"
                    } else {
                        "one process tree per call"
                    }
                ),
            },
            ReportLine {
                label: "rlimits",
                text: format!(
                    "processes {}, cpu {cpu_time}, open files {}, file size {file_size}; /tmp \
                     {tmp}",
                    cfg.processes, cfg.open_files
                ),
            },
        ]
        .into_iter()
        .chain(transfer)
        .collect(),
        network,
        flags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_session_needs_a_shell_running_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let backend = HostBackend::new(Helper {
            program: PathBuf::from("/nonexistent"),
            args: Vec::new(),
        });
        let head = "[executor]\nkind = \"host\"\nname = \"t\"\nsession = true\n";
        let load = |argv: &str| {
            let text = format!("{head}argv = {argv}\n");
            let policy = Policy::parse(&dir.path().join("t.toml"), &text, &[&backend])?;
            backend.load(&Arc::new(policy)).map(|_| ())
        };
        let e = load("[\"/bin/echo\", \"{text}\"]").unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("argv must be a shell"), "{e}");
        assert!(load("[\"/bin/sh\", \"-c\", \"{command}\"]").is_ok());
    }
}
