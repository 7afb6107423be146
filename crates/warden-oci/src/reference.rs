//! `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`: where an artifact lives.

use crate::error::OciError;
use std::fmt;

/// The scheme warden's artifact references start with.
pub const SCHEME: &str = "oci://";

/// A parsed artifact reference: a registry, a repository in it, and a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// `path/to/repo`, lowercase as the distribution spec requires.
    pub repository: String,
    /// What the reference names: a tag to resolve, or a manifest digest.
    pub target: Target,
}

/// A tag (resolved once to a digest) or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tag(String),
    Digest(Digest),
}

/// A `sha256:` digest of 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::{Digest as _, Sha256};
        Digest(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// Parses `sha256:HEX`.
    pub fn parse(text: &str) -> Result<Digest, OciError> {
        let hex = text.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(OciError::BadReference(format!(
                "`{text}` is not a sha256 digest (sha256: and 64 lowercase hex digits)"
            )));
        }
        Ok(Digest(text.to_owned()))
    }

    /// The 64 hex digits, as the store pins a component.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Reference {
    /// Parses `oci://REGISTRY/REPOSITORY[:TAG][@sha256:…]`; a digest wins over a tag.
    pub fn parse(text: &str) -> Result<Reference, OciError> {
        let bad = |why: &str| OciError::BadReference(format!("`{text}`: {why}"));
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("an artifact reference starts with oci://"))?;
        let (rest, digest) = match rest.split_once('@') {
            Some((name, digest)) => (name, Some(Digest::parse(digest)?)),
            None => (rest, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("write oci://REGISTRY/REPOSITORY:TAG"))?;
        // A tag follows the last `:` after the last `/` (a registry may have a port).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
            _ => (path, None),
        };
        if registry.is_empty()
            || registry.contains(|c: char| c.is_whitespace() || c == '?' || c == '#')
        {
            return Err(bad("the registry is not a host[:port]"));
        }
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        };
        if !repository.split('/').all(component_ok) {
            return Err(bad(
                "a repository is lowercase letters, digits, `.`, `_`, `-` and `/` between them",
            ));
        }
        let target = match (digest, tag) {
            (Some(d), _) => Target::Digest(d),
            (None, Some(t)) => {
                let ok = t.len() <= 128
                    && t.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    && !t.starts_with(['.', '-']);
                if !ok {
                    return Err(bad(
                        "a tag is at most 128 letters, digits, `.`, `_` and `-`",
                    ));
                }
                Target::Tag(t.to_owned())
            }
            (None, None) => Target::Tag("latest".to_owned()),
        };
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            target,
        })
    }

    /// `REGISTRY/REPOSITORY`, as a cosign payload's `docker-reference` names it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The same repository at `digest`.
    pub fn at(&self, digest: &Digest) -> Reference {
        Reference {
            target: Target::Digest(digest.clone()),
            ..self.clone()
        }
    }

    /// The registry's host (without brackets) and port (443 when it names none).
    pub fn host_and_port(&self) -> (&str, u16) {
        let (host, port) = split_host_port(&self.registry);
        (host, port.unwrap_or(443))
    }

    /// Whether `entry` (`HOST` or `HOST:PORT`, as `--insecure-registry` and `WARDEN_REGISTRY`
    /// name registries) names this reference's registry.
    pub fn named_by(&self, entry: &str) -> bool {
        let (host, port) = self.host_and_port();
        names(entry, host, port)
    }
}

/// Whether `entry` (`HOST` or `HOST:PORT`) names `host` at `port`: a bare host names it at
/// every port.
pub(crate) fn names(entry: &str, host: &str, port: u16) -> bool {
    let (named, named_port) = split_host_port(entry.trim());
    named.eq_ignore_ascii_case(host) && named_port.is_none_or(|p| p == port)
}

/// `host[:port]` (an IPv6 address in brackets when it has a port) split, brackets dropped.
fn split_host_port(text: &str) -> (&str, Option<u16>) {
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || host.ends_with(']')) =>
        {
            (host, port.parse().ok())
        }
        _ => (text, None),
    };
    (host.trim_start_matches('[').trim_end_matches(']'), port)
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.name())?;
        match &self.target {
            Target::Tag(t) => write!(f, ":{t}"),
            Target::Digest(d) => write!(f, "@{d}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_back() {
        let r = Reference::parse("oci://127.0.0.1:5000/tools/units:1.0").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "tools/units");
        assert_eq!(r.target, Target::Tag("1.0".into()));
        assert_eq!(r.host_and_port(), ("127.0.0.1", 5000));
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/tools/units:1.0");
        let latest = Reference::parse("oci://ghcr.io/a/b").unwrap();
        assert_eq!(latest.target, Target::Tag("latest".into()));
        assert_eq!(latest.host_and_port(), ("ghcr.io", 443));
        let d = format!("sha256:{}", "a".repeat(64));
        let pinned = Reference::parse(&format!("oci://localhost:5000/x@{d}")).unwrap();
        assert_eq!(pinned.target, Target::Digest(Digest::parse(&d).unwrap()));
        for bad in [
            "ghcr.io/a/b",
            "oci://ghcr.io",
            "oci://ghcr.io/A/b",
            "oci://ghcr.io/a/b@sha256:12",
            "oci://ghcr.io/a/b:-x",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_entry_names_a_host_at_its_port_or_at_any() {
        let r = Reference::parse("oci://[::1]:5000/a:b").unwrap();
        assert_eq!(r.host_and_port(), ("::1", 5000));
        assert!(r.named_by("[::1]:5000") && r.named_by("::1") && !r.named_by("[::1]:5001"));
        assert!(names("Docker.IO", "docker.io", 443));
        assert!(names("auth.docker.io:443", "auth.docker.io", 443));
        assert!(!names("auth.docker.io:8443", "auth.docker.io", 443));
        assert!(!names("docker.io", "auth.docker.io", 443));
    }
}
