//! What goes into warden's Debian image: this machine's release and the apt sources that name
//! it (read from one-line `.list` files and deb822 `.sources` stanzas alike), the packages, and
//! how dpkg and mmdebstrap shape the tree; their digest tags the image.

use crate::image::ImageError;
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The packages installed beyond mmdebstrap's `apt` variant (the essential packages and apt).
pub const DEBIAN_PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "python3",
    "python3-pip",
    "python3-venv",
    "curl",
    "wget",
    "git",
    "ca-certificates",
];

/// Bumped when the way the image is made changes, so its tag changes with it.
const RECIPE_VERSION: &str = "warden-sandbox-debian 1";

/// Left out by dpkg: manuals, translations and documentation, but not the copyright files.
pub(super) const DPKG_OPTIONS: &[&str] = &[
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
];

/// Run by mmdebstrap on the finished tree (`$1`): nobody gets `/tmp` as home (under a read-only
/// root the only place it may write) and bash as shell, which the check after it confirms;
/// `/workspace` exists for the shell policy's mount; git works in a granted checkout owned by
/// another user (the container's user rarely owns a read-only grant).
pub(super) const HOOKS: &[&str] = &[
    r#"sed -i -E 's#^(nobody:[^:]*:65534:65534:[^:]*):[^:]*:[^:]*$#\1:/tmp:/bin/bash#' "$1/etc/passwd""#,
    r#"grep -q '^nobody:[^:]*:65534:65534:[^:]*:/tmp:/bin/bash$' "$1/etc/passwd""#,
    r#"mkdir -p "$1/workspace""#,
    r#"printf '[safe]\n\tdirectory = *\n' > "$1/etc/gitconfig""#,
];

/// The image's configuration (`docker import --change`), beside its labels.
pub(super) const CHANGES: &[&str] = &[
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "USER 65534:65534",
    "WORKDIR /",
    "CMD [\"/bin/bash\"]",
];

/// What goes into the image: the release, the apt sources it comes from and the packages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianRecipe {
    /// The release's code name, `bookworm`: this machine's own.
    pub suite: String,
    /// apt sources as one-line entries, `deb [signed-by=…] URI SUITE COMPONENTS…`.
    pub sources: Vec<String>,
    /// The packages to install.
    pub packages: Vec<String>,
}

impl DebianRecipe {
    /// This machine's release (`/etc/os-release`) from the apt sources that name it
    /// (`/etc/apt/sources.list`, `/etc/apt/sources.list.d/*.list` and `*.sources`).
    pub fn from_machine() -> Result<Self, ImageError> {
        Self::from_files(Path::new("/etc/os-release"), Path::new("/etc/apt"))
    }

    /// The same from another `os-release` file and apt folder.
    pub fn from_files(os_release: &Path, etc_apt: &Path) -> Result<Self, ImageError> {
        let release = std::fs::read_to_string(os_release)
            .map_err(|e| ImageError::Io(format!("read {}", os_release.display()), e))?;
        let suite = codename(&release).ok_or_else(|| ImageError::NoRelease(os_release.into()))?;
        let (entries, read) = apt_entries(etc_apt);
        let sources: Vec<String> = entries
            .iter()
            .filter(|e| e.suite == suite || e.suite.starts_with(&format!("{suite}-")))
            .map(AptEntry::line)
            .collect();
        if sources.is_empty() {
            return Err(ImageError::NoAptSource { suite, read });
        }
        Ok(Self {
            suite,
            sources,
            packages: DEBIAN_PACKAGES.iter().map(|p| (*p).to_owned()).collect(),
        })
    }

    /// The first 12 hex digits of the sha256 of everything that makes the image: the image's
    /// tag, so the same recipe is built once.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        let mut put = |field: &str, value: &str| {
            h.update(field.as_bytes());
            h.update(b"=");
            h.update(value.as_bytes());
            h.update(b"\n");
        };
        put("recipe", RECIPE_VERSION);
        put("arch", std::env::consts::ARCH);
        put("suite", &self.suite);
        for source in &self.sources {
            put("source", source);
        }
        for package in &self.packages {
            put("package", package);
        }
        for option in DPKG_OPTIONS {
            put("dpkgopt", option);
        }
        for hook in HOOKS {
            put("hook", hook);
        }
        for change in CHANGES {
            put("change", change);
        }
        let digest = h.finalize();
        hex::encode(&digest[..6])
    }
}

/// `VERSION_CODENAME` of an os-release file.
fn codename(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|line| {
        let value = line.trim().strip_prefix("VERSION_CODENAME=")?;
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// One `deb` entry of apt's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AptEntry {
    /// What goes between `[` and `]`: `signed-by=…`, `arch=…`.
    options: Vec<String>,
    uri: String,
    suite: String,
    components: Vec<String>,
}

impl AptEntry {
    fn line(&self) -> String {
        let options = if self.options.is_empty() {
            String::new()
        } else {
            format!(" [{}]", self.options.join(" "))
        };
        let mut line = format!("deb{options} {} {}", self.uri, self.suite);
        for c in &self.components {
            line.push(' ');
            line.push_str(c);
        }
        line
    }
}

/// Every `deb` entry apt reads under `etc_apt`, and the files it read, in apt's order.
fn apt_entries(etc_apt: &Path) -> (Vec<AptEntry>, Vec<PathBuf>) {
    let mut files = vec![etc_apt.join("sources.list")];
    if let Ok(dir) = std::fs::read_dir(etc_apt.join("sources.list.d")) {
        let mut parts: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == OsStr::new("list") || x == OsStr::new("sources"))
            })
            .collect();
        parts.sort();
        files.extend(parts);
    }
    let mut entries = Vec::new();
    let mut read = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if file.extension().is_some_and(|x| x == OsStr::new("sources")) {
            entries.extend(deb822_entries(&text));
        } else {
            entries.extend(one_line_entries(&text));
        }
        read.push(file);
    }
    (entries, read)
}

/// `deb [options] uri suite components…` lines (sources.list(5)); `deb-src` and comments are
/// skipped.
fn one_line_entries(text: &str) -> Vec<AptEntry> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or("").trim();
            let rest = line.strip_prefix("deb")?;
            if !rest.starts_with([' ', '\t']) {
                return None;
            }
            let rest = rest.trim_start();
            let (options, rest) = match rest.strip_prefix('[') {
                Some(inside) => {
                    let (options, rest) = inside.split_once(']')?;
                    (
                        options.split_whitespace().map(str::to_owned).collect(),
                        rest,
                    )
                }
                None => (Vec::new(), rest),
            };
            let mut words = rest.split_whitespace();
            let uri = words.next()?.to_owned();
            let suite = words.next()?.to_owned();
            Some(AptEntry {
                options,
                uri,
                suite,
                components: words.map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// deb822 stanzas (`Types: deb`, `URIs:`, `Suites:`, `Components:`, `Signed-By:` as a path,
/// `Architectures:`, `Trusted:`); `Enabled: no` stanzas are skipped.
fn deb822_entries(text: &str) -> Vec<AptEntry> {
    let mut entries = Vec::new();
    let mut fields: Vec<(String, String)> = Vec::new();
    let lines = text.lines().chain(std::iter::once(""));
    for line in lines {
        if line.trim_start().starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            entries.extend(stanza(&fields));
            fields.clear();
        } else if line.starts_with([' ', '\t']) {
            // A continuation line: an inline key, say, which is not passed on.
            if let Some((_, value)) = fields.last_mut() {
                value.push('\n');
                value.push_str(line.trim());
            }
        } else if let Some((key, value)) = line.split_once(':') {
            fields.push((key.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    entries
}

fn stanza(fields: &[(String, String)]) -> Vec<AptEntry> {
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let words = |key: &str| -> Vec<String> {
        get(key)
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    };
    if !words("types").iter().any(|t| t == "deb") || get("enabled") == Some("no") {
        return Vec::new();
    }
    let mut options = Vec::new();
    if let Some(key) = get("signed-by").filter(|k| !k.contains('\n') && !k.is_empty()) {
        options.push(format!("signed-by={}", key.replace(' ', ",")));
    }
    let arch = words("architectures");
    if !arch.is_empty() {
        options.push(format!("arch={}", arch.join(",")));
    }
    if let Some(trusted) = get("trusted") {
        options.push(format!("trusted={trusted}"));
    }
    let components = words("components");
    let mut entries = Vec::new();
    for uri in words("uris") {
        for suite in words("suites") {
            entries.push(AptEntry {
                options: options.clone(),
                uri: uri.clone(),
                suite,
                components: components.clone(),
            });
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCES: &str = "Types: deb\n\
        # a comment\n\
        URIs: http://mirror.example/debian\n\
        Suites: bookworm bookworm-updates\n\
        Components: main\n\
        Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\
        \n\
        Types: deb deb-src\n\
        URIs: http://mirror.example/debian-security\n\
        Suites: bookworm-security\n\
        Components: main contrib\n\
        \n\
        Types: deb\n\
        Enabled: no\n\
        URIs: http://off.example/debian\n\
        Suites: bookworm\n\
        Components: main\n\
        \n\
        Types: deb\n\
        URIs: https://other.example/node\n\
        Suites: nodistro\n\
        Components: main\n\
        Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n";

    #[test]
    fn deb822_stanzas_become_one_line_entries() {
        let lines: Vec<String> = deb822_entries(SOURCES).iter().map(AptEntry::line).collect();
        assert_eq!(
            lines,
            [
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
                 http://mirror.example/debian bookworm main",
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
                 http://mirror.example/debian bookworm-updates main",
                "deb http://mirror.example/debian-security bookworm-security main contrib",
                "deb https://other.example/node nodistro main",
            ]
        );
    }

    #[test]
    fn one_line_entries_keep_their_options_and_skip_the_rest() {
        let text = "# deb http://commented.example/debian bookworm main\n\
                    deb-src http://src.example/debian bookworm main\n\
                    deb [ arch=amd64 signed-by=/k.gpg ] http://a.example/debian bookworm main # x\n\
                    deb http://b.example/debian bookworm-backports main non-free\n\
                    debian nonsense\n";
        let lines: Vec<String> = one_line_entries(text).iter().map(AptEntry::line).collect();
        assert_eq!(
            lines,
            [
                "deb [arch=amd64 signed-by=/k.gpg] http://a.example/debian bookworm main",
                "deb http://b.example/debian bookworm-backports main non-free",
            ]
        );
    }

    #[test]
    fn the_recipe_takes_the_machines_release_and_only_its_sources() {
        let dir = tempfile::tempdir().unwrap();
        let apt = dir.path().join("apt");
        std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
        std::fs::write(apt.join("sources.list.d/debian.sources"), SOURCES).unwrap();
        std::fs::write(
            apt.join("sources.list.d/cloud.list"),
            "deb https://cloud.example/apt cloud-sdk-bookworm main\n",
        )
        .unwrap();
        std::fs::write(
            apt.join("sources.list.d/old.list.disabled"),
            "deb http://old.example/debian bookworm main\n",
        )
        .unwrap();
        let os = dir.path().join("os-release");
        std::fs::write(
            &os,
            "NAME=\"Debian GNU/Linux\"\nVERSION_CODENAME=bookworm\n",
        )
        .unwrap();
        let recipe = DebianRecipe::from_files(&os, &apt).unwrap();
        assert_eq!(recipe.suite, "bookworm");
        assert_eq!(recipe.sources.len(), 3, "{:?}", recipe.sources);
        assert!(recipe.sources.iter().all(|s| s.contains("mirror.example")));
        assert!(recipe.packages.iter().any(|p| p == "python3"));
        // The tag follows the recipe.
        let digest = recipe.digest();
        assert_eq!(digest.len(), 12);
        assert_eq!(digest, recipe.digest());
        let mut other = recipe;
        other.packages.push("jq".into());
        assert_ne!(digest, other.digest());

        std::fs::write(&os, "VERSION_CODENAME=trixie\n").unwrap();
        let e = DebianRecipe::from_files(&os, &apt).unwrap_err().to_string();
        assert!(e.contains("trixie"), "{e}");
        assert!(e.contains("debian.sources"), "names what it read: {e}");
        std::fs::write(&os, "NAME=x\n").unwrap();
        let e = DebianRecipe::from_files(&os, &apt).unwrap_err().to_string();
        assert!(e.contains("VERSION_CODENAME"), "{e}");
    }

    #[test]
    fn os_release_code_names() {
        assert_eq!(
            codename("ID=debian\nVERSION_CODENAME=bookworm\n").as_deref(),
            Some("bookworm")
        );
        assert_eq!(
            codename("VERSION_CODENAME=\"trixie\"").as_deref(),
            Some("trixie")
        );
        assert_eq!(codename("VERSION_CODENAME=\n"), None);
    }
}
