//! The distribution API as warden speaks it: manifests and blobs fetched with a size limit and
//! checked against their digests, pushes of blobs (once) and manifests, every exchange
//! bounded. TLS to every registry but one dialled on this machine's loopback (or named by
//! `--insecure-registry`) that answers plain HTTP.

use crate::auth::{self, Asker, Challenge, Credentials};
use crate::bounds::{Bound, Bounds, Load};
use crate::error::OciError;
use crate::exchange::{Answer, Exchange};
use crate::layout::{Descriptor, MANIFEST, MANIFEST_LIMIT, Manifest};
use crate::reference::{Digest, Reference, Target};
use reqwest::{Method, StatusCode};
use std::net::{IpAddr, SocketAddr};

/// The most warden reads of the body of a registry's error.
const ERROR_LIMIT: u64 = 4 << 10;

/// How warden reaches registries: the TLS it verifies them with (the roots warden trusts
/// whenever it speaks TLS itself), the credentials it answers their challenges with, where
/// their names are pinned, and how long each exchange may take.
#[derive(Debug, Clone)]
pub struct Reach {
    pub tls: std::sync::Arc<rustls::ClientConfig>,
    pub credentials: Option<Credentials>,
    /// The addresses the registry's name is pinned to (`--resolve`), if it is.
    pub pinned: Vec<IpAddr>,
    /// Plain HTTP is allowed for this registry, though it is not dialled on loopback
    /// (`--insecure-registry`): as for loopback, HTTPS first, HTTP when it speaks no TLS.
    pub insecure: bool,
    /// How long each exchange may take.
    pub bounds: Bounds,
}

/// Why plain HTTP may be tried with a registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plain {
    /// Every address dialled is this machine's loopback: nothing between to read or change.
    Loopback,
    /// `--insecure-registry` names it.
    Insecure,
}

/// Whether plain HTTP may be tried with a registry dialled at `dialled`, decided on the
/// addresses and never on the name (`localhost` can be pinned anywhere): every one must be
/// loopback (an IPv4-mapped one counts; `0.0.0.0` does not), else `insecure` must say so.
pub(crate) fn plain_http(dialled: &[IpAddr], insecure: bool) -> Option<Plain> {
    if !dialled.is_empty() && dialled.iter().all(|ip| ip.to_canonical().is_loopback()) {
        Some(Plain::Loopback)
    } else if insecure {
        Some(Plain::Insecure)
    } else {
        None
    }
}

/// A client for the repository of one reference.
pub struct Registry {
    http: reqwest::Client,
    base: String,
    reference: Reference,
    credentials: Option<Credentials>,
    bounds: Bounds,
    /// The addresses dialled, for messages.
    dialled: Vec<IpAddr>,
    /// Reached over plain HTTP, and why it may be.
    plain: Option<Plain>,
    /// The `Authorization` the last challenge was answered with, sent up front after it.
    authorization: std::sync::Mutex<Option<String>>,
}

impl Registry {
    /// A client for `reference`'s repository over HTTPS, verified by `reach`'s TLS settings.
    /// The registry's name is resolved once (unless `--resolve` pins it) and the client dials
    /// only those addresses. One dialled on this machine's loopback, or named by
    /// `--insecure-registry`, that does not speak TLS is reached over plain HTTP (found by
    /// asking `/v2/` over HTTPS first, as Docker does).
    pub async fn connect(reference: &Reference, reach: &Reach) -> Result<Registry, OciError> {
        let (host, port) = reference.host_and_port();
        let dialled = dialled(reference, reach).await?;
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")))
            .use_preconfigured_tls((*reach.tls).clone())
            .connect_timeout(reach.bounds.connect)
            .redirect(redirects(reference));
        if host.parse::<IpAddr>().is_err() {
            // What is dialled is what was checked: the client never resolves the name again.
            let addrs: Vec<SocketAddr> = dialled
                .iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect();
            builder = builder.resolve_to_addrs(host, &addrs);
        }
        let http = builder.build().map_err(|e| OciError::Unreachable {
            registry: reference.registry.clone(),
            why: e.to_string(),
        })?;
        let mut registry = Registry {
            http,
            base: format!("https://{}/v2/{}", reference.registry, reference.repository),
            reference: reference.clone(),
            credentials: reach.credentials.clone(),
            bounds: reach.bounds,
            dialled,
            plain: None,
            authorization: std::sync::Mutex::new(None),
        };
        let plain = plain_http(&registry.dialled, reach.insecure);
        if plain.is_some() && registry.speaks_no_tls().await? {
            registry.base = format!("http://{}/v2/{}", reference.registry, reference.repository);
            registry.plain = plain;
            if plain == Some(Plain::Insecure) {
                tracing::warn!(
                    "{} speaks plain HTTP: reached so, as --insecure-registry allows",
                    reference.registry
                );
            }
        }
        Ok(registry)
    }

    /// Whether it answers `/v2/` over HTTPS with something that is not TLS; a bound that
    /// fires on the way is an answer too.
    async fn speaks_no_tls(&self) -> Result<bool, OciError> {
        let no_tls = std::cell::Cell::new(false);
        let probe = self
            .exchange(Load::Small)
            .send(
                self.http
                    .get(format!("https://{}/v2/", self.reference.registry)),
                |e| {
                    no_tls.set(speaks_no_tls(&e));
                    self.failed(&e)
                },
            )
            .await;
        match probe {
            Err(e @ OciError::Bounded { .. }) => Err(e),
            _ => Ok(no_tls.get()),
        }
    }

    /// Whether it is reached over plain HTTP though not dialled on loopback
    /// (`--insecure-registry`).
    pub fn plain_http(&self) -> bool {
        self.plain == Some(Plain::Insecure)
    }

    fn exchange(&self, load: Load) -> Exchange<'_> {
        Exchange {
            registry: &self.reference.registry,
            bounds: &self.bounds,
            load,
        }
    }

    /// Sends the request `make` builds, answering a 401's challenge once.
    async fn send(
        &self,
        make: impl Fn() -> reqwest::RequestBuilder,
        what: &str,
        load: Load,
    ) -> Result<Answer, OciError> {
        let mut answer = self.attempt(&make, load).await?;
        let challenge = answer
            .response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|h| h.to_str().ok())
            .and_then(Challenge::parse);
        if let (StatusCode::UNAUTHORIZED, Some(challenge)) = (answer.response.status(), challenge) {
            let reached = reqwest::Url::parse(&self.base)
                .map_err(|e| OciError::BadReference(format!("`{}`: {e}", self.reference)))?;
            let asker = Asker {
                http: &self.http,
                registry: &self.reference.registry,
                reached: &reached,
                bounds: &self.bounds,
            };
            let header = auth::answer(&asker, &challenge, self.credentials.as_ref()).await?;
            *self
                .authorization
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(header);
            answer = self.attempt(&make, load).await?;
        }
        self.checked(answer, what).await
    }

    async fn attempt(
        &self,
        make: &impl Fn() -> reqwest::RequestBuilder,
        load: Load,
    ) -> Result<Answer, OciError> {
        let mut request = make();
        let authorization = self
            .authorization
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(header) = authorization {
            request = request.header(reqwest::header::AUTHORIZATION, header);
        }
        self.exchange(load).send(request, |e| self.failed(&e)).await
    }

    /// What a request that failed before its answer says: a certificate not trusted, a
    /// registry that speaks plain HTTP where it may not, one that is not there.
    fn failed(&self, error: &reqwest::Error) -> OciError {
        let registry = self.reference.registry.clone();
        let mut why = deepest(error);
        if speaks_no_tls(error) {
            let (host, _) = self.reference.host_and_port();
            let at = match host.parse::<IpAddr>() {
                Ok(_) => String::new(),
                Err(_) => format!(
                    "; {host} is dialled at {}, not this machine's loopback",
                    self.dialled
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            why = format!(
                "it answers plain HTTP, not HTTPS ({why}{at}); if the network to it is trusted, \
                 pass --insecure-registry {registry} (the audit flags what came so)"
            );
        }
        if let Some(url) = error.url() {
            // Which request: a reader can tell HTTPS from plain HTTP, and one path from another.
            why = format!("{url}: {why}");
        }
        let certificate = causes(error).any(|c| {
            c.downcast_ref::<rustls::Error>()
                .is_some_and(|t| matches!(t, rustls::Error::InvalidCertificate(_)))
        });
        if certificate {
            OciError::Untrusted { registry, why }
        } else {
            OciError::Unreachable { registry, why }
        }
    }

    async fn checked(&self, answer: Answer, what: &str) -> Result<Answer, OciError> {
        match answer.response.status() {
            s if s.is_success() => Ok(answer),
            StatusCode::NOT_FOUND => Err(OciError::NotFound {
                what: what.to_owned(),
            }),
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => Err(OciError::Unauthorised {
                registry: self.reference.registry.clone(),
                status: s.as_u16(),
            }),
            s => {
                let body = answer.body(what, ERROR_LIMIT).await.unwrap_or_default();
                Err(OciError::Registry {
                    registry: self.reference.registry.clone(),
                    what: what.to_owned(),
                    status: s.as_u16(),
                    body: String::from_utf8_lossy(&body).chars().take(300).collect(),
                })
            }
        }
    }

    /// The manifest the reference names, its digest taken from its bytes (never from the
    /// registry's word), and checked against the reference's digest when it has one.
    pub async fn manifest(&self, target: &Target) -> Result<(Digest, Vec<u8>), OciError> {
        let (path, what) = match target {
            Target::Tag(tag) => (tag.clone(), format!("the tag {}", self.at(target))),
            Target::Digest(d) => (d.to_string(), format!("the manifest {}", self.at(target))),
        };
        let url = format!("{}/manifests/{path}", self.base);
        let request = || {
            self.http
                .get(&url)
                .header(reqwest::header::ACCEPT, MANIFEST)
        };
        let answer = self.send(request, &what, Load::Small).await?;
        let bytes = answer.body(&what, MANIFEST_LIMIT).await?;
        let digest = Digest::of(&bytes);
        if let Target::Digest(expected) = target
            && &digest != expected
        {
            return Err(OciError::DigestMismatch {
                what,
                expected: expected.to_string(),
                got: digest.to_string(),
            });
        }
        Ok((digest, bytes))
    }

    /// The blob `descriptor` names, at most `limit` bytes (refused before a byte is fetched
    /// when it says it is larger), checked against its digest.
    pub async fn blob(
        &self,
        descriptor: &Descriptor,
        limit: u64,
        what: &str,
    ) -> Result<Vec<u8>, OciError> {
        if descriptor.size > limit {
            return Err(OciError::TooLarge {
                what: what.to_owned(),
                limit,
            });
        }
        let digest = descriptor.digest()?;
        let url = format!("{}/blobs/{digest}", self.base);
        let answer = self
            .send(|| self.http.get(&url), what, Load::Fetch(descriptor.size))
            .await?;
        let bytes = answer.body(what, limit).await?;
        let got = Digest::of(&bytes);
        if got != digest {
            return Err(OciError::DigestMismatch {
                what: what.to_owned(),
                expected: digest.to_string(),
                got: got.to_string(),
            });
        }
        Ok(bytes)
    }

    /// Uploads `bytes` as a blob unless the registry has it.
    pub async fn push_blob(&self, bytes: &[u8]) -> Result<Digest, OciError> {
        let digest = Digest::of(bytes);
        let what = format!("the blob {digest}");
        let url = format!("{}/blobs/{digest}", self.base);
        match self
            .send(|| self.http.request(Method::HEAD, &url), &what, Load::Small)
            .await
        {
            Ok(_) => return Ok(digest),
            Err(OciError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let url = format!("{}/blobs/uploads/", self.base);
        let started = self
            .send(|| self.http.post(&url), "starting an upload", Load::Small)
            .await?
            .response;
        let location = started
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| OciError::Registry {
                registry: self.reference.registry.clone(),
                what: "starting an upload".into(),
                status: started.status().as_u16(),
                body: "no Location header".into(),
            })?;
        let url = started
            .url()
            .join(location)
            .map_err(|e| OciError::Layout(format!("the upload's location {location}: {e}")))?;
        let separator = if url.query().is_some() { '&' } else { '?' };
        let upload = format!("{url}{separator}digest={digest}");
        let put = || {
            self.http
                .put(&upload)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(bytes.to_vec())
        };
        self.send(put, &what, Load::Upload(bytes.len() as u64))
            .await?;
        Ok(digest)
    }

    /// Pushes `manifest` under `tag` (or its digest when `None`); answers its digest.
    pub async fn push_manifest(
        &self,
        manifest: &Manifest,
        tag: Option<&str>,
    ) -> Result<Digest, OciError> {
        let bytes = manifest.to_bytes();
        let digest = Digest::of(&bytes);
        let at = tag.map_or_else(|| digest.to_string(), str::to_owned);
        let url = format!("{}/manifests/{at}", self.base);
        let put = || {
            self.http
                .put(&url)
                .header(reqwest::header::CONTENT_TYPE, MANIFEST)
                .body(bytes.clone())
        };
        self.send(put, &format!("the manifest {at}"), Load::Small)
            .await?;
        Ok(digest)
    }

    /// The reference at `target`, for messages.
    fn at(&self, target: &Target) -> Reference {
        Reference {
            target: target.clone(),
            ..self.reference.clone()
        }
    }
}

/// The addresses warden dials for `reference`'s registry: those `--resolve` pins, the address
/// it names, or what its name resolves to now (once, within the connect bound).
async fn dialled(reference: &Reference, reach: &Reach) -> Result<Vec<IpAddr>, OciError> {
    let (host, port) = reference.host_and_port();
    if !reach.pinned.is_empty() {
        return Ok(reach.pinned.clone());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let unreachable = |why: String| OciError::Unreachable {
        registry: reference.registry.clone(),
        why,
    };
    let lookup = tokio::net::lookup_host((host, port));
    match tokio::time::timeout(reach.bounds.connect, lookup).await {
        Err(_) => Err(OciError::Bounded {
            registry: reference.registry.clone(),
            exchange: format!("resolving {host}"),
            bound: Bound::Connect,
            limit: reach.bounds.connect,
        }),
        Ok(Err(e)) => Err(unreachable(format!("its name does not resolve: {e}"))),
        Ok(Ok(found)) => {
            let mut addrs: Vec<IpAddr> = Vec::new();
            for ip in found.map(|a| a.ip()) {
                if !addrs.contains(&ip) {
                    addrs.push(ip);
                }
            }
            if addrs.is_empty() {
                return Err(unreachable("its name resolves to no address".into()));
            }
            Ok(addrs)
        }
    }
}

/// Redirects are followed (a registry may send a blob to its storage elsewhere) over HTTPS,
/// and over plain HTTP only to the registry's own host and port: what is dialled elsewhere was
/// never checked to be loopback.
fn redirects(reference: &Reference) -> reqwest::redirect::Policy {
    /// As many as reqwest's default policy follows.
    const MOST: usize = 10;
    let (host, port) = reference.host_and_port();
    let (host, port) = (host.to_ascii_lowercase(), port);
    reqwest::redirect::Policy::custom(move |attempt| {
        let url = attempt.url();
        let own = url
            .host_str()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .is_some_and(|h| h.eq_ignore_ascii_case(&host))
            && url.port_or_known_default() == Some(port);
        if attempt.previous().len() >= MOST {
            attempt.error(format!("more than {MOST} redirects"))
        } else if url.scheme() == "https" || own {
            attempt.follow()
        } else {
            let refused =
                format!("a redirect to {url}: plain HTTP goes only to the registry's own address");
            attempt.error(refused)
        }
    })
}

/// Whether a request failed because the server answered the TLS handshake with something
/// that is not TLS (a plain HTTP server), as opposed to a certificate warden does not trust
/// or a server that is not there.
fn speaks_no_tls(error: &reqwest::Error) -> bool {
    causes(error).any(|e| {
        e.downcast_ref::<rustls::Error>()
            .is_some_and(|tls| matches!(tls, rustls::Error::InvalidMessage(_)))
    })
}

/// What went wrong at the bottom of `error`: a certificate not trusted, a refused connection.
fn deepest(error: &reqwest::Error) -> String {
    causes(error)
        .last()
        .map_or_else(|| error.to_string(), ToString::to_string)
}

/// `error` and its causes, looking inside the I/O errors that wrap TLS and socket errors
/// (whose `source` skips the error they wrap).
fn causes<'e>(
    error: &'e (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => io
            .get_ref()
            .map(|inner| inner as &(dyn std::error::Error + 'static)),
        None => e.source(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_decided_on_the_addresses_dialled() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let loopback = [ip("127.0.0.1"), ip("::1")];
        assert_eq!(plain_http(&loopback, false), Some(Plain::Loopback));
        assert_eq!(plain_http(&[ip("127.9.8.7")], false), Some(Plain::Loopback));
        assert_eq!(
            plain_http(&[ip("::ffff:127.0.0.1")], false),
            Some(Plain::Loopback)
        );
        // `localhost` pinned elsewhere, a name with one address off loopback, the address
        // Linux dials as loopback without being it, no address at all: only when named.
        for off in [
            vec![ip("192.0.2.1")],
            vec![ip("127.0.0.1"), ip("192.0.2.1")],
            vec![ip("0.0.0.0")],
            vec![],
        ] {
            assert_eq!(plain_http(&off, false), None, "{off:?}");
            assert_eq!(plain_http(&off, true), Some(Plain::Insecure), "{off:?}");
        }
    }
}
