//! The wasm backend: turns a policy into tools, one per exported function.

use crate::artifacts::{ArtifactError, Artifacts, Binary};
use crate::config::WasmConfig;
use crate::docs::WitDocs;
use crate::engine::{self, Flavor, MAX_MEMORY, Workload};
use crate::exports::{Export, Exports, exports};
use crate::sandbox::CallState;
use crate::schema::{Unsupported, params_schema, type_schema};
use crate::shared::Shared;
use crate::tool::{CommandTool, FunctionTool};
use crate::view::Views;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use warden_core::{
    Backend, Capabilities, ExecutorKind, Loaded, LoadedTool, NetHosts, Paths, Policy, PolicyError,
    Reach, Report, ReportLine, Support, ToolSpec,
};
use warden_net::Egress;
use warden_tx::{Overlays, Store};
use wasmtime::Engine;
use wasmtime::component::Linker;

/// Called before a component is compiled (a slow step worth telling a person about).
pub type CompileHook = Arc<dyn Fn(&Path) + Send + Sync>;

/// What makes two policies' linkers the same: their engine (its flavor and workload), the
/// kind of binary, whether lookups are refused (no `dns` grant) and whether opened roots are
/// observed.
type LinkerKey = (Flavor, Workload, Binary, bool, bool);

/// Loads `kind = "wasm"` policies.
pub struct WasmBackend {
    artifacts: Artifacts,
    on_compile: CompileHook,
    egress: Egress,
    workload: Workload,
    accounting: bool,
    /// Where calls' views are kept and how they are mounted, when calls are transactions.
    views: Option<(Arc<Store>, Arc<dyn Overlays>)>,
    /// The linkers made so far: WASI's hundreds of functions are linked once per kind, not
    /// once per policy.
    linkers: Mutex<HashMap<LinkerKey, Arc<Linker<CallState>>>>,
}

impl WasmBackend {
    pub fn new(artifacts: Artifacts) -> Self {
        Self {
            artifacts,
            on_compile: Arc::new(|_| {}),
            egress: Egress::default(),
            workload: Workload::default(),
            accounting: true,
            views: None,
            linkers: Mutex::default(),
        }
    }

    /// Makes each call a transaction over its read-write roots, its views and records in
    /// `store`, mounted by `overlays` (see `crate::view`): a call warden ends (a trap, a limit,
    /// its time) leaves nothing behind, one that returns commits, undoably.
    pub fn transactions(mut self, store: Arc<Store>, overlays: Arc<dyn Overlays>) -> Self {
        self.views = Some((store, overlays));
        self
    }

    /// For the benchmark that prices usage accounting only: calls measure no CPU or memory
    /// peak and report no roots opened. Not a knob for users: the audit needs the figures.
    #[doc(hidden)]
    pub fn without_accounting(mut self) -> Self {
        self.accounting = false;
        self
    }

    /// Sizes the engine for `workload` [default: a server's].
    pub fn workload(mut self, workload: Workload) -> Self {
        self.workload = workload;
        self
    }

    /// Reaches out for tools as `egress` says (resolver, upstream roots).
    pub fn egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// Reports compiles through `hook`.
    pub fn on_compile(mut self, hook: CompileHook) -> Self {
        self.on_compile = hook;
        self
    }

    pub fn artifacts(&self) -> &Artifacts {
        &self.artifacts
    }

    /// The component file to run and its sha256, checked against the pin.
    fn resolve(
        &self,
        policy: &Policy,
        cfg: &WasmConfig,
    ) -> Result<(std::path::PathBuf, String), PolicyError> {
        let err = |line, msg: String| PolicyError::new(&policy.path, Some(line), msg);
        let source = &cfg.component.value;
        let artifact = |e: ArtifactError| err(cfg.component.line, e.to_string());
        match &cfg.sha256 {
            Some(pin) => {
                let stored = self.artifacts.stored(&pin.value);
                if source.is_file() {
                    let actual = self.artifacts.sha256_stamped(source).map_err(artifact)?;
                    if actual != pin.value {
                        return Err(err(
                            pin.line,
                            format!(
                                "the component {} has changed since it was pinned (pinned \
                                 {}…, now {}…); if the rebuild is intended, run `warden pin`",
                                source.display(),
                                &pin.value[..12],
                                &actual[..12]
                            ),
                        ));
                    }
                    if !stored.is_file() {
                        self.artifacts.put(source).map_err(artifact)?;
                    }
                    Ok((stored, actual))
                } else if stored.is_file() {
                    Ok((stored, pin.value.clone()))
                } else {
                    Err(err(
                        cfg.component.line,
                        format!(
                            "the component {} does not exist, and its pinned copy is not in the \
                             store; build it (for the examples: `warden demo` or `cargo build \
                             --release` in guest-sdk/)",
                            source.display()
                        ),
                    ))
                }
            }
            None => {
                if !source.is_file() {
                    return Err(err(
                        cfg.component.line,
                        format!(
                            "the component {} does not exist; build it, or fix the path \
                             (relative to the policy file)",
                            source.display()
                        ),
                    ));
                }
                let sha = self.artifacts.sha256_stamped(source).map_err(artifact)?;
                Ok((source.clone(), sha))
            }
        }
    }

    /// The linker of a policy's calls: WASI 0.2 and its HTTP, `exit` for a WASI 0.1 module,
    /// lookups refused without the `dns` grant, and the filesystem observed for the roots a
    /// call opens when there are roots and usage is accounted. Made once for every policy
    /// that needs the same.
    fn linker(
        &self,
        (engine, flavor): (&Engine, Flavor),
        policy: &Policy,
        binary: Binary,
    ) -> wasmtime::Result<Arc<Linker<CallState>>> {
        let refused = !policy.grants.net.dns;
        // Without roots there is nothing to observe: the plain functions stay.
        let observed = self.accounting && !policy.grants.fs.is_empty();
        let key = (flavor, self.workload, binary, refused, observed);
        let mut linkers = self.linkers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(linker) = linkers.get(&key) {
            return Ok(linker.clone());
        }
        let mut linker: Linker<CallState> = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        if binary == Binary::Module {
            crate::wasip1::link_exit(&mut linker)?;
        }
        if refused {
            crate::net::refuse_lookups(&mut linker)?;
        }
        if observed {
            crate::roots::observe(&mut linker)?;
        }
        let linker = Arc::new(linker);
        linkers.insert(key, linker.clone());
        Ok(linker)
    }
}

impl ExecutorKind for WasmBackend {
    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            paths: Paths::Guest,
            env: Support::Honoured,
            caller_env: Support::Refused(
                "a wasm tool's sandbox is made with its environment, often ahead of its call; \
                 a client's variables are for command tools (docker, host) in this version",
            ),
            net: NetHosts::Enforced,
            dns: Support::Honoured,
            credentials: Support::Honoured,
            fuel: Support::Honoured,
            response: Support::Honoured,
            memory_ceiling: Some(MAX_MEMORY),
            sessions: false,
            programs: false,
            roots_observed: true,
            changes: match self.views {
                Some(_) => Support::Honoured,
                None => Support::Refused(warden_tx::settle::NO_STORE),
            },
        }
    }
}

impl Backend for WasmBackend {
    /// As a load of the same policy file over the same component recorded them: a component
    /// is loaded to learn what it exports (~1 ms each), which a call of another tool need
    /// not pay.
    fn names(&self, policy: &Policy) -> Option<Vec<String>> {
        let cfg = WasmConfig::from_policy(policy).ok()?;
        let (_, sha) = self.resolve(policy, &cfg).ok()?;
        self.artifacts.names(&names_key(policy, &sha))
    }

    fn load(&self, policy: &Arc<Policy>) -> Result<Loaded, PolicyError> {
        let err = |line: Option<usize>, msg: String| PolicyError::new(&policy.path, line, msg);
        let cfg = &WasmConfig::from_policy(policy)?;
        let fuel = std::iter::once(&policy.limits)
            .chain(policy.functions.values().map(|f| &f.limits))
            .any(|l| l.fuel.is_some());
        let flavor = if fuel { Flavor::Fuel } else { Flavor::Plain };
        let engine = engine::engine(flavor, self.workload).map_err(|e| err(None, e.to_string()))?;
        let (wasm, sha) = self.resolve(policy, cfg)?;
        let binary = Binary::of(&wasm).map_err(|e| err(Some(cfg.component.line), e.to_string()))?;
        if binary == Binary::Module {
            refuse_net(policy)?;
        }
        let component = self
            .artifacts
            .compiled(engine, &sha, &wasm, binary, &*self.on_compile)
            .map_err(|e| err(Some(cfg.component.line), e.to_string()))?;
        let linker = self
            .linker((engine, flavor), policy, binary)
            .map_err(|e| err(None, format!("cannot link WASI: {e:#}")))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            err(
                Some(cfg.component.line),
                format!(
                    "the component needs imports warden does not provide ({e:#}); warden \
                     offers WASI 0.2 (cli, clocks, filesystem, random, io, sockets, http)"
                ),
            )
        })?;
        let docs = match &cfg.wit {
            Some(dir) => WitDocs::load(&dir.value).map_err(|e| {
                err(
                    Some(dir.line),
                    format!("cannot read the WIT in {}: {e}", dir.value.display()),
                )
            })?,
            None => WitDocs::default(),
        };
        let shared = Arc::new(Shared {
            engine: engine.clone(),
            pre,
            grants: policy.grants.clone(),
            net: Arc::new(policy.grants.net.clone()),
            egress: self.egress.clone(),
            accounting: self.accounting,
            views: self
                .views
                .clone()
                .and_then(|(store, overlays)| Views::of(&policy.grants, store, overlays)),
        });
        let tools = tools(cfg, &shared, exports(engine, &component), &docs, policy)?;
        if tools.is_empty() {
            return Err(err(
                Some(cfg.component.line),
                "the component exports no function warden can call".into(),
            ));
        }
        let imports: Vec<String> = component
            .component_type()
            .imports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let names: Vec<&str> = tools.iter().map(|t| t.spec.name.as_str()).collect();
        self.artifacts
            .record_names(&names_key(policy, &sha), &names);
        Ok(Loaded {
            tools,
            report: report(cfg, &sha, binary, &imports, policy),
        })
    }
}

/// What the names a load of `policy` over the component of sha256 `sha` finds are kept
/// under: the policy's text as it was read, the component, and this build of warden (whose
/// rules for what a component offers may change).
fn names_key(policy: &Policy, sha: &str) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for part in [
        policy.executor.text().as_bytes(),
        sha.as_bytes(),
        env!("CARGO_PKG_VERSION").as_bytes(),
    ] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hex::encode(hash.finalize())
}

/// The tools of a component: its command, named by the policy or after its file, and each
/// exported function that JSON can call (one that cannot is left out, with a warning).
fn tools(
    cfg: &WasmConfig,
    shared: &Arc<Shared>,
    found: Exports,
    docs: &WitDocs,
    policy: &Policy,
) -> Result<Vec<LoadedTool>, PolicyError> {
    let mut tools = Vec::new();
    if let Some(run) = found.command {
        let name = cfg.name.clone().or_else(|| {
            cfg.component
                .value
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        });
        let name = name.ok_or_else(|| {
            PolicyError::new(&policy.path, None, "a command component needs `name`")
        })?;
        tools.push(LoadedTool {
            function: name.clone(),
            spec: ToolSpec {
                description: cfg.description.clone().unwrap_or_else(|| {
                    format!(
                        "Runs the command `{name}` with `args` and `stdin`; answers its stdout."
                    )
                }),
                name: name.clone(),
                input_schema: CommandTool::schema(),
                output_schema: None,
            },
            executor: Arc::new(CommandTool::new(shared.clone(), run, name)),
        });
    }
    for export in found.functions {
        match function_spec(&export, docs) {
            Ok(spec) => tools.push(LoadedTool {
                function: export.tool_name(),
                spec,
                executor: Arc::new(FunctionTool::new(shared.clone(), export)),
            }),
            Err(why) => tracing::warn!(
                policy = %policy.path.display(),
                "function `{}` is not offered as a tool: {why}",
                export.tool_name()
            ),
        }
    }
    Ok(tools)
}

/// Refuses a network grant to a WASI 0.1 module, at the grant's line: WASI 0.1 has no sockets,
/// so the grant could only mislead a reader of the policy or the audit. Whether the tool is a
/// module is read from the pinned bytes themselves, not from anything a policy says.
fn refuse_net(policy: &Policy) -> Result<(), PolicyError> {
    let net = &policy.grants.net;
    if net.is_empty() && net.credentials.is_empty() {
        return Ok(());
    }
    let lines = &policy.grant_lines;
    let line = lines
        .net
        .first()
        .or(lines.net_credentials.first())
        .copied()
        .or(lines.dns);
    Err(PolicyError::new(
        &policy.path,
        line,
        "network grants cannot be honoured for a WASI 0.1 module: WASI 0.1 has no sockets, \
         so it could reach no host; remove `net`, `dns` and `net_credentials` from [grants] \
         (a tool that needs the network is built as a WASI 0.2 component)",
    ))
}

/// The audit's flag on a policy whose component is not pinned by its sha256.
pub const UNPINNED: &str = "unpinned: any rebuild of the component runs unreviewed (`warden pin`)";

/// The component that runs and what it imports against what its policy grants, for the audit.
fn report(
    cfg: &WasmConfig,
    sha: &str,
    binary: Binary,
    imports: &[String],
    policy: &Policy,
) -> Report {
    let component = cfg.component.value.display().to_string();
    let pin = match &cfg.sha256 {
        Some(pin) => format!("sha256 {}…", &pin.value[..12]),
        None => format!("UNPINNED, now sha256 {}…", &sha[..12.min(sha.len())]),
    };
    let form = match binary {
        Binary::Component => "",
        Binary::Module => ", a WASI 0.1 module run through the preview-1 adapter",
    };
    let mut flags = Vec::new();
    if cfg.sha256.is_none() {
        flags.push(UNPINNED.into());
    }
    let imports_http = imports
        .iter()
        .any(|i| i.starts_with("wasi:http/outgoing-handler"));
    if imports_http && policy.grants.net.hosts.is_empty() {
        flags.push(
            "imports wasi:http but the policy grants no hosts: every request will be refused"
                .into(),
        );
    }
    let mut packages: Vec<&str> = imports
        .iter()
        .map(|i| i.split('/').next().unwrap_or(i))
        .collect();
    packages.sort_unstable();
    packages.dedup();
    let settings = json!({
        "component": component,
        "sha256": cfg.sha256.as_ref().map(|s| s.value.clone()),
        "form": match binary {
            Binary::Component => "component",
            Binary::Module => "wasi-0.1-module",
        },
    });
    Report {
        settings: settings.as_object().cloned().unwrap_or_default(),
        lines: vec![
            ReportLine {
                label: "executor",
                text: format!("wasm {component} ({pin}{form})"),
            },
            ReportLine {
                label: "imports",
                text: if packages.is_empty() {
                    "nothing".to_owned()
                } else {
                    packages.join(", ")
                },
            },
        ],
        network: Reach::Grants,
        flags,
    }
}

fn function_spec(export: &Export, docs: &WitDocs) -> Result<ToolSpec, Unsupported> {
    let doc = docs.get(export.interface.as_deref(), &export.function);
    let param_doc = |name: &str| doc.and_then(|d| d.params.get(name).cloned());
    let input_schema = params_schema(&export.params, &param_doc)?;
    let output_schema = match &export.result {
        Some(wasmtime::component::Type::Result(r)) => match r.ok() {
            Some(t) => Some(type_schema(&t)?),
            None => None,
        },
        Some(t) => Some(type_schema(t)?),
        None => None,
    };
    let description = doc
        .and_then(|d| d.description.clone())
        .unwrap_or_else(|| generated_description(export));
    Ok(ToolSpec {
        name: export.tool_name(),
        description,
        input_schema,
        output_schema,
    })
}

fn generated_description(export: &Export) -> String {
    let params: Vec<&str> = export.params.iter().map(|(n, _)| n.as_str()).collect();
    let owner = match &export.interface {
        Some(i) => format!(" of the `{i}` interface"),
        None => String::new(),
    };
    format!(
        "Calls the function `{}`{owner} with {}.",
        export.function,
        if params.is_empty() {
            "no arguments".to_owned()
        } else {
            format!("arguments: {}", params.join(", "))
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A linker is shared by the policies that link alike, and only by them: another engine,
    /// binary, lookup switch or roots to observe each get their own.
    #[test]
    fn policies_that_link_alike_share_one_linker_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let backend = WasmBackend::new(Artifacts {
            store: dir.path().join("store"),
            cache: dir.path().join("cache"),
        });
        let policy = |grants: &str| {
            let text = format!(
                "[executor]\nkind = \"wasm\"\ncomponent = \"x.wasm\"\n[grants]\n{grants}\n"
            );
            Policy::parse(&dir.path().join("p.toml"), &text, &[&backend]).unwrap()
        };
        let linker = |flavor, grants: &str, binary| {
            let engine = engine::engine(flavor, Workload::default()).unwrap();
            backend
                .linker((engine, flavor), &policy(grants), binary)
                .unwrap()
        };
        let plain = linker(Flavor::Plain, "", Binary::Component);
        let same = linker(Flavor::Plain, "", Binary::Component);
        assert!(Arc::ptr_eq(&plain, &same));
        let roots = r#"fs = [{ host = "data", guest = "/data", access = "read-only" }]"#;
        let others = [
            linker(Flavor::Fuel, "", Binary::Component),
            linker(Flavor::Plain, "", Binary::Module),
            linker(Flavor::Plain, "dns = true", Binary::Component),
            linker(Flavor::Plain, roots, Binary::Component),
        ];
        for (i, other) in others.iter().enumerate() {
            assert!(!Arc::ptr_eq(&plain, other), "{i}");
            for later in &others[i + 1..] {
                assert!(!Arc::ptr_eq(other, later), "{i}");
            }
        }
    }
}
