//! Credentials a sandbox can use but never read. Each one's value stays in warden: the gate
//! (or a wasm tool's host-side HTTP) sets its header on requests to its host, replacing any
//! header of that name the sandbox sent, and never on requests elsewhere. A credential that
//! names an `env` variable puts a random placeholder there instead of the value, fresh for each
//! sandbox, for programs that insist on a token: whatever header they put it in, the gate sets
//! the credential's own header, and the placeholder itself is never swapped for the value, so
//! a header a host echoes back (`X-Echo: $TOKEN`) echoes only the placeholder. What comes back
//! from a credential's host is scrubbed of the values all the same (see `scrub`).

use crate::ca::{CaError, SessionCa};
use std::sync::{Arc, OnceLock};
use warden_core::Credential;

/// The credentials of one sandbox, values resolved and placeholders drawn, and the CA that
/// signs the certificates the gate shows for their hosts; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    held: Arc<Vec<Held>>,
    /// Made on first use: a wasm tool's HTTPS needs none.
    ca: Arc<OnceLock<Result<SessionCa, CaError>>>,
}

#[derive(Debug)]
struct Held {
    /// Lowercase, without a trailing dot.
    host: String,
    header: String,
    /// What the header is set to: the prefix and the value.
    header_value: String,
    /// The value alone: what is scrubbed from what the host sends back.
    value: String,
    /// What stands in for the value inside, if anything does.
    placeholder: Option<Placeholder>,
    allow_plain_http: bool,
}

#[derive(Debug)]
struct Placeholder {
    variable: String,
    text: String,
}

impl Credentials {
    /// `resolved` pairs each credential with its header value (prefix included), as
    /// `Grants::resolve_credentials` reads them.
    pub fn new(resolved: Vec<(Credential, String)>) -> Self {
        let held = resolved
            .into_iter()
            .map(|(c, header_value)| {
                let value = header_value
                    .strip_prefix(c.prefix.as_str())
                    .unwrap_or(&header_value)
                    .to_owned();
                let placeholder = c.env.map(|variable| {
                    let text = placeholder(&variable);
                    Placeholder { variable, text }
                });
                Held {
                    host: normal(&c.host),
                    header: c.header,
                    header_value,
                    value,
                    placeholder,
                    allow_plain_http: c.allow_plain_http,
                }
            })
            .collect();
        Self {
            held: Arc::new(held),
            ca: Arc::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Does a request to `host` carry a credential?
    pub fn covers(&self, host: &str) -> bool {
        let host = normal(host);
        self.held.iter().any(|h| h.host == host)
    }

    /// The variables the sandbox gets: each `env` credential's placeholder.
    pub fn sandbox_env(&self) -> Vec<(String, String)> {
        self.held
            .iter()
            .filter_map(|h| h.placeholder.as_ref())
            .map(|p| (p.variable.clone(), p.text.clone()))
            .collect()
    }

    /// A request's headers, `(name, value)` in order, as they go to `host`: each of that
    /// host's credentials set in its own header, in place of any the sandbox sent. Nothing
    /// else changes: a placeholder in another header stays a placeholder.
    pub fn apply(&self, host: &str, headers: &mut Vec<(String, Vec<u8>)>) {
        let host = normal(host);
        for held in self.held.iter().filter(|h| h.host == host) {
            headers.retain(|(name, _)| !name.eq_ignore_ascii_case(&held.header));
            headers.push((held.header.clone(), held.header_value.clone().into_bytes()));
        }
    }

    /// Why a request to `host` over plain HTTP is refused: a credential of that host goes
    /// over TLS only, unless it says `allow_plain_http`.
    pub fn plain_http_refusal(&self, host: &str) -> Option<String> {
        let host = normal(host);
        let held = self
            .held
            .iter()
            .find(|h| h.host == host && !h.allow_plain_http)?;
        Some(format!(
            "the {} credential for {host} goes over TLS only: ask for https://{host}/ (or let \
             the credential say `allow_plain_http = true`)",
            held.header
        ))
    }

    /// The values the sandbox must never get back, for scrubbing what its credentials'
    /// hosts answer.
    pub(crate) fn secrets(&self) -> Vec<Vec<u8>> {
        self.held
            .iter()
            .map(|h| h.value.as_bytes().to_vec())
            .collect()
    }

    /// The certificate (PEM) of this sandbox's CA, which the sandbox must trust for HTTPS to
    /// the credentials' hosts; its key never leaves warden.
    pub fn ca_pem(&self) -> Result<String, CaError> {
        self.ca().map(|ca| ca.pem().to_owned())
    }

    /// What a sandbox whose credentials may go over HTTPS must trust, PEM: this machine's
    /// roots, then the sandbox's CA; `None` without credentials.
    pub fn trust_bundle(&self) -> Result<Option<String>, CaError> {
        if self.is_empty() {
            return Ok(None);
        }
        let mut bundle = system_roots().to_owned();
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(&self.ca_pem()?);
        Ok(Some(bundle))
    }

    /// The variables that point a sandbox's programs at the bundle at `path` (inside).
    pub fn trust_env(path: &str) -> Vec<(String, String)> {
        TRUST_VARIABLES
            .iter()
            .map(|name| ((*name).to_owned(), path.to_owned()))
            .collect()
    }

    /// The TLS server side the gate shows the sandbox for `host`.
    pub(crate) fn acceptor(&self, host: &str) -> Result<tokio_rustls::TlsAcceptor, CaError> {
        self.ca()?.acceptor(&normal(host))
    }

    fn ca(&self) -> Result<&SessionCa, CaError> {
        self.ca
            .get_or_init(|| SessionCa::new(self.held.iter().map(|h| h.host.as_str())))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// [`Credentials::apply`] on an `http` header map.
    pub fn apply_to(&self, host: &str, map: &mut http::HeaderMap) -> Result<(), HeaderError> {
        if !self.covers(host) {
            return Ok(());
        }
        let mut headers: Vec<(String, Vec<u8>)> = map
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        self.apply(host, &mut headers);
        map.clear();
        for (name, value) in headers {
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HeaderError::Name(name.clone()))?;
            let mut value = http::HeaderValue::from_bytes(&value)
                .map_err(|_| HeaderError::Value(name.to_string()))?;
            value.set_sensitive(true);
            map.append(name, value);
        }
        Ok(())
    }
}

/// A credential that cannot go into an `http` header map.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HeaderError {
    #[error("`{0}` is not a valid header name")]
    Name(String),
    #[error("the {0} credential is not a valid header value")]
    Value(String),
}

/// Where this machine keeps its roots: Debian's, then Fedora's.
const SYSTEM_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// This machine's roots (PEM), read once: every sandbox with credentials starts its bundle
/// with them.
fn system_roots() -> &'static str {
    static ROOTS: OnceLock<String> = OnceLock::new();
    ROOTS.get_or_init(|| {
        SYSTEM_BUNDLES
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
    })
}

/// The variables OpenSSL, Python's requests, curl, Node, git and pip read a bundle from.
pub const TRUST_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

pub(crate) fn normal(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// `warden-placeholder-<variable>-<32 hex>`: unguessable, and plainly not the token.
fn placeholder(variable: &str) -> String {
    let mut bytes = [0u8; 16];
    // Without the system's randomness a placeholder could be guessed; it still never
    // becomes the value anywhere but at its host, so the time is an acceptable fallback.
    if getrandom::getrandom(&mut bytes).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = now.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("warden-placeholder-{}-{hex}", variable.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(host: &str, env: Option<&str>) -> (Credential, String) {
        (
            Credential {
                host: host.into(),
                header: "Authorization".into(),
                from_host: "TOKEN".into(),
                prefix: "Bearer ".into(),
                env: env.map(str::to_owned),
                allow_plain_http: false,
            },
            "Bearer real-value".into(),
        )
    }

    #[test]
    fn the_header_is_set_for_its_host_only_and_a_forged_one_replaced() {
        let c = Credentials::new(vec![credential("Api.Test", None)]);
        let mut headers = vec![
            ("authorization".to_owned(), b"Bearer forged".to_vec()),
            ("Accept".to_owned(), b"*/*".to_vec()),
        ];
        c.apply("api.test.", &mut headers);
        assert_eq!(
            headers,
            vec![
                ("Accept".to_owned(), b"*/*".to_vec()),
                ("Authorization".to_owned(), b"Bearer real-value".to_vec()),
            ]
        );
        let mut elsewhere = vec![("Authorization".to_owned(), b"Bearer forged".to_vec())];
        c.apply("other.test", &mut elsewhere);
        assert_eq!(elsewhere[0].1, b"Bearer forged");
    }

    #[test]
    fn a_placeholder_is_never_swapped_for_the_value() {
        let c = Credentials::new(vec![credential("api.test", Some("GITHUB_TOKEN"))]);
        let env = c.sandbox_env();
        assert_eq!(env.len(), 1);
        let (name, placeholder) = &env[0];
        assert_eq!(name, "GITHUB_TOKEN");
        assert!(placeholder.starts_with("warden-placeholder-github_token-"));
        assert!(!placeholder.contains("real-value"));
        let fresh = Credentials::new(vec![credential("api.test", Some("GITHUB_TOKEN"))]);
        assert_ne!(fresh.sandbox_env()[0].1, *placeholder, "fresh per sandbox");

        // A header the host would echo keeps the placeholder; the credential's own is set.
        let sent = format!("token {placeholder}").into_bytes();
        let mut headers = vec![
            ("X-Echo".to_owned(), sent.clone()),
            ("Authorization".to_owned(), sent.clone()),
        ];
        c.apply("api.test", &mut headers);
        assert_eq!(
            headers,
            vec![
                ("X-Echo".to_owned(), sent.clone()),
                ("Authorization".to_owned(), b"Bearer real-value".to_vec()),
            ]
        );
        let mut elsewhere = vec![("Authorization".to_owned(), sent.clone())];
        c.apply("other.test", &mut elsewhere);
        assert_eq!(elsewhere[0].1, sent);
        assert_eq!(c.secrets(), vec![b"real-value".to_vec()]);
    }

    #[test]
    fn plain_http_is_refused_unless_the_credential_allows_it() {
        let c = Credentials::new(vec![credential("api.test", None)]);
        let why = c.plain_http_refusal("API.test.").unwrap_or_default();
        assert!(
            why.contains("TLS only") && why.contains("allow_plain_http"),
            "{why}"
        );
        assert_eq!(c.plain_http_refusal("other.test"), None);
        let (mut allowed, value) = credential("api.test", None);
        allowed.allow_plain_http = true;
        let c = Credentials::new(vec![(allowed, value)]);
        assert_eq!(c.plain_http_refusal("api.test"), None);
    }
}
