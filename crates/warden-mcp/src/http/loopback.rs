//! Who may talk to a server on this machine's loopback, whatever it serves (the MCP endpoint,
//! `warden console`): a request must name the server by a loopback name in `Host` (a page
//! whose own name resolves to 127.0.0.1 — DNS rebinding — is turned away), and a browser's
//! `Origin`, when it sends one, must be the server's own (or one allowed by name).

use http::{Request, StatusCode, header};
use std::net::SocketAddr;

/// The names and origins of one server at `local`.
pub struct Loopback {
    /// The host names `Host` may give; `None` when remote clients are allowed.
    hosts: Option<Vec<String>>,
    origins: Vec<String>,
}

/// A request turned away: its status, and why.
pub type Refused = (StatusCode, &'static str);

impl Loopback {
    /// The server at `local`: its loopback names and its own origins, and `allow_origins`.
    pub fn new(local: SocketAddr, allow_origins: &[String]) -> Self {
        let port = local.port();
        let mut origins = vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ];
        origins.extend(allow_origins.iter().map(|o| normalise_origin(o)));
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
        let bound = local.ip().to_string();
        if !hosts.contains(&bound) {
            hosts.push(bound);
        }
        Self {
            hosts: Some(hosts),
            origins,
        }
    }

    /// Takes requests for any name (`--allow-remote`).
    pub fn any_host(mut self) -> Self {
        self.hosts = None;
        self
    }

    /// Refuses a request whose `Host` is not a loopback name of the server.
    pub fn check_host<B>(&self, request: &Request<B>) -> Result<(), Refused> {
        let Some(hosts) = &self.hosts else {
            return Ok(());
        };
        if hosts.contains(&host_name(request)?) {
            return Ok(());
        }
        Err((
            StatusCode::FORBIDDEN,
            "this Host is not the server's: a loopback name is expected",
        ))
    }

    /// Refuses a request whose `Origin` is another's; `required`: one without an `Origin`
    /// too (a state-changing request of a browser, which always sends one).
    pub fn check_origin<B>(&self, request: &Request<B>, required: bool) -> Result<(), Refused> {
        match request.headers().get(header::ORIGIN) {
            Some(origin) if origin.to_str().is_ok_and(|o| self.is_own(o)) => Ok(()),
            None if !required => Ok(()),
            _ => Err((StatusCode::FORBIDDEN, "this Origin may not use the server")),
        }
    }

    fn is_own(&self, origin: &str) -> bool {
        self.origins.contains(&normalise_origin(origin))
    }
}

/// The host name a request is for, from `Host` (or the target's authority), lowercase and
/// without brackets or port.
fn host_name<B>(request: &Request<B>) -> Result<String, Refused> {
    let bad = |why| (StatusCode::BAD_REQUEST, why);
    let authority = match request.headers().get(header::HOST) {
        Some(value) => {
            let value = value
                .to_str()
                .map_err(|_| bad("the Host header is not text"))?;
            http::uri::Authority::try_from(value)
                .map_err(|_| bad("the Host header is malformed"))?
        }
        None => request
            .uri()
            .authority()
            .cloned()
            .ok_or_else(|| bad("the request has no Host header"))?,
    };
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok(host.to_ascii_lowercase())
}

fn normalise_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}
