//! Grants read against what calls did: those never exercised in the window, each with the
//! line that writes it, and a narrower `[grants]` built from what was reached.

use super::read::ToolSeen;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use warden_core::{FsGrant, HostGrant, HostPattern, NetGrants, Policy, Reached};

/// Hosts a wide grant may be narrowed to; past this many it is left as written.
const NARROW_TO_AT_MOST: usize = 10;

/// Why a grant went unused when none of its policy's tools ran.
const NEVER_RAN: &str = "none of its tools ran in the window";

/// A grant nothing in the window used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnusedGrant {
    /// The policy file, and the line that writes the grant: the one to remove.
    pub policy: PathBuf,
    pub line: usize,
    /// The `[grants]` key: `net`, `fs`, `env_from_host` or `net_credentials`.
    pub key: &'static str,
    /// The entry, as the audit shows it.
    pub grant: String,
    pub why: String,
}

/// A narrower `[grants]` for one policy: the keys that change; the others stay as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suggestion {
    pub policy: PathBuf,
    /// TOML, ready to paste over the same keys.
    pub grants: String,
}

/// A destination as a reach names it: `http://host:port`, `connect host:port`, `tcp ip:port`.
struct Destination {
    host: String,
    ip: Option<IpAddr>,
    port: u16,
    /// What was dialled for a name.
    address: Option<SocketAddr>,
}

impl Destination {
    fn parse(reached: &Reached) -> Option<Destination> {
        let d = reached.destination.as_str();
        let authority = ["http://", "https://", "connect ", "tcp ", "udp "]
            .iter()
            .find_map(|prefix| d.strip_prefix(prefix))?;
        let (host, port) = authority.rsplit_once(':')?;
        let ip = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .parse()
            .ok();
        Some(Destination {
            host: host.to_ascii_lowercase(),
            ip,
            port: port.parse().ok()?,
            address: reached.address,
        })
    }

    /// What of `grant` this destination used, as a grant of its own (`host:port`), if any.
    fn used(&self, grant: &HostGrant) -> Option<String> {
        if let Some(ip) = self.ip {
            let any = grant.pattern == HostPattern::Any && grant.covers_name(&self.host, self.port);
            return (grant.covers_addr(ip, self.port) || any)
                .then(|| SocketAddr::new(ip, self.port).to_string());
        }
        if grant.covers_name(&self.host, self.port) {
            return Some(format!("{}:{}", self.host, self.port));
        }
        // A name's loopback or private address gets through only by an address grant.
        self.address
            .filter(|a| grant.covers_addr(a.ip(), a.port()))
            .map(|a| a.to_string())
    }
}

/// True for a grant of one host (or address) on one port: nothing narrower to offer.
fn is_exact(grant: &HostGrant) -> bool {
    grant.port.is_some()
        && match &grant.pattern {
            HostPattern::Name(_) => true,
            HostPattern::Addrs(net) => net.prefix_len() == net.max_prefix_len(),
            HostPattern::Any | HostPattern::Subdomains(_) => false,
        }
}

/// The grants of `policy` that its tools' calls (`seen`) never used, and a narrower
/// `[grants]` when there is one. Filesystem roots are judged only when `roots_observed`:
/// the policy's executor reports the roots its calls open.
pub(crate) fn review(
    policy: &Policy,
    seen: &[&ToolSeen],
    roots_observed: bool,
) -> (Vec<UnusedGrant>, Option<Suggestion>) {
    let mut review = Review {
        policy,
        seen,
        ran: seen.iter().any(|t| t.ran),
        unused: Vec::new(),
    };
    let net = review.net();
    review.credentials(&net);
    let roots = review.roots(roots_observed);
    review.host_env();
    let suggestion = review.suggestion(&net, &roots);
    (review.unused, suggestion)
}

/// One policy's grants under review: what its tools' calls did, and the grants found unused
/// so far, in the order of their keys.
struct Review<'a> {
    policy: &'a Policy,
    seen: &'a [&'a ToolSeen],
    /// Whether any of its tools ran in the window.
    ran: bool,
    unused: Vec<UnusedGrant>,
}

impl<'a> Review<'a> {
    /// Why a grant went unused: `unexercised` when the tools ran, else that none did.
    fn why(&self, unexercised: &'static str) -> &'static str {
        if self.ran { unexercised } else { NEVER_RAN }
    }

    /// Notes grant `grant` of `key`, written at `line`, as unused for `why`.
    fn note(&mut self, key: &'static str, line: Option<&usize>, grant: String, why: &str) {
        self.unused.push(UnusedGrant {
            policy: self.policy.path.clone(),
            line: line.copied().unwrap_or(0),
            key,
            grant,
            why: why.to_owned(),
        });
    }

    /// The `net` grants to keep, each narrowed to what its calls reached where it can be;
    /// those nothing reached are noted.
    fn net(&mut self) -> Vec<String> {
        let destinations: Vec<Destination> = self
            .seen
            .iter()
            .flat_map(|t| &t.reached)
            .filter_map(Destination::parse)
            .collect();
        let (grants, lines) = (&self.policy.grants, &self.policy.grant_lines);
        let mut net = Vec::new();
        for (i, grant) in grants.net.hosts.iter().enumerate() {
            let used: BTreeSet<String> =
                destinations.iter().filter_map(|d| d.used(grant)).collect();
            if used.is_empty() {
                let why = self.why("no call in the window reached it");
                self.note("net", lines.net.get(i), grant.to_string(), why);
            } else if is_exact(grant) || used.len() > NARROW_TO_AT_MOST {
                net.push(grant.to_string());
            } else {
                net.extend(used);
            }
        }
        let mut once = HashSet::new();
        net.retain(|g| once.insert(g.clone()));
        net
    }

    /// Notes the credentials whose host the kept `net` grants no longer reach.
    fn credentials(&mut self, net: &[String]) {
        let (grants, lines) = (&self.policy.grants, &self.policy.grant_lines);
        let kept = NetGrants {
            hosts: net
                .iter()
                .filter_map(|g| HostGrant::parse(g).ok())
                .collect(),
            ..grants.net.clone()
        };
        for (i, c) in grants.net.credentials.iter().enumerate() {
            if kept.check_credential(c).is_err() {
                let why = "the host it is for is not reached: remove it with its net grant";
                let text = format!("{} header for {}", c.header, c.host);
                self.note("net_credentials", lines.net_credentials.get(i), text, why);
            }
        }
    }

    /// The roots to keep: those a call opened, or all when the executor does not report
    /// them (`observed` false); the others are noted.
    fn roots(&mut self, observed: bool) -> Vec<&'a FsGrant> {
        let policy = self.policy;
        let opened: HashSet<&str> = self
            .seen
            .iter()
            .flat_map(|t| &t.roots_opened)
            .map(String::as_str)
            .collect();
        let mut roots = Vec::new();
        for (i, root) in policy.grants.fs.iter().enumerate() {
            if !observed || opened.contains(root.guest.as_str()) {
                roots.push(root);
            } else {
                let why = self.why("no call in the window opened it");
                self.note("fs", policy.grant_lines.fs.get(i), root.to_string(), why);
            }
        }
        roots
    }

    /// Notes every host variable when no tool ran: nothing read them.
    fn host_env(&mut self) {
        if self.ran {
            return;
        }
        let policy = self.policy;
        for (i, name) in policy.grants.env_from_host.iter().enumerate() {
            let line = policy.grant_lines.env_from_host.get(i);
            self.note("env_from_host", line, name.clone(), NEVER_RAN);
        }
    }

    /// The `[grants]` keys that change, when any does: `net` narrowed, `fs` without the
    /// unopened roots, `env_from_host` emptied when nothing ran.
    fn suggestion(&self, net: &[String], roots: &[&FsGrant]) -> Option<Suggestion> {
        let grants = &self.policy.grants;
        let written: Vec<String> = grants.net.hosts.iter().map(ToString::to_string).collect();
        let mut toml = String::new();
        if net != written {
            toml.push_str(&format!("net = {}\n", array(net)));
        }
        if roots.len() < grants.fs.len() {
            let tables: Vec<String> = roots.iter().map(|r| fs_table(r)).collect();
            toml.push_str(&format!("fs = [{}]\n", tables.join(", ")));
        }
        if !self.ran && !grants.env_from_host.is_empty() {
            toml.push_str("env_from_host = []\n");
        }
        (!toml.is_empty()).then(|| Suggestion {
            policy: self.policy.path.clone(),
            grants: format!("[grants]\n{toml}"),
        })
    }
}

/// A TOML array of strings (JSON's string escapes are TOML's).
fn array(items: &[String]) -> String {
    serde_json::to_string(items)
        .unwrap_or_default()
        .replace("\",\"", "\", \"")
}

/// A root as a policy writes it, with its host folder absolute (a policy's relative paths
/// are resolved when it is read).
fn fs_table(root: &FsGrant) -> String {
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "{{ host = {}, guest = {}, access = \"{}\" }}",
        text(&root.host.to_string_lossy()),
        text(&root.guest),
        root.access.as_str()
    )
}
