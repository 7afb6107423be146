//! How warden itself reaches the outside on every tool's behalf: the names it pins
//! (`--resolve`) and the roots it verifies servers against whenever it speaks TLS itself (a
//! wasm tool's HTTPS, a shell's HTTPS to a host that carries a credential). Never warden's own
//! session CAs: those are for the sandboxes to trust, not for warden.

use crate::resolver::Resolver;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::sync::{Arc, OnceLock};

/// warden's egress configuration, shared by every backend; cheap to clone.
#[derive(Clone, Debug)]
pub struct Egress {
    resolver: Resolver,
    tls: Arc<rustls::ClientConfig>,
    /// The roots trusted beside Mozilla's, which `tls` was built with.
    extra: Arc<Vec<CertificateDer<'static>>>,
}

/// Extra roots that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("upstream roots: {0}; give a PEM file of CA certificates")]
pub struct RootsError(String);

impl Default for Egress {
    fn default() -> Self {
        Self::new(Resolver::default())
    }
}

impl Egress {
    /// The system's resolver with `resolver`'s overrides; upstream TLS verified against the
    /// Mozilla roots (what Debian's ca-certificates holds too).
    pub fn new(resolver: Resolver) -> Self {
        static DEFAULT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
        let tls = DEFAULT.get_or_init(|| client_config(&[])).clone();
        Self {
            resolver,
            tls,
            extra: Arc::default(),
        }
    }

    /// Also trusts the CA certificates in `pem` upstream: a private PKI, or a test's CA.
    pub fn with_roots_pem(self, pem: &[u8]) -> Result<Self, RootsError> {
        let extra = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RootsError(e.to_string()))?;
        if extra.is_empty() {
            return Err(RootsError("no certificate found".into()));
        }
        Ok(self.trusting(extra))
    }

    /// Also trusts the system's store (`/etc/ssl/certs`, or `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR`): for what an administrator reaches as any program on the machine does,
    /// such as an OCI registry; never for tools, which get Mozilla's roots and `--upstream-roots`
    /// only. What cannot be read is skipped and logged.
    pub fn with_system_roots(self) -> Self {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::debug!("the system's certificate store: {error}");
        }
        self.trusting(found.certs)
    }

    fn trusting(mut self, more: Vec<CertificateDer<'static>>) -> Self {
        let mut extra = (*self.extra).clone();
        extra.extend(more);
        self.tls = client_config(&extra);
        self.extra = Arc::new(extra);
        self
    }

    /// The same, resolving with `resolver`.
    pub fn with_resolver(mut self, resolver: Resolver) -> Self {
        self.resolver = resolver;
        self
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// The client configuration for TLS to upstream servers.
    pub fn tls(&self) -> Arc<rustls::ClientConfig> {
        self.tls.clone()
    }
}

fn client_config(extra: &[CertificateDer<'static>]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    roots.add_parsable_certificates(extra.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(roots.clone())
                .with_no_client_auth()
        })
        .unwrap_or_else(|_| {
            // The ring provider supports the default versions; this cannot fail.
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth()
        });
    Arc::new(config)
}
