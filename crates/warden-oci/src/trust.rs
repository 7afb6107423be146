//! The keys warden trusts per registry or repository prefix, from `trust.toml` in warden's
//! home:
//!
//! ```toml
//! [trust]
//! "registry.example/tools" = ["keys/publisher.pub"]   # paths relative to the file
//! "ghcr.io/acme" = ["acme.pub", "acme-2027.pub"]
//! ```
//!
//! A reference takes the keys of the longest prefix (whole path segments) that names it.

use crate::error::OciError;
use crate::reference::Reference;
use crate::sign::TrustedKey;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The trust file's contents, keys read.
#[derive(Debug, Default)]
pub struct TrustFile {
    prefixes: BTreeMap<String, Vec<TrustedKey>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    #[serde(default)]
    trust: BTreeMap<String, Vec<PathBuf>>,
}

impl TrustFile {
    /// Reads `path`; a missing file trusts nothing.
    pub fn load(path: &Path) -> Result<TrustFile, OciError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TrustFile::default()),
            Err(e) => return Err(OciError::Key(format!("reading {}: {e}", path.display()))),
        };
        let written: Written = toml::from_str(&text)
            .map_err(|e| OciError::Key(format!("{}: {}", path.display(), e.message())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut prefixes = BTreeMap::new();
        for (prefix, files) in written.trust {
            let mut keys = Vec::new();
            for file in files {
                let file = base.join(file);
                let pem = std::fs::read_to_string(&file).map_err(|e| {
                    OciError::Key(format!(
                        "{}: the key {} of `{prefix}`: {e}",
                        path.display(),
                        file.display()
                    ))
                })?;
                keys.push(TrustedKey::from_pem(&pem).map_err(|e| {
                    OciError::Key(format!("{}: {}: {e}", path.display(), file.display()))
                })?);
            }
            prefixes.insert(prefix.trim_end_matches('/').to_owned(), keys);
        }
        Ok(TrustFile { prefixes })
    }

    /// The keys of the longest prefix naming `reference`'s `registry/repository`.
    pub fn keys_for(&self, reference: &Reference) -> Vec<TrustedKey> {
        let name = reference.name();
        self.prefixes
            .iter()
            .filter(|(prefix, _)| {
                name == **prefix
                    || name
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, keys)| keys.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_of_whole_segments_wins() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (crate::generate().unwrap().1, crate::generate().unwrap().1);
        std::fs::write(dir.path().join("a.pub"), &a).unwrap();
        std::fs::write(dir.path().join("b.pub"), &b).unwrap();
        let path = dir.path().join("trust.toml");
        std::fs::write(
            &path,
            "[trust]\n\"r.example\" = [\"a.pub\"]\n\"r.example/team/tools\" = [\"b.pub\"]\n",
        )
        .unwrap();
        let trust = TrustFile::load(&path).unwrap();
        let keys = |r: &str| trust.keys_for(&Reference::parse(r).unwrap());
        let (a, b) = (
            TrustedKey::from_pem(&a).unwrap(),
            TrustedKey::from_pem(&b).unwrap(),
        );
        assert_eq!(keys("oci://r.example/team/tools/units:1"), vec![b]);
        assert_eq!(keys("oci://r.example/team/toolsx:1"), vec![a.clone()]);
        assert_eq!(keys("oci://r.example/other:1"), vec![a]);
        assert_eq!(keys("oci://r.examplex/other:1"), vec![]);
        assert!(
            TrustFile::load(&dir.path().join("none.toml"))
                .unwrap()
                .keys_for(&Reference::parse("oci://r.example/a:1").unwrap())
                .is_empty()
        );
    }
}
