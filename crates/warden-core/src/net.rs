//! Network grants: which hosts, addresses and ports a tool may reach, and the credentials warden
//! adds on its behalf. Parsed, checked and described here; executors enforce them.
//!
//! A name grant (`api.example.org`, `*.example.org`) allows HTTP to that name, and only to the
//! public addresses it resolves to: loopback, private and link-local addresses need an address
//! grant (`127.0.0.1:8080`, `10.0.0.0/8`), so a name cannot be a way into the local network.
//! Raw sockets see addresses only, so only address grants open them.

use ipnet::IpNet;
use serde::Deserialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What one `net` grant names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// `*`: every public host, by name or address.
    Any,
    /// One DNS name, lowercase, without a trailing dot.
    Name(String),
    /// `*.domain`: every name below `domain`, not `domain` itself.
    Subdomains(String),
    /// An IP address (a one-address network) or a CIDR range.
    Addrs(IpNet),
}

/// Why a `net` grant or a network credential cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetGrantError {
    /// The grant's text is not one of the forms a grant takes.
    #[error(
        "net grant `{text}` {fault}; write a host (`api.example.org`), `host:port`, \
         `*.domain`, an IP address (`[::1]:8080` for IPv6 with a port) or a CIDR range"
    )]
    Malformed { text: String, fault: GrantFault },
    /// A credential's header is not an HTTP header name.
    #[error("`{0}` is not a valid header name")]
    HeaderName(String),
    /// A credential's host is one no grant lets the tool reach.
    #[error("the credential for `{0}` names a host that no net grant allows")]
    CredentialHost(String),
}

/// What is wrong with a malformed grant's text, worded to follow the grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantFault {
    #[error("has no `]`")]
    NoBracket,
    #[error("has text after `]`")]
    TextAfterBracket,
    #[error("has a port that is not 1–65535")]
    Port,
    #[error("is not a valid CIDR range")]
    Cidr,
    /// The range as written has bits set below its prefix; this is the range it means.
    #[error("has host bits set (the range is {0})")]
    HostBits(IpNet),
    #[error("is not a valid host name")]
    HostName,
}

/// One `net` grant: a pattern and, optionally, the one port it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGrant {
    pub pattern: HostPattern,
    pub port: Option<u16>,
}

impl HostGrant {
    /// Parses `host`, `host:port`, `*.domain[:port]`, `*`, an IP (`[v6]:port` for a port) or a
    /// CIDR range.
    pub fn parse(text: &str) -> Result<HostGrant, NetGrantError> {
        let bad = |fault: GrantFault| NetGrantError::Malformed {
            text: text.to_owned(),
            fault,
        };
        let text = text.trim();
        if text == "*" {
            return Ok(HostGrant {
                pattern: HostPattern::Any,
                port: None,
            });
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest
                .split_once(']')
                .ok_or_else(|| bad(GrantFault::NoBracket))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad(GrantFault::TextAfterBracket))?,
                ),
            };
            (inside, port)
        } else if text.matches(':').count() > 1 {
            (text, None) // a bare IPv6 address or range
        } else {
            match text.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(bad(GrantFault::Port)),
            },
        };
        let pattern = if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Addrs(IpNet::from(ip))
        } else if host.contains('/') {
            let net: IpNet = host.parse().map_err(|_| bad(GrantFault::Cidr))?;
            if net.trunc() != net {
                return Err(bad(GrantFault::HostBits(net.trunc())));
            }
            HostPattern::Addrs(net)
        } else if let Some(domain) = host.strip_prefix("*.") {
            HostPattern::Subdomains(dns_name(domain).map_err(bad)?)
        } else {
            HostPattern::Name(dns_name(host).map_err(bad)?)
        };
        Ok(HostGrant { pattern, port })
    }

    fn port_ok(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Does this grant let a request to the name `host` (not an IP literal) on `port` through?
    pub fn covers_name(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.port_ok(port) && name_matches(&self.pattern, &host)
    }

    /// Does this address grant cover `ip:port`?
    pub fn covers_addr(&self, ip: IpAddr, port: u16) -> bool {
        self.port_ok(port)
            && matches!(&self.pattern, HostPattern::Addrs(net) if net.contains(&canonical(ip)))
    }

    /// True for `*` and for ranges wider than one address: grants an audit should flag.
    pub fn is_wide(&self) -> bool {
        match &self.pattern {
            HostPattern::Any => true,
            HostPattern::Addrs(net) => net.prefix_len() < net.max_prefix_len(),
            _ => false,
        }
    }
}

impl fmt::Display for HostGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match &self.pattern {
            HostPattern::Any => "*".to_owned(),
            HostPattern::Name(n) => n.clone(),
            HostPattern::Subdomains(d) => format!("*.{d}"),
            HostPattern::Addrs(net) if net.prefix_len() == net.max_prefix_len() => {
                match (net.addr(), self.port) {
                    (IpAddr::V6(a), Some(_)) => format!("[{a}]"),
                    (a, _) => a.to_string(),
                }
            }
            HostPattern::Addrs(IpNet::V6(net)) if self.port.is_some() => format!("[{net}]"),
            HostPattern::Addrs(net) => net.to_string(),
        };
        match self.port {
            Some(p) => write!(f, "{host}:{p}"),
            None => f.write_str(&host),
        }
    }
}

/// A header warden adds to requests for one granted host, its value read from warden's own
/// environment at call time. The tool never sees the value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// The host (name or IP literal) whose requests carry the header, exactly as requested.
    pub host: String,
    /// The header name, such as `Authorization`.
    pub header: String,
    /// The variable of warden's environment that holds the value.
    pub from_host: String,
    /// Text put before the value, such as `Bearer `.
    #[serde(default)]
    pub prefix: String,
    /// The variable a program inside expects the token in: it holds a placeholder, fresh per
    /// session, never swapped for the value (warden sets `header` itself at `host`).
    #[serde(default)]
    pub env: Option<String>,
    /// Lets the credential go over plain HTTP, readable on the way; otherwise only over TLS.
    #[serde(default)]
    pub allow_plain_http: bool,
}

/// Every network grant of one policy. The default reaches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetGrants {
    pub hosts: Vec<HostGrant>,
    /// Guest DNS lookups (`wasi:sockets/ip-name-lookup`). Off unless asked: a query can itself
    /// carry data out.
    pub dns: bool,
    pub credentials: Vec<Credential>,
    /// `credential_host_shared = true`: the policy accepts its credentials' hosts beside other
    /// destinations (refused at load otherwise, flagged by the audit).
    pub credential_host_shared: bool,
}

/// Why a destination was refused: the text goes to the call log and the tool's message.
pub(crate) type Refusal = String;

impl NetGrants {
    /// True when the tool can reach no network at all.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && !self.dns
    }

    /// May the tool send HTTP to `host` (a name or an IP literal) on `port`?
    pub fn allows_http(&self, host: &str, port: u16) -> Result<(), Refusal> {
        if let Some(ip) = parse_ip_host(host) {
            return self.allows_addr(ip, port, true);
        }
        if self.hosts.iter().any(|g| g.covers_name(host, port)) {
            Ok(())
        } else {
            let host = host.trim_end_matches('.').to_ascii_lowercase();
            Err(format!("{host}:{port} is not granted by the tool's policy"))
        }
    }

    /// May a granted name's resolved address `ip` be dialled on `port`? Public addresses may;
    /// loopback, private and link-local ones only with an address grant.
    pub fn vets_resolved(&self, name: &str, ip: IpAddr, port: u16) -> Result<(), Refusal> {
        if is_public(ip) || self.covers(ip, port) {
            Ok(())
        } else {
            Err(format!(
                "{name} resolves to {ip}, a loopback, private or link-local address that the \
                 policy does not grant; grant `{ip}:{port}` explicitly if it is meant"
            ))
        }
    }

    /// May a raw TCP or UDP socket connect to `ip:port`? Only address grants open sockets.
    pub fn allows_socket(&self, ip: IpAddr, port: u16) -> Result<(), Refusal> {
        self.allows_addr(ip, port, false)
    }

    fn allows_addr(&self, ip: IpAddr, port: u16, http: bool) -> Result<(), Refusal> {
        if self.covers(ip, port) {
            return Ok(());
        }
        let any = http
            && is_public(ip)
            && self
                .hosts
                .iter()
                .any(|g| g.pattern == HostPattern::Any && g.port_ok(port));
        if any {
            Ok(())
        } else {
            let what = if http {
                ""
            } else {
                " (sockets need an address grant)"
            };
            Err(format!(
                "{} is not granted by the tool's policy{what}",
                socket_text(ip, port)
            ))
        }
    }

    fn covers(&self, ip: IpAddr, port: u16) -> bool {
        self.hosts.iter().any(|g| g.covers_addr(ip, port))
    }

    /// Checks that each credential names a header and a host the policy grants.
    pub fn check_credential(&self, c: &Credential) -> Result<(), NetGrantError> {
        let header_ok = !c.header.is_empty()
            && c.header
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !header_ok {
            return Err(NetGrantError::HeaderName(c.header.clone()));
        }
        let granted = match parse_ip_host(&c.host) {
            Some(ip) => self.hosts.iter().any(
                |g| matches!(&g.pattern, HostPattern::Addrs(net) if net.contains(&canonical(ip))),
            ),
            None => {
                let host = c.host.trim_end_matches('.').to_ascii_lowercase();
                self.hosts.iter().any(|g| name_matches(&g.pattern, &host))
            }
        };
        if granted {
            Ok(())
        } else {
            Err(NetGrantError::CredentialHost(c.host.clone()))
        }
    }

    /// The index of the first grant that reaches somewhere other than a credential's host, when the policy
    /// has credentials: a host that reflects its request (an echo endpoint, an error page that
    /// quotes headers) can hand the sandbox a credential in any encoding, and this grant is
    /// where the sandbox could send it on. Any port of a credential's host is that host.
    pub fn beside_credentials(&self) -> Option<usize> {
        if self.credentials.is_empty() {
            return None;
        }
        let is_credential_host = |grant: &HostGrant| {
            self.credentials
                .iter()
                .any(|c| match (&grant.pattern, parse_ip_host(&c.host)) {
                    (HostPattern::Addrs(net), Some(ip)) => {
                        net.prefix_len() == net.max_prefix_len() && net.addr() == canonical(ip)
                    }
                    (HostPattern::Name(name), None) => {
                        *name == c.host.trim_end_matches('.').to_ascii_lowercase()
                    }
                    _ => false,
                })
        };
        self.hosts.iter().position(|g| !is_credential_host(g))
    }

    /// The grants as JSON, for the audit: credentials by name, never by value.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "hosts": self.hosts.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "dns": self.dns,
            "credential_host_shared": self.credential_host_shared,
            "credentials": self.credentials.iter().map(|c| serde_json::json!({
                "host": c.host,
                "header": c.header,
                "from_host": c.from_host,
                "env": c.env,
                "allow_plain_http": c.allow_plain_http,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Does a name grant cover `host` (lowercase, no trailing dot)?
fn name_matches(pattern: &HostPattern, host: &str) -> bool {
    match pattern {
        HostPattern::Any => true,
        HostPattern::Name(n) => n == host,
        HostPattern::Subdomains(d) => host
            .strip_suffix(d.as_str())
            .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        HostPattern::Addrs(_) => false,
    }
}

/// A host part of a URL that is an IP literal (`127.0.0.1`, `[::1]`).
fn parse_ip_host(host: &str) -> Option<IpAddr> {
    let inner = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    inner.parse().ok()
}

fn socket_text(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// An IPv4-mapped IPv6 address is the IPv4 address: vet and match it as such.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// False for loopback, private, link-local, shared, reserved, multicast and unspecified
/// addresses: the ones a name must never lead to without an explicit address grant.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => public_v4(a),
        IpAddr::V6(a) => public_v6(a),
    }
}

fn public_v4(a: Ipv4Addr) -> bool {
    let [o0, o1, o2, _] = a.octets();
    !(a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o0 == 0
        || (o0 == 100 && (o1 & 0xc0) == 64) // shared address space (CGNAT)
        || (o0 == 192 && o1 == 0 && o2 == 0)
        || (o0 == 198 && (o1 & 0xfe) == 18) // benchmarking
        || o0 >= 240)
}

fn public_v6(a: Ipv6Addr) -> bool {
    let s = a.segments();
    // NAT64 embeds an IPv4 address; it is only as public as that address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link local
        || (s[0] == 0x2001 && s[1] == 0xdb8) // documentation
        || s[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible and reserved
}

/// A DNS name, lowercased: labels of letters, digits and `-`, at most 253 bytes.
fn dns_name(name: &str) -> Result<String, GrantFault> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(GrantFault::HostName);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(hosts: &[&str]) -> NetGrants {
        NetGrants {
            hosts: hosts.iter().map(|h| HostGrant::parse(h).unwrap()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn parses_every_form_and_prints_it_back() {
        for text in [
            "*",
            "api.example.org",
            "api.example.org:443",
            "*.example.org",
            "*.example.org:8443",
            "127.0.0.1",
            "127.0.0.1:8080",
            "::1",
            "[::1]:8080",
            "10.0.0.0/8",
            "10.0.0.0/8:443",
            "fd00::/8",
            "[fd00::/8]:53",
        ] {
            let g = HostGrant::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(g.to_string(), text);
        }
        assert_eq!(
            HostGrant::parse("API.Example.org.").unwrap().to_string(),
            "api.example.org"
        );
    }

    #[test]
    fn refuses_malformed_grants() {
        for text in [
            "",
            "host:0",
            "host:99999",
            "host:http",
            "bad_name.org",
            "-a.org",
            "a..org",
            "*.",
            "**.org",
            "10.0.0.1/8",
            "10.0.0.0/33",
            "[::1",
            "[::1]x",
            "http://example.org",
        ] {
            assert!(HostGrant::parse(text).is_err(), "{text} should be refused");
        }
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let g = grants(&["*.example.org"]);
        assert!(g.allows_http("a.example.org", 443).is_ok());
        assert!(g.allows_http("a.b.example.org", 80).is_ok());
        assert!(g.allows_http("A.EXAMPLE.ORG.", 80).is_ok());
        for host in [
            "example.org",
            "example.org.evil",
            "evilexample.org",
            ".example.org",
        ] {
            assert!(g.allows_http(host, 443).is_err(), "{host}");
        }
    }

    #[test]
    fn ports_are_part_of_the_grant() {
        let g = grants(&["api.example.org:443", "127.0.0.1:8080"]);
        assert!(g.allows_http("api.example.org", 443).is_ok());
        assert!(g.allows_http("api.example.org", 80).is_err());
        let lo = IpAddr::from([127, 0, 0, 1]);
        assert!(g.allows_socket(lo, 8080).is_ok());
        assert!(g.allows_socket(lo, 8081).is_err());
        assert!(g.allows_http("127.0.0.1", 8080).is_ok());
        assert!(g.allows_http("[::ffff:127.0.0.1]", 8080).is_ok());
    }

    #[test]
    fn names_never_lead_into_local_networks() {
        let g = grants(&["svc.test", "*"]);
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "100.64.0.1",
            "0.0.0.0",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(g.vets_resolved("svc.test", ip, 80).is_err(), "{ip}");
        }
        assert!(
            g.vets_resolved("svc.test", "93.184.216.34".parse().unwrap(), 80)
                .is_ok()
        );
        // `*` reaches public addresses by literal, never local ones, and never raw sockets.
        assert!(g.allows_http("93.184.216.34", 80).is_ok());
        assert!(g.allows_http("127.0.0.1", 80).is_err());
        assert!(
            g.allows_socket("93.184.216.34".parse().unwrap(), 80)
                .is_err()
        );
        let explicit = grants(&["svc.test", "127.0.0.1"]);
        assert!(
            explicit
                .vets_resolved("svc.test", "127.0.0.1".parse().unwrap(), 80)
                .is_ok()
        );
    }

    #[test]
    fn ranges_and_any_are_wide() {
        assert!(HostGrant::parse("*").unwrap().is_wide());
        assert!(HostGrant::parse("10.0.0.0/8").unwrap().is_wide());
        assert!(!HostGrant::parse("10.0.0.1").unwrap().is_wide());
        assert!(!HostGrant::parse("*.example.org").unwrap().is_wide());
    }
}
