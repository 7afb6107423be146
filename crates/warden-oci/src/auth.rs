//! Registry credentials as users have them, and the distribution spec's challenges: a registry
//! that answers 401 names Basic or a Bearer token service, and warden answers it once per
//! request with what Docker's `config.json` (its `auths`, `credHelpers` and `credsStore`) or the
//! environment (`WARDEN_REGISTRY_USERNAME`, `WARDEN_REGISTRY_PASSWORD`) hold for that registry.

use crate::error::OciError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A user name and its password or token.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub secret: String,
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
    /// What the environment or Docker's configuration holds for `registry`; `None` for
    /// anonymous access.
    pub fn for_registry(registry: &str) -> Result<Option<Credentials>, OciError> {
        if let (Ok(username), Ok(secret)) = (
            std::env::var("WARDEN_REGISTRY_USERNAME"),
            std::env::var("WARDEN_REGISTRY_PASSWORD"),
        ) {
            return Ok(Some(Credentials { username, secret }));
        }
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
                return Ok(Some(Credentials { username, secret }));
            }
        }
        match &config.creds_store {
            Some(store) => helper_get(store, registry).map(Some),
            None => Ok(None),
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

/// The `Authorization` header that answers `challenge`.
pub(crate) async fn answer(
    http: &reqwest::Client,
    challenge: &Challenge,
    credentials: Option<&Credentials>,
    registry: &str,
) -> Result<String, OciError> {
    let unauthorised = |status: u16| OciError::Unauthorised {
        registry: registry.to_owned(),
        status,
    };
    match challenge {
        Challenge::Basic => credentials.map(Credentials::basic).ok_or(unauthorised(401)),
        Challenge::Bearer { realm, params } => {
            let mut request = http.get(realm).query(params);
            if let Some(c) = credentials {
                request = request.header(reqwest::header::AUTHORIZATION, c.basic());
            }
            let response = request.send().await.map_err(|e| OciError::Unreachable {
                registry: realm.clone(),
                why: e.to_string(),
            })?;
            if !response.status().is_success() {
                return Err(unauthorised(response.status().as_u16()));
            }
            let token: TokenAnswer = response.json().await.map_err(|e| OciError::Registry {
                registry: registry.to_owned(),
                what: format!("a token from {realm}"),
                status: 200,
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
}
