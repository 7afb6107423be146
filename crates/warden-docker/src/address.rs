//! Where a Docker engine listens, as `DOCKER_HOST` or a policy's `engine =` writes it, and what
//! warden accepts:
//!
//! - `unix:///path`: a socket on this machine, the only [`Place::Local`] engine;
//! - `tcp://host:port` with mutual TLS: the folder of the docker CLI's `DOCKER_CERT_PATH`
//!   (`ca.pem` checks the engine, `cert.pem` and `key.pem` are warden's own);
//! - `tcp://` without TLS only on a loopback address (an IP literal): the Engine API is root
//!   on the engine's host, so anyone on the path could take it.
//!
//! A tcp engine is [`Place::Remote`] even on loopback: nothing proves that it shares this
//! machine's files, process ids, cgroups or network namespaces.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

/// The engine's unix socket when `DOCKER_HOST` names none.
const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// The files of a certificate folder, as the docker CLI names them.
pub const CERT_FILES: [&str; 3] = ["ca.pem", "cert.pem", "key.pem"];

/// Whether an engine is on this machine (its files, pids and namespaces are ours) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A unix socket on this machine.
    Local,
    /// A tcp engine, loopback included.
    Remote,
}

/// Why a written engine address is refused; each says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("certificates are for tcp engines; `{0}` is a unix socket: drop them")]
    CertsForUnix(String),
    #[error("`{0}`: a unix socket needs an absolute path (unix:///var/run/docker.sock)")]
    RelativeSocket(String),
    #[error(
        "`{0}` is not an engine address warden speaks to: write unix:///path/docker.sock \
         or tcp://host:port (with mutual TLS)"
    )]
    UnknownScheme(String),
    #[error("`{0}` needs a port (tcp://host:2376); names and IPs are both fine")]
    NoPort(String),
    /// Plain tcp to anything but a loopback address.
    #[error(
        "`{0}` without TLS is refused: whoever reaches that port is root on the \
         engine's host. Give the folder of ca.pem, cert.pem and key.pem (DOCKER_TLS_VERIFY=1 \
         and DOCKER_CERT_PATH, or `engine_certs` in a policy) for mutual TLS; plain tcp is \
         accepted on a loopback address only (tcp://127.0.0.1:PORT)"
    )]
    PlainTcp(String),
    /// `DOCKER_HOST` holds an address refused for one of the reasons above.
    #[error("DOCKER_HOST: {0}")]
    DockerHost(#[source] Box<AddressError>),
}

/// One engine's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EngineAddress {
    /// A unix socket on this machine.
    Unix(PathBuf),
    /// `host:port` over mutual TLS, with the folder holding [`CERT_FILES`].
    Tls { host: String, certs: PathBuf },
    /// `host:port` over plain HTTP: a loopback address only.
    Plain { host: String },
}

impl EngineAddress {
    /// Reads `written` (`unix://…` or `tcp://host:port`); `certs` is the folder of the
    /// client certificates, which makes a tcp engine TLS. The answer's error says what to write.
    pub fn parse(written: &str, certs: Option<PathBuf>) -> Result<EngineAddress, AddressError> {
        if let Some(path) = written.strip_prefix("unix://") {
            if certs.is_some() {
                return Err(AddressError::CertsForUnix(written.to_owned()));
            }
            if !path.starts_with('/') {
                return Err(AddressError::RelativeSocket(written.to_owned()));
            }
            return Ok(EngineAddress::Unix(PathBuf::from(path)));
        }
        let Some(host) = written.strip_prefix("tcp://") else {
            return Err(AddressError::UnknownScheme(written.to_owned()));
        };
        let host = host.trim_end_matches('/');
        let ip = split_port(host).ok_or_else(|| AddressError::NoPort(written.to_owned()))?;
        match certs {
            Some(certs) => Ok(EngineAddress::Tls {
                host: host.to_owned(),
                certs,
            }),
            None if ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) => {
                Ok(EngineAddress::Plain {
                    host: host.to_owned(),
                })
            }
            None => Err(AddressError::PlainTcp(written.to_owned())),
        }
    }

    /// `$DOCKER_HOST` as the docker CLI reads it (`DOCKER_TLS_VERIFY` set: TLS with the
    /// certificates of `$DOCKER_CERT_PATH`, else `~/.docker`), or the default unix socket.
    pub fn from_env() -> Result<EngineAddress, AddressError> {
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        if host.is_empty() {
            return Ok(EngineAddress::Unix(PathBuf::from(DEFAULT_SOCKET)));
        }
        // As the CLI: TLS settings concern tcp engines only.
        let verify = host.starts_with("tcp://")
            && std::env::var_os("DOCKER_TLS_VERIFY").is_some_and(|v| !v.is_empty());
        let certs = verify.then(|| {
            std::env::var_os("DOCKER_CERT_PATH")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    std::env::var_os("HOME")
                        .map(PathBuf::from)
                        .unwrap_or_default()
                        .join(".docker")
                })
        });
        EngineAddress::parse(&host, certs).map_err(|e| AddressError::DockerHost(Box::new(e)))
    }

    /// Local for a unix socket, remote for tcp.
    pub fn place(&self) -> Place {
        match self {
            EngineAddress::Unix(_) => Place::Local,
            EngineAddress::Tls { .. } | EngineAddress::Plain { .. } => Place::Remote,
        }
    }

    /// The first of [`CERT_FILES`] missing from a TLS address's folder, if any.
    pub(crate) fn missing_cert(&self) -> Option<PathBuf> {
        let EngineAddress::Tls { certs, .. } = self else {
            return None;
        };
        CERT_FILES
            .iter()
            .map(|f| certs.join(f))
            .find(|p| !p.is_file())
    }
}

impl EngineAddress {
    /// The address and how warden speaks to it, for the audit.
    pub fn describe(&self) -> String {
        match self {
            EngineAddress::Unix(_) => format!("{self} (this machine)"),
            EngineAddress::Tls { .. } => format!("{self} over mutual TLS (elsewhere)"),
            EngineAddress::Plain { .. } => format!("{self} over plain tcp on loopback (elsewhere)"),
        }
    }
}

impl fmt::Display for EngineAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineAddress::Unix(path) => write!(f, "unix://{}", path.display()),
            EngineAddress::Tls { host, .. } | EngineAddress::Plain { host } => {
                write!(f, "tcp://{host}")
            }
        }
    }
}

/// `host:port` → `host` (brackets of an IPv6 literal taken off), or `None` without a port.
fn split_port(host_port: &str) -> Option<&str> {
    let (host, port) = host_port.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    if host.is_empty() {
        return None;
    }
    Some(host.trim_start_matches('[').trim_end_matches(']'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_and_plain_tcp_is_loopback_only() {
        assert_eq!(
            EngineAddress::parse("unix:///run/docker.sock", None),
            Ok(EngineAddress::Unix("/run/docker.sock".into()))
        );
        let tls = EngineAddress::parse("tcp://engine.example:2376", Some("c".into())).unwrap();
        assert_eq!(tls.place(), Place::Remote);
        assert_eq!(tls.to_string(), "tcp://engine.example:2376");
        for loopback in [
            "tcp://127.0.0.1:2375",
            "tcp://127.3.4.5:1/",
            "tcp://[::1]:2375",
        ] {
            let a = EngineAddress::parse(loopback, None).unwrap();
            assert!(matches!(a, EngineAddress::Plain { .. }), "{loopback}");
            assert_eq!(a.place(), Place::Remote, "loopback tcp is still remote");
        }
        for (bad, words) in [
            ("tcp://10.0.0.1:2375", "without TLS is refused"),
            ("tcp://localhost:2375", "without TLS is refused"),
            ("tcp://127.0.0.1", "needs a port"),
            ("ssh://me@host", "not an engine address"),
            ("unix://docker.sock", "absolute path"),
        ] {
            let e = EngineAddress::parse(bad, None).unwrap_err().to_string();
            assert!(e.contains(words), "{bad}: {e}");
        }
        let e = EngineAddress::parse("unix:///s", Some("c".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("drop them"), "{e}");
    }
}
