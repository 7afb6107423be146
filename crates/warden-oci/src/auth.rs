//! Registry credentials as users have them, and the distribution spec's challenges: a registry
//! that answers 401 names Basic or a Bearer token service, and warden answers it once per
//! request with what the environment (`WARDEN_REGISTRY_USERNAME`, `WARDEN_REGISTRY_PASSWORD`,
//! for the hosts `WARDEN_REGISTRY` names) or Docker's `config.json` (its `auths`,
//! `credHelpers` and `credsStore`) hold for that registry. Credentials go to a token service
//! only where [`Credentials::may_go_to`] says: a registry names its token service, so an
//! impostor (or a man in the middle of plain HTTP) could name its own.

use crate::bounds::{Bounds, Load};
use crate::error::OciError;
use crate::exchange::Exchange;
use crate::reference::{Reference, names};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The variable naming the hosts the environment's credentials are for.
const REGISTRY_VARIABLE: &str = "WARDEN_REGISTRY";
/// The variables holding the environment's credentials.
const USERNAME_VARIABLE: &str = "WARDEN_REGISTRY_USERNAME";
const PASSWORD_VARIABLE: &str = "WARDEN_REGISTRY_PASSWORD";

/// The most warden reads of a token service's answer.
const TOKEN_LIMIT: u64 = 1 << 20;

/// A user name and its password or token, and where they came from.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub secret: String,
    pub source: CredentialSource,
}

/// Where credentials came from, which says which token services may have them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `WARDEN_REGISTRY_USERNAME` and `_PASSWORD`, for the hosts (`HOST` or `HOST:PORT`)
    /// `WARDEN_REGISTRY` names: registries, and token services on other hosts than theirs.
    Environment { hosts: Vec<String> },
    /// Docker's `config.json` entry (or credential helper) for the registry, as `docker login`
    /// left it.
    DockerConfig,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.username)
    }
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

#[derive(Default, Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    username: String,
    secret: String,
}

impl Credentials {
    /// What the environment or Docker's configuration holds for `reference`'s registry;
    /// `None` for anonymous access. The environment's credentials count only for a registry
    /// `WARDEN_REGISTRY` names; without it they are ignored, with a warning.
    pub fn for_registry(reference: &Reference) -> Result<Option<Credentials>, OciError> {
        if let Some(found) = Self::from_environment(reference) {
            return Ok(Some(found));
        }
        let registry = reference.registry.as_str();
        let Some(path) = docker_config() else {
            return Ok(None);
        };
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        let config: DockerConfig = serde_json::from_str(&text).map_err(|e| {
            OciError::Key(format!(
                "{} is not Docker's config.json: {e}",
                path.display()
            ))
        })?;
        let keys = [
            registry.to_owned(),
            format!("https://{registry}"),
            format!("http://{registry}"),
            format!("https://{registry}/v1/"),
        ];
        if let Some(helper) = keys.iter().find_map(|k| config.cred_helpers.get(k)) {
            return helper_get(helper, registry).map(Some);
        }
        if let Some(auth) = keys.iter().find_map(|k| config.auths.get(k)) {
            if let (Some(username), Some(secret)) = (&auth.username, &auth.password) {
                return Ok(Some(Credentials {
                    username: username.clone(),
                    secret: secret.clone(),
                    source: CredentialSource::DockerConfig,
                }));
            }
            if let Some(encoded) = &auth.auth {
                let decoded = STANDARD
                    .decode(encoded.trim())
                    .ok()
                    .and_then(|d| String::from_utf8(d).ok())
                    .and_then(|d| d.split_once(':').map(|(u, s)| (u.to_owned(), s.to_owned())));
                let (username, secret) = decoded.ok_or_else(|| {
                    OciError::Key(format!(
                        "the auth of {registry} in {} is not base64 of user:password",
                        path.display()
                    ))
                })?;
                return Ok(Some(Credentials {
                    username,
                    secret,
                    source: CredentialSource::DockerConfig,
                }));
            }
        }
        match &config.creds_store {
            Some(store) => helper_get(store, registry).map(Some),
            None => Ok(None),
        }
    }

    /// `WARDEN_REGISTRY_USERNAME` and `_PASSWORD`, when `WARDEN_REGISTRY` names `reference`'s
    /// registry.
    fn from_environment(reference: &Reference) -> Option<Credentials> {
        let username = std::env::var(USERNAME_VARIABLE).ok();
        let secret = std::env::var(PASSWORD_VARIABLE).ok();
        if username.is_none() && secret.is_none() {
            return None;
        }
        let Some(hosts) = std::env::var(REGISTRY_VARIABLE).ok() else {
            // Credentials for no registry in particular would go to whichever asks.
            tracing::warn!(
                "{USERNAME_VARIABLE} and {PASSWORD_VARIABLE} are ignored: {REGISTRY_VARIABLE} \
                 does not name the registry they are for (HOST[:PORT], and a token service on \
                 another host after a comma: {REGISTRY_VARIABLE}=registry-1.docker.io,auth.docker.io)"
            );
            return None;
        };
        let hosts: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        if !hosts.iter().any(|h| reference.named_by(h)) {
            tracing::debug!(
                "{REGISTRY_VARIABLE} does not name {}: its credentials are not for it",
                reference.registry
            );
            return None;
        }
        Some(Credentials {
            username: username?,
            secret: secret?,
            source: CredentialSource::Environment { hosts },
        })
    }

    /// Whether these credentials may go to the token service at `realm`, for a registry
    /// reached at `registry` (its scheme, host and port); `Err` says why not and the fix.
    ///
    /// Anywhere on the registry's own origin: that is as far as answering its Basic challenge
    /// sends them. Elsewhere only over HTTPS, and on another host only when named: the
    /// environment's where `WARDEN_REGISTRY` names that host; Docker's `config.json` entry
    /// wherever a registry reached over HTTPS sends it, as Docker sends it (the registry proved
    /// who it is, so its token service is its word), but only on its own host when the
    /// registry is reached over plain HTTP, where anyone between could name theirs.
    pub fn may_go_to(&self, realm: &reqwest::Url, registry: &reqwest::Url) -> Result<(), String> {
        let origin = |u: &reqwest::Url| {
            (
                u.scheme().to_owned(),
                u.host_str().map(str::to_ascii_lowercase),
                u.port_or_known_default(),
            )
        };
        if origin(realm) == origin(registry) {
            return Ok(());
        }
        let host = realm.host_str().unwrap_or_default();
        if realm.scheme() != "https" {
            return Err(
                "it is plain HTTP, and credentials go to a token service elsewhere \
                        than the registry's own address over HTTPS only"
                    .to_owned(),
            );
        }
        let own_host = registry
            .host_str()
            .is_some_and(|h| h.eq_ignore_ascii_case(host));
        let port = realm.port_or_known_default().unwrap_or(443);
        match &self.source {
            CredentialSource::Environment { hosts } => {
                if own_host || hosts.iter().any(|h| names(h, host, port)) {
                    Ok(())
                } else {
                    Err(format!(
                        "{REGISTRY_VARIABLE} does not name {host}; if it is this registry's \
                         token service, add it after a comma ({REGISTRY_VARIABLE}={},{host})",
                        hosts.join(",")
                    ))
                }
            }
            CredentialSource::DockerConfig => {
                if own_host || registry.scheme() == "https" {
                    Ok(())
                } else {
                    Err(format!(
                        "the registry is reached over plain HTTP, so a token service it names \
                         on another host ({host}) could be anyone's"
                    ))
                }
            }
        }
    }

    /// `Authorization: Basic …`.
    fn basic(&self) -> String {
        format!(
            "Basic {}",
            STANDARD.encode(format!("{}:{}", self.username, self.secret))
        )
    }
}

/// Docker's `config.json`: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
fn docker_config() -> Option<PathBuf> {
    match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => Some(PathBuf::from(dir).join("config.json")),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json")),
    }
}

/// Asks `docker-credential-NAME get` for `registry`'s credentials.
fn helper_get(name: &str, registry: &str) -> Result<Credentials, OciError> {
    use std::io::Write as _;
    let program = format!("docker-credential-{name}");
    let failed = |why: String| {
        OciError::Key(format!(
            "the credential helper {program} for {registry}: {why}"
        ))
    };
    let mut child = std::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(format!(
                "cannot start it ({e}): install it or fix config.json"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(registry.as_bytes())
            .map_err(|e| failed(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        ));
    }
    let answer: HelperAnswer = serde_json::from_slice(&out.stdout).map_err(|e| {
        failed(format!(
            "its answer is not JSON with Username and Secret: {e}"
        ))
    })?;
    Ok(Credentials {
        username: answer.username,
        secret: answer.secret,
        source: CredentialSource::DockerConfig,
    })
}

/// A registry's `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        params: Vec<(String, String)>,
    },
}

impl Challenge {
    /// Parses `Basic realm="…"` or `Bearer realm="…",service="…",scope="…"`.
    pub(crate) fn parse(header: &str) -> Option<Challenge> {
        let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Challenge::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let mut params = Vec::new();
        let mut rest = rest.trim();
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            let after = after.trim_start();
            let (value, tail) = match after.strip_prefix('"') {
                Some(quoted) => {
                    let end = quoted.find('"')?;
                    (&quoted[..end], &quoted[end + 1..])
                }
                None => after.split_once(',').unwrap_or((after, "")),
            };
            params.push((key.trim().to_owned(), value.to_owned()));
            rest = tail.trim_start().trim_start_matches(',').trim_start();
        }
        let realm = params
            .iter()
            .position(|(k, _)| k == "realm")
            .map(|i| params.remove(i).1)?;
        Some(Challenge::Bearer { realm, params })
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// Where a challenge is answered: the registry (for messages), its address as reached, and
/// the bounds on every exchange.
pub(crate) struct Asker<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) registry: &'a str,
    pub(crate) reached: &'a reqwest::Url,
    pub(crate) bounds: &'a Bounds,
}

/// The `Authorization` header that answers `challenge`.
pub(crate) async fn answer(
    asker: &Asker<'_>,
    challenge: &Challenge,
    credentials: Option<&Credentials>,
) -> Result<String, OciError> {
    let registry = asker.registry;
    let unauthorised = |status: u16| OciError::Unauthorised {
        registry: registry.to_owned(),
        status,
    };
    match challenge {
        Challenge::Basic => credentials.map(Credentials::basic).ok_or(unauthorised(401)),
        Challenge::Bearer { realm, params } => {
            let url = reqwest::Url::parse(realm).map_err(|e| OciError::Registry {
                registry: registry.to_owned(),
                what: "a challenge".into(),
                status: 401,
                body: format!("its token service `{realm}` is not a URL: {e}"),
            })?;
            let mut request = asker.http.get(url.clone()).query(params);
            if let Some(c) = credentials {
                c.may_go_to(&url, asker.reached)
                    .map_err(|why| OciError::Withheld {
                        registry: registry.to_owned(),
                        realm: realm.clone(),
                        why,
                    })?;
                request = request.header(reqwest::header::AUTHORIZATION, c.basic());
            }
            let exchange = Exchange {
                registry,
                bounds: asker.bounds,
                load: Load::Small,
            };
            let what = format!("a token from {realm}");
            let answer = exchange
                .send(request, |e| OciError::Unreachable {
                    registry: realm.clone(),
                    why: e.to_string(),
                })
                .await?;
            let status = answer.response.status();
            if !status.is_success() {
                return Err(unauthorised(status.as_u16()));
            }
            let body = answer.body(&what, TOKEN_LIMIT).await?;
            let token: TokenAnswer =
                serde_json::from_slice(&body).map_err(|e| OciError::Registry {
                    registry: registry.to_owned(),
                    what,
                    status: status.as_u16(),
                    body: e.to_string(),
                })?;
            token
                .token
                .or(token.access_token)
                .map(|t| format!("Bearer {t}"))
                .ok_or(unauthorised(401))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse() {
        assert_eq!(
            Challenge::parse("Basic realm=\"Registry\""),
            Some(Challenge::Basic)
        );
        let bearer = Challenge::parse(
            "Bearer realm=\"https://auth.example/token\",service=\"r.example\",scope=\"repository:a/b:pull\"",
        );
        assert_eq!(
            bearer,
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                params: vec![
                    ("service".into(), "r.example".into()),
                    ("scope".into(), "repository:a/b:pull".into()),
                ],
            })
        );
        assert_eq!(Challenge::parse("Negotiate abc"), None);
    }

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).unwrap()
    }

    fn from(source: CredentialSource) -> Credentials {
        Credentials {
            username: "alice".into(),
            secret: "s3cret".into(),
            source,
        }
    }

    #[test]
    fn credentials_go_to_a_token_service_only_where_their_source_allows() {
        let env = from(CredentialSource::Environment {
            hosts: vec!["registry-1.docker.io".into(), "auth.docker.io".into()],
        });
        let hub = url("https://registry-1.docker.io/v2/a/b");
        assert!(
            env.may_go_to(&url("https://auth.docker.io/token"), &hub)
                .is_ok()
        );
        assert!(
            env.may_go_to(&url("https://registry-1.docker.io:8443/t"), &hub)
                .is_ok()
        );
        let elsewhere = env.may_go_to(&url("https://tokens.example/t"), &hub);
        assert!(elsewhere.unwrap_err().contains("WARDEN_REGISTRY="));
        let plain = env.may_go_to(&url("http://auth.docker.io/token"), &hub);
        assert!(plain.unwrap_err().contains("plain HTTP"));
        // A registry on loopback over plain HTTP with its token service beside it.
        let local = url("http://127.0.0.1:5000/v2/a/b");
        assert!(
            env.may_go_to(&url("http://127.0.0.1:5000/token"), &local)
                .is_ok()
        );
        assert!(
            env.may_go_to(&url("http://127.0.0.1:5001/token"), &local)
                .is_err()
        );
        assert!(
            env.may_go_to(&url("http://localhost:5000/token"), &local)
                .is_err()
        );

        let docker = from(CredentialSource::DockerConfig);
        assert!(
            docker
                .may_go_to(&url("https://auth.docker.io/token"), &hub)
                .is_ok()
        );
        assert!(
            docker
                .may_go_to(&url("http://auth.docker.io/token"), &hub)
                .is_err()
        );
        let insecure = url("http://registry.test:5000/v2/a/b");
        assert!(
            docker
                .may_go_to(&url("https://registry.test/token"), &insecure)
                .is_ok()
        );
        assert!(
            docker
                .may_go_to(&url("https://tokens.example/t"), &insecure)
                .is_err()
        );
    }
}
