//! Policy files: one TOML file per tool (or per component), deny by default.

use crate::docker::{DockerConfig, DockerSpec, NetworkMode};
use crate::grants::{Grants, GrantsSpec};
use crate::host::{HostConfig, HostSpec};
use crate::limits::LimitsSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A policy that cannot be honoured: names the file, and the line when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

impl PolicyError {
    pub fn new(file: &Path, line: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// A value with the line of the policy file it was written on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub line: usize,
}

/// The `[executor]` table as written; checked into an [`ExecutorConfig`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutorSpec {
    kind: Spanned<String>,
    component: Option<Spanned<String>>,
    sha256: Option<Spanned<String>>,
    wit: Option<Spanned<String>>,
    name: Option<String>,
    description: Option<String>,
    // kind = "docker" (crate::docker checks them)
    image: Option<Spanned<String>>,
    argv: Option<Spanned<Vec<String>>>,
    workdir: Option<Spanned<String>>,
    session: Option<bool>,
    user: Option<Spanned<String>>,
    network: Option<Spanned<String>>,
    pids: Option<Spanned<i64>>,
    cpus: Option<Spanned<crate::docker::Number>>,
    tmp: Option<Spanned<crate::units::ByteSize>>,
    // kind = "host" (crate::host checks them)
    processes: Option<Spanned<i64>>,
    cpu_time: Option<Spanned<crate::units::HumanDuration>>,
    open_files: Option<Spanned<i64>>,
    file_size: Option<Spanned<crate::units::ByteSize>>,
    isolation: Option<Spanned<String>>,
}

impl ExecutorSpec {
    /// Each kind-specific field written, with its span and the kinds it belongs to.
    fn kind_fields(
        &self,
    ) -> Vec<(
        &'static str,
        std::ops::Range<usize>,
        &'static [&'static str],
    )> {
        const WASM: &[&str] = &["wasm"];
        const DOCKER: &[&str] = &["docker"];
        const HOST: &[&str] = &["host"];
        const COMMAND: &[&str] = &["docker", "host"];
        fn at<T>(f: &Option<Spanned<T>>) -> Option<std::ops::Range<usize>> {
            f.as_ref().map(Spanned::span)
        }
        let fields = [
            ("component", at(&self.component), WASM),
            ("sha256", at(&self.sha256), WASM),
            ("wit", at(&self.wit), WASM),
            ("image", at(&self.image), DOCKER),
            ("argv", at(&self.argv), COMMAND),
            ("workdir", at(&self.workdir), COMMAND),
            ("session", self.session.map(|_| 0..0), DOCKER),
            ("user", at(&self.user), COMMAND),
            ("network", at(&self.network), COMMAND),
            ("pids", at(&self.pids), DOCKER),
            ("cpus", at(&self.cpus), DOCKER),
            ("tmp", at(&self.tmp), COMMAND),
            ("processes", at(&self.processes), HOST),
            ("cpu_time", at(&self.cpu_time), HOST),
            ("open_files", at(&self.open_files), HOST),
            ("file_size", at(&self.file_size), HOST),
            ("isolation", at(&self.isolation), HOST),
        ];
        fields
            .into_iter()
            .filter_map(|(name, span, kinds)| span.map(|s| (name, s, kinds)))
            .collect()
    }

    /// Splits off the docker fields.
    fn docker(&mut self) -> DockerSpec {
        DockerSpec {
            image: self.image.take(),
            argv: self.argv.take(),
            workdir: self.workdir.take(),
            session: self.session.take(),
            user: self.user.take(),
            network: self.network.take(),
            pids: self.pids.take(),
            cpus: self.cpus.take(),
            tmp: self.tmp.take(),
        }
    }

    /// Splits off the host fields.
    fn host(&mut self) -> HostSpec {
        HostSpec {
            argv: self.argv.take(),
            workdir: self.workdir.take(),
            user: self.user.take(),
            network: self.network.take(),
            tmp: self.tmp.take(),
            processes: self.processes.take(),
            cpu_time: self.cpu_time.take(),
            open_files: self.open_files.take(),
            file_size: self.file_size.take(),
            isolation: self.isolation.take(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewSpec {
    #[serde(default)]
    required: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionSpec {
    #[serde(default)]
    limits: LimitsSpec,
    review: Option<ReviewSpec>,
    idempotent: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    idempotent: bool,
    executor: ExecutorSpec,
    #[serde(default)]
    grants: GrantsSpec,
    #[serde(default)]
    limits: LimitsSpec,
    #[serde(default)]
    review: ReviewSpec,
    #[serde(default)]
    functions: BTreeMap<String, Spanned<FunctionSpec>>,
}

/// Which sandbox runs the tool, and what it needs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorConfig {
    Wasm(WasmConfig),
    Docker(DockerConfig),
    Host(HostConfig),
}

impl ExecutorConfig {
    /// The `kind` name as written in policies.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Wasm(_) => "wasm",
            Self::Docker(_) => "docker",
            Self::Host(_) => "host",
        }
    }
}

/// A WebAssembly component tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmConfig {
    /// The component file, resolved against the policy's folder (it may not exist if pinned).
    pub component: Located<PathBuf>,
    /// The pinned sha256 (lowercase hex); `None` runs unpinned, flagged by the audit.
    pub sha256: Option<Located<String>>,
    /// A folder of WIT files whose doc comments describe the tools.
    pub wit: Option<Located<PathBuf>>,
    /// The tool name of a command component (`wasi:cli/run`).
    pub name: Option<String>,
    /// The description of a command component.
    pub description: Option<String>,
}

/// Per-function overrides of limits and review.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FunctionOverride {
    pub limits: LimitsSpec,
    pub review_required: Option<bool>,
    pub idempotent: Option<bool>,
    pub line: usize,
}

/// One policy file, checked: everything in it can be honoured on this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The file it came from.
    pub path: PathBuf,
    pub prefix: String,
    /// Calls may be retried after a transient failure (timeout, unavailable).
    pub idempotent: bool,
    pub executor: ExecutorConfig,
    pub grants: Grants,
    pub limits: LimitsSpec,
    pub review_required: bool,
    pub functions: BTreeMap<String, FunctionOverride>,
}

impl Policy {
    /// Reads and checks one policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PolicyError::new(path, None, format!("cannot read the policy: {e}")))?;
        Self::parse(path, &text)
    }

    /// Checks policy text as if read from `path` (relative paths resolve against its folder).
    pub fn parse(path: &Path, text: &str) -> Result<Policy, PolicyError> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let err = |span: Option<std::ops::Range<usize>>, message: String| {
            PolicyError::new(path, span.map(|s| line_of(s.start)), message)
        };
        let file: PolicyFile = toml::from_str(text).map_err(|e| {
            let message = e.message().to_owned();
            err(e.span(), message)
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let located = |s: Spanned<String>| Located {
            line: line_of(s.span().start),
            value: s.into_inner(),
        };

        let mut ex = file.executor;
        let kind_line = line_of(ex.kind.span().start);
        let kind = ex.kind.get_ref().clone();
        if ["wasm", "docker", "host"].contains(&kind.as_str()) {
            let foreign = ex
                .kind_fields()
                .into_iter()
                .find(|(_, _, k)| !k.contains(&kind.as_str()));
            if let Some((field, span, kinds)) = foreign {
                let line = if span.is_empty() {
                    kind_line
                } else {
                    line_of(span.start)
                };
                return Err(PolicyError::new(
                    path,
                    Some(line),
                    format!(
                        "`{field}` belongs to {} executors, not {kind}",
                        kinds.join(" and ")
                    ),
                ));
            }
        }
        let executor = match kind.as_str() {
            "docker" => ExecutorConfig::Docker(ex.docker().resolve(
                path,
                kind_line,
                ex.name,
                ex.description,
                &line_of,
            )?),
            "host" => ExecutorConfig::Host(ex.host().resolve(
                path,
                kind_line,
                ex.name,
                ex.description,
                &line_of,
            )?),
            "wasm" => {
                let component = ex.component.map(located).ok_or_else(|| {
                    err(
                        Some(ex.kind.span()),
                        "a wasm executor needs `component = \"path/to/tool.wasm\"`".into(),
                    )
                })?;
                let sha256 = ex.sha256.map(located);
                if let Some(pin) = &sha256 {
                    let ok = pin.value.len() == 64
                        && pin
                            .value
                            .chars()
                            .all(|c| matches!(c, '0'..='9' | 'a'..='f'));
                    if !ok {
                        return Err(PolicyError::new(
                            path,
                            Some(pin.line),
                            "sha256 must be 64 lowercase hex digits (`warden pin` writes it)",
                        ));
                    }
                }
                let wit = ex.wit.map(located).map(|w| Located {
                    value: lexical(&base.join(&w.value)),
                    line: w.line,
                });
                if let Some(w) = &wit
                    && !w.value.exists()
                {
                    return Err(PolicyError::new(
                        path,
                        Some(w.line),
                        format!("the WIT folder {} does not exist", w.value.display()),
                    ));
                }
                ExecutorConfig::Wasm(WasmConfig {
                    component: Located {
                        value: lexical(&base.join(&component.value)),
                        line: component.line,
                    },
                    sha256,
                    wit,
                    name: ex.name,
                    description: ex.description,
                })
            }
            other => {
                return Err(err(
                    Some(ex.kind.span()),
                    format!(
                        "unknown executor kind `{other}`; this warden knows: wasm, docker, host"
                    ),
                ));
            }
        };

        let host_paths = matches!(executor, ExecutorConfig::Host(_));
        let grants = file
            .grants
            .resolve(base, host_paths)
            .map_err(|e| err(e.span, e.message))?;
        match &executor {
            ExecutorConfig::Docker(cfg) => check_network(path, "docker", &cfg.network, &grants)?,
            ExecutorConfig::Host(cfg) => {
                check_network(path, "host", &cfg.network, &grants)?;
                cfg.check(path, &grants)?;
            }
            ExecutorConfig::Wasm(_) => {}
        }
        file.limits
            .validate()
            .map_err(|m| err(None, format!("[limits]: {m}")))?;
        let mut functions = BTreeMap::new();
        for (name, spec) in file.functions {
            let line = line_of(spec.span().start);
            let spec = spec.into_inner();
            spec.limits.validate().map_err(|m| {
                PolicyError::new(path, Some(line), format!("[functions.{name}]: {m}"))
            })?;
            functions.insert(
                name,
                FunctionOverride {
                    limits: spec.limits,
                    review_required: spec.review.map(|r| r.required),
                    idempotent: spec.idempotent,
                    line,
                },
            );
        }
        let cpu_bound = match &executor {
            ExecutorConfig::Wasm(_) => None,
            ExecutorConfig::Docker(_) => Some("`cpus` and the timeout"),
            ExecutorConfig::Host(_) => Some("`cpu_time` and the timeout"),
        };
        if let Some(bound) = cpu_bound
            && (file.limits.fuel.is_some() || functions.values().any(|f| f.limits.fuel.is_some()))
        {
            return Err(err(
                None,
                format!(
                    "fuel counts WebAssembly instructions: a {} tool cannot have it (its CPU is \
                     bounded by {bound})",
                    executor.kind()
                ),
            ));
        }
        if !file.prefix.is_empty() && !crate::spec::is_valid_tool_name(&file.prefix) {
            return Err(err(
                None,
                format!(
                    "prefix `{}` may only use letters, digits, _ and -",
                    file.prefix
                ),
            ));
        }
        Ok(Policy {
            path: path.to_owned(),
            prefix: file.prefix,
            idempotent: file.idempotent,
            executor,
            grants,
            limits: file.limits,
            review_required: file.review.required,
            functions,
        })
    }
}

/// Neither Docker nor a host process can be held to a host allowlist nor get credentials added
/// on the host side: a `net` grant would silently widen to every host. Only the explicit opt-in
/// allows it.
fn check_network(
    path: &Path,
    kind: &str,
    network: &Located<NetworkMode>,
    grants: &Grants,
) -> Result<(), PolicyError> {
    let net = &grants.net;
    if !net.credentials.is_empty() {
        return Err(PolicyError::new(
            path,
            None,
            format!(
                "net_credentials cannot be honoured for a {kind} tool: warden adds credentials \
                 on the host side of wasm tools' HTTP only"
            ),
        ));
    }
    if net.hosts.is_empty() || network.value == NetworkMode::Unrestricted {
        return Ok(());
    }
    Err(PolicyError::new(
        path,
        Some(network.line),
        format!(
            "a {kind} tool cannot be limited to the hosts in `net`: warden cannot enforce a host \
             allowlist for it. Remove the net grants (no network), or write \
             `network = \"unrestricted\"` under [executor] to give it every host (the audit \
             flags it)"
        ),
    ))
}

/// `a/b/../c` → `a/c`, without touching the filesystem, so paths read well in the audit.
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        Policy::parse(&dir.path().join("tool.toml"), text)
    }

    #[test]
    fn a_minimal_policy_grants_nothing() {
        let p = parse("[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\n").unwrap();
        assert_eq!(p.grants, Grants::default());
        assert!(!p.review_required);
        assert_eq!(p.limits.resolve(), crate::Limits::default());
    }

    #[test]
    fn unknown_fields_name_the_line() {
        let e = parse(
            "[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\n\n[grants]\nnetwork = [\"*\"]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("unknown field `network`"), "{e}");
        assert!(e.to_string().contains("tool.toml:6:"), "{e}");
    }

    #[test]
    fn impossible_grants_name_the_line() {
        let e = parse(
            "[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\n[grants]\nfs = [\n  { host = \"missing\", guest = \"/w\", access = \"read-only\" },\n]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        let e = parse("[executor]\nkind = \"lxc\"\n").unwrap_err();
        assert!(e.message.contains("unknown executor kind `lxc`"));
        assert_eq!(e.line, Some(2));
        let e = parse("[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\nsha256 = \"abc\"\n")
            .unwrap_err();
        assert_eq!(e.line, Some(4));
        let e = parse(
            "[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\n[limits]\ntimeout = \"0s\"\n",
        )
        .unwrap_err();
        assert!(e.message.contains("timeout"));
    }

    #[test]
    fn net_grants_are_checked_with_their_line() {
        let head = "[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\n[grants]\n";
        let p = parse(&format!(
            "{head}net = [\"api.example.org:443\", \"*.example.org\"]\nnet_credentials = [\n  {{ host = \"api.example.org\", header = \"Authorization\", from_host = \"TOKEN\", prefix = \"Bearer \" }},\n]\n"
        ))
        .unwrap();
        assert_eq!(p.grants.net.hosts.len(), 2);
        assert_eq!(p.grants.net.credentials[0].header, "Authorization");
        let e = parse(&format!(
            "{head}net = [\n  \"ok.org\",\n  \"bad host\",\n]\n"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("`bad host`"), "{e}");
        let e = parse(&format!(
            "{head}net = [\"a.org\"]\nnet_credentials = [{{ host = \"b.org\", header = \"X-Key\", from_host = \"K\" }}]\n"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("no net grant allows"), "{e}");
    }

    #[test]
    fn paths_are_tidied() {
        assert_eq!(
            lexical(Path::new("/a/policies/../target/./x.wasm")),
            PathBuf::from("/a/target/x.wasm")
        );
        assert_eq!(lexical(Path::new("../x")), PathBuf::from("../x"));
    }

    #[test]
    fn function_overrides_are_kept() {
        let p = parse(
            "[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\n[limits]\ntimeout = \"5s\"\n[functions.spin]\nlimits = { timeout = \"1s\" }\nreview = { required = true }\n",
        )
        .unwrap();
        let f = &p.functions["spin"];
        assert_eq!(f.review_required, Some(true));
        assert_eq!(
            p.limits.overlay(&f.limits).resolve().timeout,
            std::time::Duration::from_secs(1)
        );
    }
}
