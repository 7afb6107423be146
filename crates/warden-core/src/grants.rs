//! Grants: the env, filesystem roots and network a tool may use. Each kind is parsed,
//! validated, resolved and described here, so the audit shows exactly what executors enforce.

use crate::located::Mistake;
use crate::message::{ErrorKind, ToolError};
use crate::net::{Credential, HostGrant, NetGrantError, NetGrants};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, LazyLock};
use toml::Spanned;

/// How an executor's tools see their filesystem roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Paths {
    /// At the `guest` path each grant names (wasm preopens, container mounts).
    Guest,
    /// At the `guest` path a grant names, else at its own host path (a host process's mounts).
    Host,
}

/// Grants as a policy file writes them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantsSpec {
    pub(crate) env: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(default)]
    pub(crate) env_from_host: Vec<Spanned<String>>,
    /// Names of `env` entries whose values are secret (redacted like host values).
    #[serde(default)]
    pub(crate) secret_env: Vec<Spanned<String>>,
    /// Names a client may set for its session (the values are the client's).
    #[serde(default)]
    pub(crate) env_from_caller: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) fs: Vec<Spanned<FsGrantSpec>>,
    #[serde(default)]
    pub(crate) net: Vec<Spanned<String>>,
    /// Guest DNS lookups; off unless asked.
    pub(crate) dns: Option<Spanned<bool>>,
    #[serde(default)]
    pub(crate) net_credentials: Vec<Spanned<Credential>>,
    /// Accepts a credential's host beside other destinations.
    pub(crate) credential_host_shared: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FsGrantSpec {
    host: String,
    /// Where the tool sees it; a host tool's default is the host path.
    guest: Option<String>,
    access: Access,
}

/// How a filesystem root may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

impl Access {
    /// The name a policy writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadOnly => "read-only",
            Access::ReadWrite => "read-write",
        }
    }
}

/// One host directory made visible to the tool at a guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsGrant {
    /// Canonical host directory.
    pub host: PathBuf,
    /// Absolute, normalised path the tool sees.
    pub guest: String,
    pub access: Access,
}

impl std::fmt::Display for FsGrant {
    /// `HOST -> GUEST (ACCESS)`, as the audit shows a root.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (host, guest) = (self.host.display(), &self.guest);
        write!(f, "{host} -> {guest} ({})", self.access.as_str())
    }
}

/// Variables a client set for its session, one tool's: checked against the tool's
/// `env_from_caller` when a call resolves its environment ([`Grants::resolve_env`]).
pub type CallerEnv = Arc<BTreeMap<String, String>>;

/// No variables from the client: shared, so a call without any allocates none.
pub(crate) static NO_CALLER_ENV: LazyLock<CallerEnv> = LazyLock::new(CallerEnv::default);

/// The grants in force for one policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Literal variables, exactly as written.
    pub env: BTreeMap<String, String>,
    /// Variables copied by name from warden's own environment at call time (always secret).
    pub env_from_host: Vec<String>,
    /// Names of literal `env` entries marked secret.
    pub secret_env: Vec<String>,
    /// Names whose values a client may set for its session ([`CallerEnv`]): a literal `env`
    /// entry of the same name is the value when the client sets none.
    pub env_from_caller: Vec<String>,
    pub fs: Vec<FsGrant>,
    pub net: NetGrants,
}

/// Where each grant is written in its policy file, in the order of the grants it follows:
/// what the audit names when it suggests removing one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantLines {
    /// The line of each `env_from_host` entry.
    pub env_from_host: Vec<usize>,
    /// The line of each `fs` grant.
    pub fs: Vec<usize>,
    /// The line of each `net` entry.
    pub net: Vec<usize>,
    /// The line of each `net_credentials` entry.
    pub net_credentials: Vec<usize>,
    /// The line of `dns`, when it is written.
    pub dns: Option<usize>,
}

impl GrantsSpec {
    /// The lines of the grants as written in `text`, the policy they were read from.
    pub(crate) fn lines(&self, text: &str) -> GrantLines {
        let line = |span: std::ops::Range<usize>| crate::located::line_of(text, span.start);
        GrantLines {
            env_from_host: self.env_from_host.iter().map(|g| line(g.span())).collect(),
            fs: self.fs.iter().map(|g| line(g.span())).collect(),
            net: self.net.iter().map(|g| line(g.span())).collect(),
            net_credentials: self
                .net_credentials
                .iter()
                .map(|g| line(g.span()))
                .collect(),
            dns: self.dns.as_ref().map(|d| line(d.span())),
        }
    }

    /// Checks every grant against this machine; paths are relative to `base`. With
    /// [`Paths::Host`] a root without `guest` is seen at its own canonical path.
    pub(crate) fn resolve(self, base: &Path, paths: Paths) -> Result<Grants, Mistake> {
        let env = self.env.map(Spanned::into_inner).unwrap_or_default();
        for name in env.keys() {
            check_env_name(name).map_err(|e| Mistake::whole(e.to_string()))?;
        }
        let env_from_host = checked_names(self.env_from_host, |name| {
            check_env_name(name).map_err(|e| e.to_string())?;
            if env.contains_key(name) {
                return Err(format!(
                    "`{name}` is granted both in env and in env_from_host"
                ));
            }
            Ok(())
        })?;
        let secret_env = checked_names(self.secret_env, |name| {
            if !env.contains_key(name) {
                return Err(format!("secret_env names `{name}`, which is not in env"));
            }
            Ok(())
        })?;
        let env_from_caller = checked_names(self.env_from_caller, |name| {
            check_env_name(name).map_err(|e| e.to_string())?;
            if env_from_host.iter().any(|n| n == name) {
                return Err(format!(
                    "`{name}` is granted both in env_from_host and in env_from_caller: a host \
                     value is secret, a caller's is not; keep one"
                ));
            }
            Ok(())
        })?;
        let mut fs: Vec<FsGrant> = Vec::new();
        for grant in self.fs {
            let span = grant.span();
            let grant = grant
                .into_inner()
                .resolve(base, paths)
                .map_err(|e| Mistake::at(span.clone(), e))?;
            if fs.iter().any(|g| g.guest == grant.guest) {
                let message = format!("two fs grants use the guest path `{}`", grant.guest);
                return Err(Mistake::at(span, message));
            }
            fs.push(grant);
        }
        let net = NetSpec {
            net: self.net,
            dns: self.dns,
            credentials: self.net_credentials,
            credential_host_shared: self.credential_host_shared,
        }
        .resolve(&env)?;
        Ok(Grants {
            env,
            env_from_host,
            secret_env,
            env_from_caller,
            fs,
            net,
        })
    }
}

/// Names as a policy wrote them, each passed through `check` (whose error is the mistake's
/// message, at the name).
fn checked_names(
    names: Vec<Spanned<String>>,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<String>, Mistake> {
    names
        .into_iter()
        .map(|name| {
            let span = name.span();
            let name = name.into_inner();
            check(&name).map_err(|message| Mistake::at(span, message))?;
            Ok(name)
        })
        .collect()
}

impl FsGrantSpec {
    /// The root this grant makes, its host directory checked on this machine (relative to
    /// `base`); the error says what is wrong with it.
    fn resolve(self, base: &Path, paths: Paths) -> Result<FsGrant, String> {
        let host = base.join(&self.host).canonicalize().map_err(|e| {
            format!(
                "fs grant host `{}` cannot be used ({}): create the directory or fix the path \
                 (paths are relative to the policy file)",
                self.host, e
            )
        })?;
        if !host.is_dir() {
            return Err(format!("fs grant host `{}` is not a directory", self.host));
        }
        let guest = match (&self.guest, paths) {
            (None, Paths::Host) => host.to_string_lossy().into_owned(),
            (Some(g), _) => normalise_guest(g).map_err(|e| e.to_string())?,
            (None, Paths::Guest) => {
                return Err(format!(
                    "the fs grant of `{}` needs `guest`, the absolute path the tool sees it at",
                    self.host
                ));
            }
        };
        Ok(FsGrant {
            host,
            guest,
            access: self.access,
        })
    }
}

/// The network grants as a policy wrote them.
struct NetSpec {
    net: Vec<Spanned<String>>,
    dns: Option<Spanned<bool>>,
    credentials: Vec<Spanned<Credential>>,
    credential_host_shared: Option<Spanned<bool>>,
}

impl NetSpec {
    /// The network grants, each checked, with the literal `env` a credential's placeholder
    /// may not be.
    fn resolve(self, env: &BTreeMap<String, String>) -> Result<NetGrants, Mistake> {
        let mut net = NetGrants {
            dns: self.dns.as_ref().is_some_and(|d| *d.get_ref()),
            ..NetGrants::default()
        };
        let mut net_spans = Vec::new();
        for text in self.net {
            net_spans.push(text.span());
            let grant = HostGrant::parse(text.get_ref())
                .map_err(|e| Mistake::at(text.span(), e.to_string()))?;
            net.hosts.push(grant);
        }
        for c in self.credentials {
            let span = c.span();
            let c = c.into_inner();
            check_credential(&net, &c, env).map_err(|e| Mistake::at(span, e.to_string()))?;
            net.credentials.push(c);
        }
        net.credential_host_shared = self
            .credential_host_shared
            .is_some_and(toml::Spanned::into_inner);
        if net.credential_host_shared {
            return Ok(net);
        }
        // A credential's host shares its tool with nothing it could be sent on to.
        let beside = match (net.beside_credentials(), &self.dns) {
            (Some(i), _) => Some((net.hosts[i].to_string(), net_spans[i].clone())),
            (None, Some(dns)) if net.dns && !net.credentials.is_empty() => {
                Some(("guest DNS lookups".to_owned(), dns.span()))
            }
            _ => None,
        };
        if let (Some((other, span)), Some(first)) = (beside, net.credentials.first()) {
            let host = first.host.clone();
            let message = GrantError::CredentialShared { other, host }.to_string();
            return Err(Mistake::at(span, message));
        }
        Ok(net)
    }
}

/// Checks credential `c` against the network grants `net` so far and the literal `env`.
fn check_credential(
    net: &NetGrants,
    c: &Credential,
    env: &BTreeMap<String, String>,
) -> Result<(), GrantError> {
    net.check_credential(c)?;
    check_env_name(&c.from_host)?;
    if let Some(name) = &c.env {
        check_env_name(name)?;
        if env.contains_key(name) {
            return Err(GrantError::PlaceholderIsEnv {
                name: name.clone(),
                host: c.host.clone(),
            });
        }
    }
    Ok(())
}

impl Grants {
    /// The environment a call gets: the literal pairs, the caller's values of the names
    /// `env_from_caller` allows (in place of a literal of the same name), and the host
    /// variables named, read now. A caller's name the policy does not allow is refused,
    /// never dropped.
    pub fn resolve_env(
        &self,
        caller: &BTreeMap<String, String>,
    ) -> Result<Vec<(String, String)>, ToolError> {
        self.check_caller_env(caller)?;
        let literal = self
            .env
            .iter()
            .filter(|(name, _)| !caller.contains_key(*name));
        let mut out: Vec<(String, String)> = literal
            .chain(caller)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for name in &self.env_from_host {
            let value = std::env::var(name).map_err(|_| {
                ToolError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "this tool needs the variable {name} from warden's environment, and it \
                         is not set; ask the operator to set it"
                    ),
                )
            })?;
            out.push((name.clone(), value));
        }
        Ok(out)
    }

    /// Refuses a client's variables unless `env_from_caller` allows every name, each value
    /// one a program's environment can hold.
    pub fn check_caller_env(&self, caller: &BTreeMap<String, String>) -> Result<(), ToolError> {
        for (name, value) in caller {
            if !self.env_from_caller.contains(name) {
                let allowed = match self.env_from_caller.as_slice() {
                    [] => "none".to_owned(),
                    names => names.join(", "),
                };
                return Err(ToolError::new(
                    ErrorKind::Denied,
                    format!(
                        "the session sets the variable {name} for this tool, and its policy \
                         does not let a caller set it ([grants] env_from_caller allows: \
                         {allowed}); leave it out of the session's variables, or ask the \
                         operator to allow it"
                    ),
                ));
            }
            if value.contains('\0') {
                return Err(ToolError::new(
                    ErrorKind::InvalidArguments,
                    format!(
                        "the session's value of {name} holds a NUL byte, which no program's \
                         environment can: leave it out"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The headers warden adds for the tool, with their values read now from warden's
    /// environment.
    pub fn resolve_credentials(&self) -> Result<Vec<(Credential, String)>, ToolError> {
        self.net
            .credentials
            .iter()
            .map(|c| {
                let value = std::env::var(&c.from_host).map_err(|_| {
                    ToolError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "this tool's requests to {} need the variable {} from warden's \
                             environment, and it is not set; ask the operator to set it",
                            c.host, c.from_host
                        ),
                    )
                })?;
                Ok((c.clone(), format!("{}{value}", c.prefix)))
            })
            .collect()
    }

    /// The values to redact from everything a call returns: host variables, secret env and
    /// injected credentials.
    pub fn secrets(&self) -> Vec<(String, String)> {
        let host = self
            .env_from_host
            .iter()
            .filter_map(|n| std::env::var(n).ok().map(|v| (n.clone(), v)));
        let literal = self
            .secret_env
            .iter()
            .filter_map(|n| self.env.get(n).map(|v| (n.clone(), v.clone())));
        let credentials = self.net.credentials.iter().filter_map(|c| {
            std::env::var(&c.from_host)
                .ok()
                .map(|v| (c.from_host.clone(), v))
        });
        host.chain(literal).chain(credentials).collect()
    }

    /// The literal env as a reviewer may see it: values marked secret are `[secret]`.
    pub fn shown_env(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env.iter().map(|(k, v)| {
            let shown = if self.secret_env.contains(k) {
                "[secret]"
            } else {
                v.as_str()
            };
            (k.as_str(), shown)
        })
    }

    /// The grants as JSON, for the audit. Literal env values are shown unless marked secret;
    /// host values never are.
    pub fn describe(&self) -> serde_json::Value {
        let env: BTreeMap<&str, &str> = self.shown_env().collect();
        serde_json::json!({
            "env": env,
            "env_from_host": self.env_from_host,
            "secret_env": self.secret_env,
            "env_from_caller": self.env_from_caller,
            "fs": self.fs.iter().map(|g| serde_json::json!({
                "host": g.host.display().to_string(),
                "guest": g.guest,
                "access": g.access,
            })).collect::<Vec<_>>(),
            "net": self.net.describe(),
        })
    }

    /// True when the tool can write nothing outside its own sandbox.
    pub fn writes_nothing(&self) -> bool {
        self.fs.iter().all(|g| g.access == Access::ReadOnly)
    }
}

/// A grant's name or path that cannot be honoured; the policy's loader places it in the file.
#[derive(Debug, thiserror::Error)]
enum GrantError {
    #[error("`{0}` is not a valid environment variable name (letters, digits, _)")]
    EnvName(String),
    #[error("fs grant guest `{0}` must be an absolute path")]
    GuestRelative(String),
    #[error("fs grant guest `{0}` must not contain `.` or `..`")]
    GuestDots(String),
    #[error(
        "`{name}` is both an env grant and the placeholder variable of the credential for \
         `{host}`; keep one"
    )]
    PlaceholderIsEnv { name: String, host: String },
    #[error(
        "`{other}` is granted beside the credential for `{host}`: a host that reflects its \
         request (an echo endpoint, an error page quoting headers) can hand the sandbox the \
         credential in any encoding, and `{other}` is where it could send it on. Give the \
         credential's host a tool of its own, or write `credential_host_shared = true` in \
         [grants] to accept that (`warden audit` flags it; docs/network.md says why)"
    )]
    CredentialShared { other: String, host: String },
    #[error(transparent)]
    Net(#[from] NetGrantError),
}

fn check_env_name(name: &str) -> Result<(), GrantError> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(GrantError::EnvName(name.to_owned()))
    }
}

/// An absolute guest path without `.` or `..`, so that two spellings cannot name one root.
fn normalise_guest(guest: &str) -> Result<String, GrantError> {
    let path = Path::new(guest);
    if !path.is_absolute() {
        return Err(GrantError::GuestRelative(guest.to_owned()));
    }
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                return Err(GrantError::GuestDots(guest.to_owned()));
            }
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grants of `text`, or the message of the first mistake (TOML's own ones included).
    fn parse(text: &str, base: &Path) -> Result<Grants, Mistake> {
        let spec: GrantsSpec = toml::from_str(text).map_err(|e| Mistake::whole(e.to_string()))?;
        spec.resolve(base, Paths::Guest)
    }

    #[test]
    fn resolves_fs_relative_to_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let g = parse(
            r#"fs = [{ host = "ws", guest = "/workspace/", access = "read-only" }]"#,
            dir.path(),
        )
        .unwrap();
        assert_eq!(g.fs[0].guest, "/workspace");
        assert_eq!(g.fs[0].host, dir.path().join("ws").canonicalize().unwrap());
        assert!(g.writes_nothing());
    }

    #[test]
    fn a_host_root_is_seen_at_its_guest_or_else_its_host_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let text = r#"fs = [{ host = "ws", access = "read-only" },
                            { host = ".", guest = "/workspace/", access = "read-write" }]"#;
        let spec: GrantsSpec = toml::from_str(text).unwrap();
        let g = spec.resolve(dir.path(), Paths::Host).unwrap();
        let host = dir.path().join("ws").canonicalize().unwrap();
        assert_eq!(g.fs[0].guest, host.to_string_lossy());
        assert_eq!(g.fs[1].guest, "/workspace");
    }

    #[test]
    fn refuses_what_cannot_be_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let missing = parse(
            r#"fs = [{ host = "nope", guest = "/w", access = "read-only" }]"#,
            dir.path(),
        );
        assert!(
            missing
                .unwrap_err()
                .message
                .contains("`nope` cannot be used")
        );
        let relative = parse(
            r#"fs = [{ host = ".", guest = "w", access = "read-only" }]"#,
            dir.path(),
        );
        assert!(relative.unwrap_err().message.contains("absolute"));
        let dotdot = parse(
            r#"fs = [{ host = ".", guest = "/w/../etc", access = "read-only" }]"#,
            dir.path(),
        );
        assert!(dotdot.unwrap_err().message.contains(".."));
        let access = parse(
            r#"fs = [{ host = ".", guest = "/w", access = "everything" }]"#,
            dir.path(),
        );
        assert!(access.unwrap_err().message.contains("everything"));
        assert!(parse(r#"env = { "A B" = "x" }"#, dir.path()).is_err());
    }

    #[test]
    fn a_credentials_placeholder_variable_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let with = |env: &str, extra: &str| {
            parse(
                &format!(
                    "{extra}net = [\"api.test\"]\nnet_credentials = [{{ host = \"api.test\", \
                     header = \"Authorization\", from_host = \"T\", env = \"{env}\" }}]"
                ),
                dir.path(),
            )
        };
        let ok = with("GH_TOKEN", "").unwrap();
        assert_eq!(ok.net.credentials[0].env.as_deref(), Some("GH_TOKEN"));
        assert!(with("GH TOKEN", "").is_err());
        let both = with("GH_TOKEN", "env = { GH_TOKEN = \"x\" }\n")
            .unwrap_err()
            .message;
        assert!(
            both.contains("both an env grant and the placeholder"),
            "{both}"
        );
    }

    /// A client's variables: only the names the policy allows, each replacing a literal of
    /// the same name; any other name (or a value no environment can hold) is refused.
    #[test]
    fn a_client_sets_only_the_variables_the_policy_allows() {
        let dir = tempfile::tempdir().unwrap();
        let g = parse(
            "env = { PROJECT = \"default\", LANG = \"C\" }\nenv_from_caller = [\"PROJECT\", \"DEBUG\"]",
            dir.path(),
        )
        .unwrap();
        let caller = |pairs: &[(&str, &str)]| -> CallerEnv {
            Arc::new(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
            )
        };
        let env = g.resolve_env(&caller(&[])).unwrap();
        assert!(env.contains(&("PROJECT".into(), "default".into())));
        let env = g
            .resolve_env(&caller(&[("PROJECT", "mine"), ("DEBUG", "1")]))
            .unwrap();
        assert!(env.contains(&("PROJECT".into(), "mine".into())));
        assert!(env.contains(&("DEBUG".into(), "1".into())));
        assert!(env.contains(&("LANG".into(), "C".into())));
        assert_eq!(env.len(), 3, "{env:?}");
        let wider = g.resolve_env(&caller(&[("LANG", "fr")])).unwrap_err();
        assert_eq!(wider.kind, ErrorKind::Denied);
        assert!(wider.message.contains("LANG"), "{}", wider.message);
        assert!(
            wider.message.contains("allows: PROJECT, DEBUG"),
            "{}",
            wider.message
        );
        let nul = g.check_caller_env(&caller(&[("DEBUG", "a\0b")]));
        assert_eq!(nul.unwrap_err().kind, ErrorKind::InvalidArguments);
        let none = Grants::default().check_caller_env(&caller(&[("A", "1")]));
        assert!(none.unwrap_err().message.contains("allows: none"));
        let both = parse(
            "env_from_host = [\"T\"]\nenv_from_caller = [\"T\"]",
            dir.path(),
        );
        assert!(
            both.unwrap_err()
                .message
                .contains("both in env_from_host and in env_from_caller")
        );
        assert!(parse("env_from_caller = [\"A B\"]", dir.path()).is_err());
    }

    #[test]
    fn host_env_is_read_at_call_time() {
        let g = Grants {
            env_from_host: vec!["WARDEN_TEST_SURELY_UNSET_VAR".into()],
            ..Default::default()
        };
        let err = g.resolve_env(&BTreeMap::new()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert!(err.message.contains("WARDEN_TEST_SURELY_UNSET_VAR"));
    }
}
