//! A sandbox's own certificate authority: the gate terminates TLS only for hosts that carry a
//! credential, showing the sandbox a certificate for the host signed by this CA, which the
//! sandbox trusts through a mounted bundle. The key lives in warden's memory for the
//! sandbox's life and nowhere else; no other sandbox, and never warden itself, trusts it.
//! Should the bundle travel anyway, the CA vouches for little: a critical name constraint
//! limits it to the credentials' hosts, and it (with every certificate it signs) is valid
//! for a day from when it was made.

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType, GeneralSubtree,
    IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use time::{Duration, OffsetDateTime};
use tokio_rustls::TlsAcceptor;

/// How long the CA and its certificates are valid: a day, longer than a call or an agent's
/// session, short enough that a copied bundle soon vouches for nothing.
const LIFETIME: Duration = Duration::days(1);

/// How far before its making a certificate is valid from, for clocks a little behind.
const SKEW: Duration = Duration::minutes(10);

/// Why a sandbox's CA, or the server side it signs for a host, could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CaError {
    #[error("making the sandbox's CA: {0}")]
    Authority(rcgen::Error),
    #[error("a certificate for {host}: {error}")]
    Certificate { host: String, error: rcgen::Error },
    #[error("the TLS server side for {host}: {error}")]
    Tls { host: String, error: rustls::Error },
}

/// One sandbox's CA, and the server configurations it signed so far, by host.
pub(crate) struct SessionCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    /// When the CA was made: its certificates' validity starts and ends with its own.
    made: OffsetDateTime,
    acceptors: Mutex<HashMap<String, TlsAcceptor>>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionCa")
    }
}

impl SessionCa {
    /// A CA for `hosts` (names, or IP literals, brackets allowed) alone.
    pub(crate) fn new<'a>(hosts: impl IntoIterator<Item = &'a str>) -> Result<Self, CaError> {
        let key = KeyPair::generate().map_err(CaError::Authority)?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(CaError::Authority)?;
        // It signs host certificates only, never another CA.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, "warden sandbox CA (one sandbox only)");
        params.name_constraints = Some(constraints(hosts));
        let made = OffsetDateTime::now_utc();
        (params.not_before, params.not_after) = (made - SKEW, made + LIFETIME);
        let cert = params.self_signed(&key).map_err(CaError::Authority)?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
            made,
            acceptors: Mutex::default(),
        })
    }

    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// The TLS server side for `host` (a name, or an IP literal, brackets allowed).
    pub(crate) fn acceptor(&self, host: &str) -> Result<TlsAcceptor, CaError> {
        let mut acceptors = self
            .acceptors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(a) = acceptors.get(host) {
            return Ok(a.clone());
        }
        let certificate = |error| CaError::Certificate {
            host: host.to_owned(),
            error,
        };
        let tls = |error| CaError::Tls {
            host: host.to_owned(),
            error,
        };
        let key = KeyPair::generate().map_err(certificate)?;
        let leaf = self.leaf(host, &key).map_err(certificate)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(tls)?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        acceptors.insert(host.to_owned(), acceptor.clone());
        Ok(acceptor)
    }

    /// A certificate for `host` alone, under this CA and within its validity.
    fn leaf(&self, host: &str, key: &KeyPair) -> Result<rcgen::Certificate, rcgen::Error> {
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let mut params = CertificateParams::new(vec![name.to_owned()])?;
        // The name is in the subject's alternative names alone, where constraints apply.
        params.distinguished_name = DistinguishedName::new();
        (params.not_before, params.not_after) = (self.made - SKEW, self.made + LIFETIME);
        params.signed_by(key, &self.issuer)
    }
}

/// Names and addresses permitted to `hosts` only. A kind of name none of them is (no IP
/// literal, say) is excluded whole, since a constraint only binds the kinds it names.
fn constraints<'a>(hosts: impl IntoIterator<Item = &'a str>) -> NameConstraints {
    let (mut names, mut addresses) = (Vec::new(), Vec::new());
    for host in hosts {
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(ip) => {
                let bits = if ip.is_ipv4() { 32 } else { 128 };
                addresses.push(GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(
                    ip, bits,
                )));
            }
            Err(_) => names.push(GeneralSubtree::DnsName(literal.to_owned())),
        }
    }
    let mut excluded = Vec::new();
    if names.is_empty() {
        // An empty name is every name, as the CA/Browser Forum writes it.
        excluded.push(GeneralSubtree::DnsName(String::new()));
    }
    if addresses.is_empty() {
        excluded.push(GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])));
        excluded.push(GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])));
    }
    names.extend(addresses);
    NameConstraints {
        permitted_subtrees: names,
        excluded_subtrees: excluded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{ServerName, UnixTime};
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    use x509_parser::prelude::{FromDer, X509Certificate};

    fn leaf_der(ca: &SessionCa, host: &str) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let leaf = ca.leaf(host, &key).unwrap_or_else(|e| panic!("{e}"));
        leaf.der().clone()
    }

    fn ca_der(ca: &SessionCa) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether a client trusting `ca` alone takes a certificate for `host` at `at`.
    fn verifies(ca: &SessionCa, host: &str, at: OffsetDateTime) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_der(ca))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
        let name = ServerName::try_from(host.to_owned()).unwrap_or_else(|e| panic!("{e}"));
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(at.unix_timestamp()).unwrap_or(0),
        ));
        verifier
            .verify_server_cert(&leaf_der(ca, host), &[], &name, &[], at)
            .map(drop)
    }

    #[test]
    fn the_ca_names_only_the_credentials_hosts_critically_and_lives_a_day() {
        let ca =
            SessionCa::new(["api.test", "[::1]", "127.0.0.1"]).unwrap_or_else(|e| panic!("{e}"));
        let der = ca_der(&ca);
        let (_, cert) = X509Certificate::from_der(&der).unwrap_or_else(|e| panic!("{e}"));
        let constraint = cert
            .extensions()
            .iter()
            .find(|e| matches!(e.parsed_extension(), ParsedExtension::NameConstraints(_)))
            .expect("a name constraints extension");
        assert!(constraint.critical);
        let ParsedExtension::NameConstraints(nc) = constraint.parsed_extension() else {
            unreachable!()
        };
        let permitted: Vec<String> = nc
            .permitted_subtrees
            .iter()
            .flatten()
            .map(|s| match &s.base {
                GeneralName::DNSName(n) => (*n).to_owned(),
                GeneralName::IPAddress(ip) => format!("{ip:02x?}"),
                other => format!("{other:?}"),
            })
            .collect();
        let v6 = format!(
            "{:02x?}",
            [[0u8; 15].as_slice(), &[1], &[0xff; 16]].concat()
        );
        assert_eq!(
            permitted,
            [
                "api.test".to_owned(),
                v6,
                "[7f, 00, 00, 01, ff, ff, ff, ff]".to_owned()
            ]
        );
        assert!(nc.excluded_subtrees.is_none(), "{:?}", nc.excluded_subtrees);

        let now = OffsetDateTime::now_utc().unix_timestamp();
        let validity = cert.validity();
        let (from, until) = (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        );
        assert!(from <= now && now - from <= 11 * 60, "{validity:?}");
        assert!(until > now && until - now <= 24 * 3600, "{validity:?}");
        let leaf = leaf_der(&ca, "api.test");
        let (_, leaf) = X509Certificate::from_der(&leaf).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(leaf.validity().not_after.timestamp(), until);
        assert!(leaf.validity().not_before.timestamp() <= now);
    }

    #[test]
    fn a_certificate_for_another_host_or_out_of_its_day_is_refused() {
        let ca = SessionCa::new(["api.test"]).unwrap_or_else(|e| panic!("{e}"));
        let now = OffsetDateTime::now_utc();
        assert_eq!(verifies(&ca, "api.test", now), Ok(()));
        for host in [
            "evil.test",
            "test",
            "api.test.evil.test",
            "127.0.0.1",
            "::1",
        ] {
            let refused = verifies(&ca, host, now).expect_err(host);
            assert!(
                format!("{refused:?}").contains("NameConstraint"),
                "{host}: {refused:?}"
            );
        }
        let expired = verifies(&ca, "api.test", now + Duration::days(2)).expect_err("expired");
        assert!(format!("{expired:?}").contains("Expired"), "{expired:?}");
        let early = verifies(&ca, "api.test", now - Duration::hours(1)).expect_err("early");
        assert!(format!("{early:?}").contains("NotValidYet"), "{early:?}");

        // A CA for an address alone vouches for no name.
        let ca = SessionCa::new(["127.0.0.1"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(verifies(&ca, "127.0.0.1", now), Ok(()));
        for host in ["api.test", "127.0.0.2"] {
            assert!(verifies(&ca, host, now).is_err(), "{host}");
        }
    }
}
