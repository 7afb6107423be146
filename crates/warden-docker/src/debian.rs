//! warden's Debian sandbox image, built offline from this machine's own apt sources: mmdebstrap
//! writes a root filesystem tar (bash, coreutils, python3 with pip and venv, curl, wget, git,
//! ca-certificates; nobody with `/tmp` as home) and the engine imports it — no registry, no
//! `docker` CLI. The image is tagged by the digest of its recipe, so a build whose tag is already
//! on the engine is skipped.

mod recipe;

use crate::engine::Engine;
use crate::image::{IMAGE_LABEL, ImageError, split_tag};
use bollard::Docker;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, RemoveImageOptions, TagImageOptionsBuilder,
};
use futures::StreamExt;
use recipe::{CHANGES, DPKG_OPTIONS, HOOKS};
pub use recipe::{DEBIAN_PACKAGES, DebianRecipe};
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

/// How many of mmdebstrap's last lines an error shows.
const TAIL: usize = 15;
/// The size of one piece of the root filesystem sent to the engine.
const CHUNK: usize = 1 << 20;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
