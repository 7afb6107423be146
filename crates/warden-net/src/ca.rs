//! A sandbox's own certificate authority: the gate terminates TLS only for hosts that carry a
//! credential, showing the sandbox a certificate for the host signed by this CA, which the
//! sandbox trusts through a mounted bundle. The key lives in warden's memory for the
//! sandbox's life and nowhere else; no other sandbox, and never warden itself, trusts it.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_rustls::TlsAcceptor;

/// One sandbox's CA, and the server configurations it signed so far, by host.
pub(crate) struct SessionCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    acceptors: Mutex<HashMap<String, TlsAcceptor>>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionCa")
    }
}

impl SessionCa {
    pub(crate) fn new() -> Result<Self, String> {
        let failed = |e: rcgen::Error| format!("making the sandbox's CA: {e}");
        let key = KeyPair::generate().map_err(failed)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        // It signs host certificates only, never another CA.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, "warden sandbox CA (one sandbox only)");
        let cert = params.self_signed(&key).map_err(failed)?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
            acceptors: Mutex::default(),
        })
    }

    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// The TLS server side for `host` (a name, or an IP literal, brackets allowed).
    pub(crate) fn acceptor(&self, host: &str) -> Result<TlsAcceptor, String> {
        let mut acceptors = self.acceptors.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = acceptors.get(host) {
            return Ok(a.clone());
        }
        let failed = |e: rcgen::Error| format!("a certificate for {host}: {e}");
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let key = KeyPair::generate().map_err(failed)?;
        let leaf = CertificateParams::new(vec![name.to_owned()])
            .map_err(failed)?
            .signed_by(&key, &self.issuer)
            .map_err(failed)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(|e| format!("a certificate for {host}: {e}"))?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        acceptors.insert(host.to_owned(), acceptor.clone());
        Ok(acceptor)
    }
}
