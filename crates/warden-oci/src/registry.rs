//! The distribution API as warden speaks it: manifests and blobs fetched with a size limit and
//! checked against their digests, pushes of blobs (once) and manifests. TLS to every registry
//! but one on this machine's loopback.

use crate::auth::{Challenge, Credentials, answer};
use crate::error::OciError;
use crate::layout::{MANIFEST, MANIFEST_LIMIT, Manifest};
use crate::reference::{Digest, Reference, Target};
use reqwest::{Method, StatusCode};

/// How warden reaches registries: the TLS it verifies them with (the roots warden trusts
/// whenever it speaks TLS itself) and the credentials it answers their challenges with.
#[derive(Debug, Clone)]
pub struct Reach {
    pub tls: std::sync::Arc<rustls::ClientConfig>,
    pub credentials: Option<Credentials>,
    /// The addresses the registry's name is pinned to (`--resolve`), if it is.
    pub pinned: Vec<std::net::IpAddr>,
    /// Plain HTTP is allowed for this registry, though it is not on loopback
    /// (`--insecure-registry`): as for loopback, HTTPS first, HTTP when it speaks no TLS.
    pub insecure: bool,
}

/// A client for the repository of one reference.
pub struct Registry {
    http: reqwest::Client,
    base: String,
    reference: Reference,
    credentials: Option<Credentials>,
    /// The `Authorization` the last challenge was answered with, sent up front after it.
    authorization: std::sync::Mutex<Option<String>>,
}

impl Registry {
    /// A client for `reference`'s repository over HTTPS, verified by `reach`'s TLS settings. A
    /// registry on this machine's loopback that does not speak TLS is reached over plain HTTP
    /// (found by asking `/v2/` over HTTPS first, as Docker does).
    pub async fn connect(reference: &Reference, reach: &Reach) -> Result<Registry, OciError> {
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")))
            .use_preconfigured_tls((*reach.tls).clone());
        if !reach.pinned.is_empty() {
            let (host, port) = reference.host_and_port();
            let addrs: Vec<std::net::SocketAddr> = reach
                .pinned
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, port))
                .collect();
            builder = builder.resolve_to_addrs(host, &addrs);
        }
        let http = builder.build().map_err(|e| OciError::Unreachable {
            registry: reference.registry.clone(),
            why: e.to_string(),
        })?;
        let https = format!("https://{}/v2/", reference.registry);
        let scheme = if (reference.is_loopback() || reach.insecure)
            && http
                .get(&https)
                .send()
                .await
                .is_err_and(|e| speaks_no_tls(&e))
        {
            "http"
        } else {
            "https"
        };
        if scheme == "http" && !reference.is_loopback() {
            tracing::warn!(
                "{} speaks plain HTTP: reached so, as --insecure-registry allows",
                reference.registry
            );
        }
        Ok(Registry {
            http,
            base: format!(
                "{scheme}://{}/v2/{}",
                reference.registry, reference.repository
            ),
            reference: reference.clone(),
            credentials: reach.credentials.clone(),
            authorization: std::sync::Mutex::new(None),
        })
    }

    /// Sends the request `make` builds, answering a 401's challenge once.
    /// Whether it is reached over plain HTTP.
    pub fn plain_http(&self) -> bool {
        self.base.starts_with("http://")
    }

    async fn send(
        &self,
        make: impl Fn() -> reqwest::RequestBuilder,
        what: &str,
    ) -> Result<reqwest::Response, OciError> {
        let mut response = self.attempt(&make).await?;
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|h| h.to_str().ok())
            .and_then(Challenge::parse);
        if let (StatusCode::UNAUTHORIZED, Some(challenge)) = (response.status(), challenge) {
            let header = answer(
                &self.http,
                &challenge,
                self.credentials.as_ref(),
                &self.reference.registry,
            )
            .await?;
            *self
                .authorization
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(header);
            response = self.attempt(&make).await?;
        }
        self.checked(response, what).await
    }

    async fn attempt(
        &self,
        make: &impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, OciError> {
        let mut request = make();
        let authorization = self
            .authorization
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(header) = authorization {
            request = request.header(reqwest::header::AUTHORIZATION, header);
        }
        request.send().await.map_err(|e| {
            let registry = self.reference.registry.clone();
            let mut why = deepest(&e);
            if speaks_no_tls(&e) {
                why = format!(
                    "it answers plain HTTP, not HTTPS ({why}); if the network to it is trusted, \
                     pass --insecure-registry {registry} (the audit flags what came so)"
                );
            }
            let certificate = causes(&e).any(|c| {
                c.downcast_ref::<rustls::Error>()
                    .is_some_and(|t| matches!(t, rustls::Error::InvalidCertificate(_)))
            });
            if certificate {
                OciError::Untrusted { registry, why }
            } else {
                OciError::Unreachable { registry, why }
            }
        })
    }

    async fn checked(
        &self,
        response: reqwest::Response,
        what: &str,
    ) -> Result<reqwest::Response, OciError> {
        match response.status() {
            s if s.is_success() => Ok(response),
            StatusCode::NOT_FOUND => Err(OciError::NotFound {
                what: what.to_owned(),
            }),
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => Err(OciError::Unauthorised {
                registry: self.reference.registry.clone(),
                status: s.as_u16(),
            }),
            s => {
                let body = response.text().await.unwrap_or_default();
                Err(OciError::Registry {
                    registry: self.reference.registry.clone(),
                    what: what.to_owned(),
                    status: s.as_u16(),
                    body: body.chars().take(300).collect(),
                })
            }
        }
    }

    /// Reads a response's body, refusing past `limit` bytes.
    async fn body(
        mut response: reqwest::Response,
        what: &str,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let too_large = || OciError::TooLarge {
            what: what.to_owned(),
            limit,
        };
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| OciError::Unreachable {
            registry: String::new(),
            why: format!("reading {what}: {e}"),
        })? {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
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
        let response = self.send(request, &what).await?;
        let bytes = Self::body(response, &what, MANIFEST_LIMIT).await?;
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

    /// The blob at `digest`, at most `limit` bytes, checked against its digest.
    pub async fn blob(&self, digest: &Digest, limit: u64, what: &str) -> Result<Vec<u8>, OciError> {
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self.send(|| self.http.get(&url), what).await?;
        let bytes = Self::body(response, what, limit).await?;
        let got = Digest::of(&bytes);
        if &got != digest {
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
            .send(|| self.http.request(Method::HEAD, &url), &what)
            .await
        {
            Ok(_) => return Ok(digest),
            Err(OciError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let url = format!("{}/blobs/uploads/", self.base);
        let started = self
            .send(|| self.http.post(&url), "starting an upload")
            .await?;
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
        self.send(put, &what).await?;
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
        self.send(put, &format!("the manifest {at}")).await?;
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
