//! warden's Debian sandbox image, built offline from this machine's own apt sources: mmdebstrap
//! writes a root filesystem tar (bash, coreutils, python3 with pip and venv, curl, wget, git,
//! ca-certificates; nobody with `/tmp` as home) and the engine imports it — no registry, no
//! `docker` CLI. The image is tagged by the digest of its recipe, so a build whose tag is already
//! on the engine is skipped.

use crate::engine::Engine;
use crate::image::{IMAGE_LABEL, ImageError, split_tag};
use bollard::Docker;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, RemoveImageOptions, TagImageOptionsBuilder,
};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// What writes the root filesystem (Debian: `apt-get install mmdebstrap`).
pub const BOOTSTRAP_TOOL: &str = "mmdebstrap";
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
const DPKG_OPTIONS: &[&str] = &[
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
const HOOKS: &[&str] = &[
    r#"sed -i -E 's#^(nobody:[^:]*:65534:65534:[^:]*):[^:]*:[^:]*$#\1:/tmp:/bin/bash#' "$1/etc/passwd""#,
    r#"grep -q '^nobody:[^:]*:65534:65534:[^:]*:/tmp:/bin/bash$' "$1/etc/passwd""#,
    r#"mkdir -p "$1/workspace""#,
    r#"printf '[safe]\n\tdirectory = *\n' > "$1/etc/gitconfig""#,
];

/// The image's configuration (`docker import --change`), beside its labels.
const CHANGES: &[&str] = &[
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "USER 65534:65534",
    "WORKDIR /",
    "CMD [\"/bin/bash\"]",
];

/// How many of mmdebstrap's last lines an error shows.
const TAIL: usize = 15;
/// The size of one piece of the root filesystem sent to the engine.
const CHUNK: usize = 1 << 20;

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

/// What `build_debian_image` reports as it goes.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// A phase begins.
    Step(&'a str),
    /// One line of mmdebstrap's.
    Bootstrap(&'a str),
    /// `sent` bytes of the root filesystem's `total` are with the engine.
    Import { sent: u64, total: u64 },
}

/// The Debian image on the engine.
#[derive(Debug, Clone)]
pub struct DebianImage {
    /// `warden-sandbox-debian:<digest>`.
    pub tag: String,
    /// `warden-sandbox-debian:latest`, the same image.
    pub latest: String,
    /// The engine's id of it (`sha256:…`).
    pub id: String,
    /// Its size on the engine, in bytes.
    pub size: u64,
    /// When it was made, as the engine says.
    pub created: String,
    /// How the build went; `None` when the image was already there.
    pub built: Option<BuildTimes>,
}

/// The two phases of a build.
#[derive(Debug, Clone, Copy)]
pub struct BuildTimes {
    /// mmdebstrap writing the root filesystem.
    pub bootstrap: Duration,
    /// The engine importing it.
    pub import: Duration,
    /// The root filesystem tar's size.
    pub tar_bytes: u64,
}

/// Builds `<repository>:<digest>` from `recipe` and points `<repository>:latest` at it. When that
/// tag is already on the engine nothing is built (unless `rebuild`), only `:latest` moved.
pub async fn build_debian_image(
    engine: &Engine,
    recipe: &DebianRecipe,
    repository: &str,
    rebuild: bool,
    progress: &(dyn Fn(Progress<'_>) + Send + Sync),
) -> Result<DebianImage, ImageError> {
    if split_tag(repository).0 != repository {
        return Err(ImageError::Tagged(repository.to_owned()));
    }
    let docker = engine
        .client()
        .await
        .map_err(|e| ImageError::Engine(e.message))?;
    let digest = recipe.digest();
    let tag = format!("{repository}:{digest}");
    let latest = format!("{repository}:latest");
    let previous = docker.inspect_image(&tag).await.ok().and_then(|i| i.id);
    if previous.is_some() && !rebuild {
        point_latest(&docker, &tag, repository).await?;
        engine.forget_image(&latest);
        return described(&docker, tag, latest, None).await;
    }
    let tool = find_in_path(BOOTSTRAP_TOOL, std::env::var_os("PATH").as_deref())
        .ok_or(ImageError::MissingTool(BOOTSTRAP_TOOL))?;
    let dir = tempfile::Builder::new()
        .prefix("warden-debian-")
        .tempdir()
        .map_err(|e| ImageError::Io("make a temporary folder".into(), e))?;
    let tar = dir.path().join("rootfs.tar");

    progress(Progress::Step(&format!(
        "[1/2] writing a Debian {} root filesystem ({}) with {BOOTSTRAP_TOOL}, from this \
         machine's apt sources:\n      {}",
        recipe.suite,
        recipe.packages.join(", "),
        recipe.sources.join("\n      ")
    )));
    let started = Instant::now();
    bootstrap(&tool, recipe, &tar, progress).await?;
    let bootstrap_time = started.elapsed();
    let tar_bytes = std::fs::metadata(&tar)
        .map_err(|e| ImageError::Io(format!("read {}", tar.display()), e))?
        .len();

    progress(Progress::Step(&format!(
        "[2/2] importing it into the engine as {tag} ({} MB)",
        tar_bytes / 1_000_000
    )));
    let started = Instant::now();
    import(&docker, recipe, &tar, tar_bytes, &tag, progress).await?;
    let import_time = started.elapsed();
    drop(dir);
    point_latest(&docker, &tag, repository).await?;
    engine.forget_image(&tag);
    engine.forget_image(&latest);
    let image = described(
        &docker,
        tag,
        latest,
        Some(BuildTimes {
            bootstrap: bootstrap_time,
            import: import_time,
            tar_bytes,
        }),
    )
    .await?;
    // A rebuild of the same recipe took the names of the one before: remove it unless a
    // container (or another name) still holds it.
    if let Some(old) = previous.filter(|old| *old != image.id) {
        let _ = docker
            .remove_image(&old, None::<RemoveImageOptions>, None)
            .await;
    }
    Ok(image)
}

async fn described(
    docker: &Docker,
    tag: String,
    latest: String,
    built: Option<BuildTimes>,
) -> Result<DebianImage, ImageError> {
    let image = docker
        .inspect_image(&tag)
        .await
        .map_err(|e| ImageError::Import(e.to_string()))?;
    Ok(DebianImage {
        tag,
        latest,
        id: image.id.unwrap_or_default(),
        size: image.size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
        created: image.created.unwrap_or_default(),
        built,
    })
}

async fn point_latest(docker: &Docker, tag: &str, repository: &str) -> Result<(), ImageError> {
    let options = TagImageOptionsBuilder::new()
        .repo(repository)
        .tag("latest")
        .build();
    docker
        .tag_image(tag, Some(options))
        .await
        .map_err(|e| ImageError::Import(format!("cannot tag {tag} as {repository}:latest: {e}")))
}

/// mmdebstrap writes the root filesystem to `tar`; its lines go to `progress`, and the last of
/// them into the error when it fails.
async fn bootstrap(
    tool: &Path,
    recipe: &DebianRecipe,
    tar: &Path,
    progress: &(dyn Fn(Progress<'_>) + Send + Sync),
) -> Result<(), ImageError> {
    let mut cmd = tokio::process::Command::new(tool);
    cmd.arg("--variant=apt")
        .arg("--format=tar")
        .arg(format!("--include={}", recipe.packages.join(",")));
    for option in DPKG_OPTIONS {
        cmd.arg(format!("--dpkgopt={option}"));
    }
    for hook in HOOKS {
        cmd.arg(format!("--customize-hook={hook}"));
    }
    cmd.arg(&recipe.suite)
        .arg(tar)
        .args(&recipe.sources)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ImageError::MissingTool(BOOTSTRAP_TOOL),
        _ => ImageError::Io(format!("start {}", tool.display()), e),
    })?;
    let mut tail: VecDeque<String> = VecDeque::new();
    if let Some(stderr) = child.stderr.take() {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .await
                .map_err(|e| ImageError::Io(format!("read {BOOTSTRAP_TOOL}'s output"), e))?;
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            progress(Progress::Bootstrap(text));
            if tail.len() == TAIL {
                tail.pop_front();
            }
            tail.push_back(text.to_owned());
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| ImageError::Io(format!("wait for {BOOTSTRAP_TOOL}"), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(bootstrap_failure(&status.to_string(), recipe, tail.into()))
    }
}

/// Names the fix: a fetch that failed, a package the sources lack, or mmdebstrap's own failure.
fn bootstrap_failure(status: &str, recipe: &DebianRecipe, tail: Vec<String>) -> ImageError {
    let text = tail.join("\n");
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    let sources = recipe.sources.join("; ");
    if has(&[
        "Unable to locate package",
        "has no installation candidate",
        "Couldn't find",
    ]) {
        ImageError::MissingPackage {
            sources,
            packages: recipe.packages.join(", "),
            tail: text,
        }
    } else if has(&[
        "Failed to fetch",
        "Temporary failure resolving",
        "Could not resolve",
        "Could not connect",
        "Unable to connect",
        "Connection failed",
        "Connection timed out",
        "Connection refused",
        "Release file",
        "NO_PUBKEY",
        "apt-get update --error-on=any",
        "apt-get --yes",
    ]) {
        ImageError::Fetch {
            sources,
            tail: text,
        }
    } else {
        let hint = if is_root() {
            ""
        } else {
            "; as a user other than root mmdebstrap needs unprivileged user namespaces and \
             subordinate ids (`apt-get install uidmap`), or run the build as root"
        };
        ImageError::Bootstrap {
            status: status.to_owned(),
            tail: text,
            hint,
        }
    }
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Sends the tar to the engine as `docker import` does, a piece at a time, reporting how much
/// went.
async fn import(
    docker: &Docker,
    recipe: &DebianRecipe,
    tar: &Path,
    total: u64,
    tag: &str,
    progress: &(dyn Fn(Progress<'_>) + Send + Sync),
) -> Result<(), ImageError> {
    let file = tokio::fs::File::open(tar)
        .await
        .map_err(|e| ImageError::Io(format!("open {}", tar.display()), e))?;
    let sent = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&sent);
    let body = futures::stream::try_unfold(file, move |mut file| {
        let counter = Arc::clone(&counter);
        async move {
            let mut piece = vec![0u8; CHUNK];
            let n = file.read(&mut piece).await?;
            if n == 0 {
                return Ok(None);
            }
            piece.truncate(n);
            counter.fetch_add(n as u64, Ordering::Relaxed);
            Ok(Some((bytes::Bytes::from(piece), file)))
        }
    });
    let (repo, version) = split_tag(tag);
    let mut changes: Vec<String> = CHANGES.iter().map(|c| (*c).to_owned()).collect();
    changes.push(format!("LABEL {IMAGE_LABEL}=debian"));
    changes.push(format!("LABEL warden.recipe={}", recipe.digest()));
    changes.push(format!("LABEL warden.suite={}", recipe.suite));
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(version)
        .changes(changes)
        .build();
    let mut answers =
        docker.create_image(Some(options), Some(bollard::body_try_stream(body)), None);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            answer = answers.next() => match answer {
                None => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(ImageError::Import(e.to_string())),
            },
            _ = tick.tick() => progress(Progress::Import {
                sent: sent.load(Ordering::Relaxed),
                total,
            }),
        }
    }
    progress(Progress::Import {
        sent: sent.load(Ordering::Relaxed),
        total,
    });
    Ok(())
}

/// `name` in one of the folders of `path` (`$PATH`), when it is there and executable.
fn find_in_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path?;
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
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
    fn failures_name_their_fix() {
        let recipe = DebianRecipe {
            suite: "bookworm".into(),
            sources: vec!["deb http://mirror.example/debian bookworm main".into()],
            packages: vec!["python3".into()],
        };
        let fetch = bootstrap_failure(
            "exit status: 1",
            &recipe,
            vec![
                "I: running apt-get update...".into(),
                "E: Failed to fetch http://mirror.example/debian/dists/bookworm/InRelease".into(),
            ],
        )
        .to_string();
        assert!(fetch.contains("apt-get update"), "{fetch}");
        assert!(fetch.contains("mirror.example"), "{fetch}");
        let missing = bootstrap_failure(
            "exit status: 1",
            &recipe,
            vec!["E: Unable to locate package python3".into()],
        )
        .to_string();
        assert!(missing.contains("lack"), "{missing}");
        let other = bootstrap_failure("exit status: 2", &recipe, vec!["E: odd".into()]);
        assert!(other.to_string().contains("E: odd"), "{other}");
        let tool = ImageError::MissingTool(BOOTSTRAP_TOOL).to_string();
        assert!(tool.contains("apt-get install mmdebstrap"), "{tool}");
    }

    #[test]
    fn tools_are_found_on_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("mmdebstrap");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(
            find_in_path("mmdebstrap", Some(&path)),
            None,
            "not executable"
        );
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        assert_eq!(find_in_path("mmdebstrap", Some(&path)), Some(tool));
        assert_eq!(find_in_path("mmdebstrap", None), None);
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
