//! Policy files: one TOML file per tool (or per component), deny by default.

use crate::capability::{Checked, ExecutorKind};
use crate::grants::{GrantLines, Grants, GrantsSpec};
use crate::limits::{Limits, LimitsFile, LimitsSpec};
use crate::located::{Located, PolicyError, line_of};
use crate::spec::is_valid_tool_name;
use crate::table::{ExecutorTable, take_executor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;
use toml::de::DeTable;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewSpec {
    #[serde(default)]
    required: bool,
    /// Ask the reviewer again once the call has run, with what it changed.
    #[serde(default)]
    changes: Option<Spanned<bool>>,
}

impl ReviewSpec {
    fn changes(&self) -> Option<bool> {
        self.changes.as_ref().map(|c| *c.get_ref())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionSpec {
    #[serde(default)]
    limits: LimitsFile,
    review: Option<ReviewSpec>,
    idempotent: Option<bool>,
}

/// The envelope as written: everything but `[executor]`, which its backend parses.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    prefix: Option<Spanned<String>>,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    grants: GrantsSpec,
    #[serde(default)]
    limits: LimitsFile,
    #[serde(default)]
    review: ReviewSpec,
    #[serde(default)]
    functions: BTreeMap<String, Spanned<FunctionSpec>>,
    #[serde(default)]
    origin: Option<Origin>,
}

/// Where a tool's component came from, as `warden add oci://…` writes it (`[origin]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// The artifact, pinned by its manifest digest: `oci://REGISTRY/REPO@sha256:…`.
    pub reference: String,
    /// The fingerprint (`sha256:` of the public key's DER) of the key whose signature was
    /// verified; absent when it was taken unsigned (`--allow-unsigned`).
    #[serde(default)]
    pub signed_by: Option<String>,
    /// The reference as it was asked for (a tag), when it was not a digest.
    #[serde(default)]
    pub pulled_as: Option<String>,
    /// When it was added, RFC 3339 in UTC.
    #[serde(default)]
    pub added: Option<String>,
    /// When its publisher made it, RFC 3339 in UTC: the creation time its manifest carries
    /// (signed with it), which `warden pull` compares to tell an older version.
    #[serde(default)]
    pub created: Option<String>,
    /// The version it replaced though it is older (`warden pull --allow-downgrade`).
    #[serde(default)]
    pub downgraded_from: Option<String>,
    /// It came over plain HTTP from a registry not dialled on loopback (`--insecure-registry`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plain_http: bool,
}

/// Per-function overrides of limits and review.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FunctionOverride {
    pub limits: LimitsSpec,
    pub review_required: Option<bool>,
    /// `review.changes` of the function, when it writes one.
    pub review_changes: Option<bool>,
    pub idempotent: Option<bool>,
    pub line: usize,
}

/// One policy file, checked: its envelope is valid and everything in it is something the
/// backend of its kind can honour. The `[executor]` table is that backend's to parse.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The file it came from.
    pub path: PathBuf,
    pub prefix: String,
    /// Calls may be retried after a transient failure (timeout, unavailable).
    pub idempotent: bool,
    /// The executor kind (`"wasm"`), with its line.
    pub kind: Located<String>,
    /// The rest of `[executor]`.
    pub executor: ExecutorTable,
    pub grants: Grants,
    /// Where each grant is written.
    pub grant_lines: GrantLines,
    pub limits: LimitsSpec,
    pub review_required: bool,
    /// `[review] changes = true`: a person decides whether a call's changes to its read-write
    /// roots are kept, once it has run.
    pub review_changes: bool,
    pub functions: BTreeMap<String, FunctionOverride>,
    /// Where the component came from, when it came from a registry.
    pub origin: Option<Origin>,
}

impl Policy {
    /// Reads and checks one policy file against the executor kinds this build has (its
    /// backends).
    pub fn load(path: &Path, backends: &[&dyn ExecutorKind]) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PolicyError::new(path, None, format!("cannot read the policy: {e}")))?;
        Self::parse(path, &text, backends)
    }

    /// Checks policy text as if read from `path` (relative paths resolve against its folder).
    pub fn parse(
        path: &Path,
        text: &str,
        backends: &[&dyn ExecutorKind],
    ) -> Result<Policy, PolicyError> {
        let text: Arc<str> = Arc::from(text);
        let at = |span: Option<std::ops::Range<usize>>, message: String| {
            PolicyError::new(path, span.map(|s| line_of(&text, s.start)), message)
        };
        let toml_error = |e: toml::de::Error| at(e.span(), e.message().to_owned());
        let mut doc = DeTable::parse(&text).map_err(toml_error)?;
        let (kind, _) = take_executor(&mut doc).map_err(|m| at(m.span, m.message))?;
        let kind = Located {
            line: line_of(&text, kind.span().start),
            value: kind.into_inner(),
        };
        let backend = backends
            .iter()
            .find(|b| b.kind() == kind.value)
            .ok_or_else(|| {
                let known: Vec<&str> = backends.iter().map(|b| b.kind()).collect();
                PolicyError::new(
                    path,
                    Some(kind.line),
                    format!(
                        "unknown executor kind `{}`; this warden knows: {}",
                        kind.value,
                        known.join(", ")
                    ),
                )
            })?;
        let caps = backend.capabilities();
        let file =
            PolicyFile::deserialize(toml::de::Deserializer::from(doc)).map_err(toml_error)?;

        let checked = Checked {
            file: path,
            text: &text,
            kind: &kind.value,
        };
        checked.grants(&caps, &file.grants)?;
        checked.limits(&caps, "[limits]", &file.limits)?;
        checked.review(&caps, file.review.changes.as_ref())?;
        let base = path.parent().unwrap_or(Path::new("."));
        let grant_lines = file.grants.lines(&text);
        let grants = file
            .grants
            .resolve(base, caps.paths)
            .map_err(|e| at(e.span, e.message))?;
        let limits = file
            .limits
            .check()
            .map_err(|m| at(m.span, format!("[limits]: {}", m.message)))?;
        let mut functions = BTreeMap::new();
        for (name, spec) in file.functions {
            let line = line_of(&text, spec.span().start);
            let spec = spec.into_inner();
            let table = format!("[functions.{name}]");
            checked.limits(&caps, &table, &spec.limits)?;
            let review = spec.review.as_ref();
            checked.review(&caps, review.and_then(|r| r.changes.as_ref()))?;
            let limits = spec
                .limits
                .check()
                .map_err(|m| at(m.span, format!("{table}: {}", m.message)))?;
            functions.insert(
                name,
                FunctionOverride {
                    limits,
                    review_required: review.map(|r| r.required),
                    review_changes: review.and_then(ReviewSpec::changes),
                    idempotent: spec.idempotent,
                    line,
                },
            );
        }
        let prefix = checked_prefix(file.prefix).map_err(|(span, m)| at(Some(span), m))?;
        Ok(Policy {
            path: path.to_owned(),
            prefix,
            idempotent: file.idempotent,
            executor: ExecutorTable::new(path, text.clone(), kind.line),
            kind,
            grants,
            grant_lines,
            limits,
            review_required: file.review.required,
            review_changes: file.review.changes().unwrap_or(false),
            functions,
            origin: file.origin,
        })
    }

    /// The limits in force for `function`: its `[functions.NAME]` over the policy's, then the
    /// defaults.
    pub fn limits_for(&self, function: &str) -> Limits {
        match self.functions.get(function) {
            Some(f) => self.limits.overlay(&f.limits).resolve(),
            None => self.limits.resolve(),
        }
    }
}

/// The prefix as written, checked: what it adds to each tool's name must keep the name valid.
fn checked_prefix(
    prefix: Option<Spanned<String>>,
) -> Result<String, (std::ops::Range<usize>, String)> {
    match prefix {
        Some(p) if !p.get_ref().is_empty() && !is_valid_tool_name(p.get_ref()) => Err((
            p.span(),
            format!(
                "prefix `{}` may only use letters, digits, _ and -",
                p.get_ref()
            ),
        )),
        Some(p) => Ok(p.into_inner()),
        None => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::{Capabilities, NetHosts, Support};
    use crate::grants::Paths;

    /// An executor kind that honours everything, or what `caps` says.
    struct Fake(Capabilities);

    const ALL: Capabilities = Capabilities {
        paths: Paths::Guest,
        env: Support::Honoured,
        caller_env: Support::Honoured,
        net: NetHosts::Enforced,
        dns: Support::Honoured,
        credentials: Support::Honoured,
        fuel: Support::Honoured,
        response: Support::Honoured,
        memory_ceiling: Some(1 << 30),
        sessions: false,
        programs: false,
        roots_observed: true,
        changes: Support::Honoured,
    };

    impl ExecutorKind for Fake {
        fn kind(&self) -> &'static str {
            "fake"
        }

        fn capabilities(&self) -> Capabilities {
            self.0
        }
    }

    const HEAD: &str = "[executor]\nkind = \"fake\"\n";

    fn parse_with(caps: Capabilities, text: &str) -> Result<Policy, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        Policy::parse(&dir.path().join("tool.toml"), text, &[&Fake(caps)])
    }

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        parse_with(ALL, text)
    }

    #[test]
    fn a_minimal_policy_grants_nothing() {
        let p = parse(HEAD).unwrap();
        assert_eq!(p.grants, Grants::default());
        assert!(!p.review_required);
        assert_eq!(p.limits.resolve(), crate::Limits::default());
        assert_eq!((p.kind.value.as_str(), p.kind.line), ("fake", 2));
    }

    #[test]
    fn the_executor_table_is_left_to_its_backend_with_its_lines() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Own {
            knob: Spanned<u32>,
        }
        let p = parse(&format!("{HEAD}knob = 7\n")).unwrap();
        let own: Own = p.executor.parse().unwrap();
        assert_eq!(p.executor.located(own.knob), Located { value: 7, line: 3 });
        let p = parse(&format!("{HEAD}\nknbo = 7\n")).unwrap();
        let e = p.executor.parse::<Own>().unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("unknown field `knbo`"), "{e}");
    }

    #[test]
    fn unknown_fields_name_the_line() {
        let e = parse(&format!("{HEAD}\n[grants]\nnetwork = [\"*\"]\n")).unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("unknown field `network`"), "{e}");
        assert!(e.to_string().contains("tool.toml:5:"), "{e}");
    }

    #[test]
    fn impossible_grants_and_kinds_name_the_line() {
        let e = parse(&format!(
            "{HEAD}[grants]\nfs = [\n  {{ host = \"missing\", guest = \"/w\", access = \"read-only\" }},\n]\n"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        let e = parse("[executor]\nkind = \"lxc\"\n").unwrap_err();
        assert!(e.message.contains("unknown executor kind `lxc`"), "{e}");
        assert!(e.message.contains("knows: fake"), "{e}");
        assert_eq!(e.line, Some(2));
        let e = parse("prefix = \"x\"\n").unwrap_err();
        assert!(e.message.contains("[executor]"), "{e}");
        let e = parse("[executor]\nimage = \"x\"\n").unwrap_err();
        assert!(e.message.contains("needs `kind`"), "{e}");
        let e = parse(&format!("{HEAD}[limits]\ntimeout = \"0s\"\n")).unwrap_err();
        assert!(e.message.contains("timeout"), "{e}");
        assert_eq!(e.line, Some(4), "{e}");
        let e = parse(&format!("{HEAD}[limits]\nchanges = \"0B\"\n")).unwrap_err();
        assert!(e.message.contains("grants it read-only"), "{e}");
        assert_eq!(e.line, Some(4), "{e}");
        let p = parse(&format!("{HEAD}[limits]\nchanges = \"2MiB\"\n")).unwrap();
        assert_eq!(p.limits.resolve().changes, 2 << 20);
    }

    #[test]
    fn net_grants_are_checked_with_their_line() {
        let head = format!("{HEAD}[grants]\n");
        let p = parse(&format!(
            "{head}net = [\"api.example.org:443\", \"*.example.org\"]\nnet_credentials = [\n  {{ host = \"api.example.org\", header = \"Authorization\", from_host = \"TOKEN\", prefix = \"Bearer \" }},\n]\ncredential_host_shared = true\n"
        ))
        .unwrap();
        assert_eq!(p.grants.net.hosts.len(), 2);
        assert_eq!(p.grants.net.credentials[0].header, "Authorization");
        assert!(p.grants.net.credential_host_shared);
        let e = parse(&format!(
            "{head}net = [\n  \"ok.org\",\n  \"bad host\",\n]\n"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("`bad host`"), "{e}");
        let e = parse(&format!(
            "{head}net = [\"a.org\"]\nnet_credentials = [{{ host = \"b.org\", header = \"X-Key\", from_host = \"K\" }}]\n"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("no net grant allows"), "{e}");
    }

    /// A credential's host beside any other destination is refused at the other grant's line
    /// (a host that reflects its request could hand the sandbox the value in any encoding),
    /// unless the policy writes that it accepts it.
    #[test]
    fn a_credential_host_beside_other_destinations_is_refused_unless_accepted() {
        let credential = "net_credentials = [{ host = \"api.test\", header = \"Authorization\", from_host = \"T\" }]\n";
        for (net, line, other) in [
            ("net = [\"api.test\", \"echo.test\"]\n", 4, "`echo.test`"),
            ("net = [\"api.test:443\", \"*.test\"]\n", 4, "`*.test`"),
            (
                "net = [\"api.test\", \"127.0.0.1:8080\"]\n",
                4,
                "`127.0.0.1:8080`",
            ),
            (
                "net = [\"api.test\"]\ndns = true\n",
                5,
                "`guest DNS lookups`",
            ),
        ] {
            let text = format!("{HEAD}[grants]\n{net}{credential}");
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, Some(line), "{e}");
            assert!(e.message.contains(other), "{e}");
            assert!(e.message.contains("credential_host_shared = true"), "{e}");
            let shared = parse(&format!("{text}credential_host_shared = true\n")).unwrap();
            assert!(shared.grants.net.credential_host_shared);
        }
        // Every port of the credential's host is that host; an IP credential is its address.
        parse(&format!(
            "{HEAD}[grants]\nnet = [\"api.test:443\", \"API.test:8443\"]\n{credential}"
        ))
        .unwrap();
        parse(&format!(
            "{HEAD}[grants]\nnet = [\"10.1.2.3:80\"]\nnet_credentials = [{{ host = \"10.1.2.3\", header = \"X\", from_host = \"T\" }}]\n"
        ))
        .unwrap();
    }

    /// Every grant form and limit a backend refuses is refused at load, at its line.
    #[test]
    fn what_a_backend_cannot_honour_is_refused_at_its_line() {
        let no = Support::Refused("the reason");
        let cases: [(Capabilities, &str, usize, &str); 11] = [
            (
                Capabilities { env: no, ..ALL },
                "[grants]\nenv = { A = \"1\" }\n",
                4,
                "an env grant",
            ),
            (
                Capabilities {
                    caller_env: no,
                    ..ALL
                },
                "[grants]\nenv_from_caller = [\"A\"]\n",
                4,
                "env_from_caller",
            ),
            (
                Capabilities { env: no, ..ALL },
                "[grants]\nenv_from_host = [\"A\"]\n",
                4,
                "an env grant",
            ),
            (
                Capabilities { dns: no, ..ALL },
                "[grants]\n\ndns = true\n",
                5,
                "dns = true",
            ),
            (
                Capabilities {
                    credentials: no,
                    ..ALL
                },
                "[grants]\nnet = [\"a.org\"]\nnet_credentials = [{ host = \"a.org\", header = \"X\", from_host = \"K\" }]\n",
                5,
                "net_credentials",
            ),
            (
                Capabilities { fuel: no, ..ALL },
                "[limits]\nfuel = 5\n",
                4,
                "[limits] fuel",
            ),
            (
                Capabilities {
                    response: no,
                    ..ALL
                },
                "[limits]\nresponse = \"1MiB\"\n",
                4,
                "[limits] response",
            ),
            (
                Capabilities { fuel: no, ..ALL },
                "[functions.f]\nlimits = { fuel = 5 }\n",
                4,
                "[functions.f] fuel",
            ),
            (
                Capabilities {
                    memory_ceiling: Some(1 << 20),
                    ..ALL
                },
                "[limits]\nmemory = \"2MiB\"\n",
                4,
                "at most 1MiB",
            ),
            (
                Capabilities { changes: no, ..ALL },
                "[review]\nrequired = true\nchanges = true\n",
                5,
                "review of changes",
            ),
            (
                Capabilities { changes: no, ..ALL },
                "[functions.f]\nreview = { changes = true }\n",
                4,
                "review of changes",
            ),
        ];
        for (caps, grants, line, words) in cases {
            let e = parse_with(caps, &format!("{HEAD}{grants}")).unwrap_err();
            assert_eq!(e.line, Some(line), "{grants}: {e}");
            assert!(e.message.contains(words), "{words}: {e}");
            assert!(e.message.contains("fake tool"), "{e}");
            assert!(
                parse(&format!("{HEAD}{grants}")).is_ok(),
                "honoured: {grants}"
            );
        }
        assert!(
            parse_with(
                Capabilities { dns: no, ..ALL },
                &format!("{HEAD}[grants]\ndns = false\n")
            )
            .is_ok()
        );
    }

    #[test]
    fn function_overrides_are_kept() {
        let p = parse(&format!(
            "{HEAD}[limits]\ntimeout = \"5s\"\n[functions.spin]\nlimits = {{ timeout = \"1s\" }}\nreview = {{ required = true }}\n"
        ))
        .unwrap();
        assert_eq!(p.functions["spin"].review_required, Some(true));
        assert_eq!(
            p.limits_for("spin").timeout,
            std::time::Duration::from_secs(1)
        );
        assert_eq!(
            p.limits_for("other").timeout,
            std::time::Duration::from_secs(5)
        );
    }
}
