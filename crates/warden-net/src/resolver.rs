//! Name resolution done by warden itself, so that the address it vets is the address it dials.
//! Overrides pin names to addresses, like curl's `--resolve`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Resolves host names for tools' HTTP requests: overrides first, then the system resolver.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    overrides: Arc<HashMap<String, Vec<IpAddr>>>,
}

/// A malformed `--resolve` entry.
#[derive(Debug, thiserror::Error)]
#[error("resolve override `{entry}` {why}; write NAME:ADDRESS[,ADDRESS…], e.g. api.test:127.0.0.1")]
pub struct OverrideError {
    entry: String,
    why: &'static str,
}

impl Resolver {
    /// A resolver with `NAME:ADDR[,ADDR…]` overrides (IPv6 addresses may be bracketed).
    pub fn with_overrides<I, S>(entries: I) -> Result<Resolver, OverrideError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for entry in entries {
            let entry = entry.as_ref().trim();
            let err = |why| OverrideError {
                entry: entry.to_owned(),
                why,
            };
            let (name, addrs) = entry.split_once(':').ok_or_else(|| err("has no `:`"))?;
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name.is_empty() {
                return Err(err("names no host"));
            }
            let mut parsed: Vec<IpAddr> = Vec::new();
            for a in addrs.split(',') {
                let a = a.trim();
                let a = a
                    .strip_prefix('[')
                    .and_then(|a| a.strip_suffix(']'))
                    .unwrap_or(a);
                parsed.push(
                    a.parse()
                        .map_err(|_| err("has an address that is not an IP"))?,
                );
            }
            map.entry(name).or_default().extend(parsed);
        }
        Ok(Resolver {
            overrides: Arc::new(map),
        })
    }

    /// The addresses `name` is pinned to by an override, if it is.
    pub fn pinned(&self, name: &str) -> Option<&[IpAddr]> {
        let key = name.trim_end_matches('.').to_ascii_lowercase();
        self.overrides.get(&key).map(Vec::as_slice)
    }

    /// The addresses of `name`; an override replaces the system's answer entirely.
    pub async fn resolve(&self, name: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        let key = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(addrs) = self.overrides.get(&key) {
            return Ok(addrs.clone());
        }
        let found = tokio::net::lookup_host((key.as_str(), port)).await?;
        let mut addrs: Vec<IpAddr> = found.map(|a| a.ip()).collect();
        addrs.dedup();
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn overrides_replace_the_system_answer() {
        let r = Resolver::with_overrides(["Api.Test:127.0.0.1,[::1]", "b.test:10.0.0.1"]).unwrap();
        let got = r.resolve("api.test.", 80).await.unwrap();
        assert_eq!(
            got,
            vec![IpAddr::from([127, 0, 0, 1]), "::1".parse().unwrap()]
        );
        assert!(Resolver::with_overrides(["nocolon"]).is_err());
        assert!(Resolver::with_overrides(["a.test:not-an-ip"]).is_err());
        assert!(Resolver::with_overrides([":127.0.0.1"]).is_err());
    }
}
