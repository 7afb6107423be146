//! The rule every executor's network goes through: a destination is checked against the
//! policy's grants, resolved by warden itself, each address vetted, and only a vetted address
//! dialled, so a name cannot be re-resolved to somewhere else between the check and the dial.

use crate::egress::Egress;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use warden_core::NetGrants;

/// The grants of one tool and how warden reaches out for it; cheap to clone.
#[derive(Debug, Clone)]
pub struct Gate {
    grants: Arc<NetGrants>,
    egress: Egress,
}

/// Why a destination has no address to go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vetting {
    /// The policy forbids it: a denial, recorded and reported.
    Denied(String),
    /// The name did not resolve: an ordinary network failure.
    Unresolved(String),
}

/// Why a vetted destination could not be dialled.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("connecting timed out")]
    TimedOut,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Gate {
    pub fn new(grants: Arc<NetGrants>, egress: Egress) -> Self {
        Self { grants, egress }
    }

    pub fn grants(&self) -> &NetGrants {
        &self.grants
    }

    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// The addresses of `host` (a name or an IP literal, brackets allowed) that the grants let
    /// warden dial on `port`, or why none. Resolution never outlasts `deadline`.
    pub async fn vet(
        &self,
        host: &str,
        port: u16,
        deadline: Instant,
    ) -> Result<Vec<IpAddr>, Vetting> {
        self.grants
            .allows_http(host, port)
            .map_err(Vetting::Denied)?;
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(vec![ip]); // `allows_http` checked the address itself
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let found =
            match tokio::time::timeout(wait, self.egress.resolver().resolve(host, port)).await {
                Ok(Ok(found)) if !found.is_empty() => found,
                Ok(Ok(_)) => return Err(Vetting::Unresolved(format!("{host} has no address"))),
                Ok(Err(e)) => return Err(Vetting::Unresolved(format!("{host}: {e}"))),
                Err(_) => return Err(Vetting::Unresolved(format!("{host}: lookup timed out"))),
            };
        let mut ok = Vec::new();
        let mut refusals = Vec::new();
        for ip in found {
            match self.grants.vets_resolved(host, ip, port) {
                Ok(()) => ok.push(ip),
                Err(reason) => refusals.push(reason),
            }
        }
        if ok.is_empty() {
            return Err(Vetting::Denied(refusals.join("; ")));
        }
        Ok(ok)
    }
}

/// Connects to the first of the vetted `addrs` that answers on `port` within `wait`.
pub async fn connect(addrs: &[IpAddr], port: u16, wait: Duration) -> Result<TcpStream, DialError> {
    let attempt = async {
        let mut last = None;
        for ip in addrs {
            match TcpStream::connect(SocketAddr::new(*ip, port)).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to")
        }))
    };
    match tokio::time::timeout(wait, attempt).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(DialError::Io(e)),
        Err(_) => Err(DialError::TimedOut),
    }
}
