//! warden's sandbox image, built offline: a static busybox, its applets as links, a non-root
//! user, and the folders a tool expects. `docker import` of a tar made here; no registry.
//! (`crate::debian` builds the larger Debian image.)

use crate::engine::Engine;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt;
use std::path::{Path, PathBuf};

/// Where Debian's `busybox-static` puts its binary.
pub const BUSYBOX: &str = "/bin/busybox";

/// Every image warden builds carries this label, valued `busybox` or `debian`
/// (`docker images --filter label=warden.image`). Not `warden` itself: a container inherits its
/// image's labels, and a container labelled `warden` without an owner would be reaped.
pub const IMAGE_LABEL: &str = "warden.image";

/// Why the image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "cannot read {0}: {1}; install a static busybox (`apt-get install busybox-static`) or \
         name one with --busybox"
    )]
    Read(PathBuf, std::io::Error),
    #[error(
        "{0} is not a statically linked program, so it cannot run alone in an empty image: \
         install Debian's busybox-static (`apt-get install busybox-static`)"
    )]
    NotStatic(PathBuf),
    #[error("cannot list the applets of {0}: {1}")]
    Applets(PathBuf, String),
    #[error("{0}")]
    Engine(String),
    #[error("the Docker engine did not import the image: {0}")]
    Import(String),
    #[error(
        "`{0}` is not installed, and the Debian image is built with it: install it \
         (`apt-get install {0}`), then run `warden sandbox-image --debian` again"
    )]
    MissingTool(&'static str),
    #[error(
        "cannot tell which Debian release to build: {} has no VERSION_CODENAME", .0.display()
    )]
    NoRelease(PathBuf),
    #[error(
        "none of this machine's apt sources names Debian {suite} (read: {}), and the Debian \
         image is built from them: add a `deb` entry for {suite} (sources.list(5)), check that \
         `apt-get update` works, then try again",
        .read.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoAptSource { suite: String, read: Vec<PathBuf> },
    #[error(
        "mmdebstrap could not fetch the packages through this machine's apt sources ({sources}): \
         check that `apt-get update` works here (network, proxy, mirror), then run `warden \
         sandbox-image --debian` again; its last lines:\n{tail}"
    )]
    Fetch { sources: String, tail: String },
    #[error(
        "this machine's apt sources ({sources}) lack a package the Debian image needs \
         ({packages}): add the release's main component to them, check that `apt-get update` \
         works, then try again; mmdebstrap's last lines:\n{tail}"
    )]
    MissingPackage {
        sources: String,
        packages: String,
        tail: String,
    },
    #[error("mmdebstrap failed ({status}){hint}; its last lines:\n{tail}")]
    Bootstrap {
        status: String,
        tail: String,
        hint: &'static str,
    },
    #[error(
        "the image name {0} has a version: name the repository alone (it gets :<digest> and :latest)"
    )]
    Tagged(String),
    #[error("cannot {0}: {1}")]
    Io(String, std::io::Error),
}

/// Builds `tag` (`warden-sandbox:latest`) from the static busybox at `busybox`; answers the
/// image id.
pub async fn build_sandbox_image(
    engine: &Engine,
    busybox: &Path,
    tag: &str,
) -> Result<String, ImageError> {
    let binary = std::fs::read(busybox).map_err(|e| ImageError::Read(busybox.to_owned(), e))?;
    if !is_static_elf(&binary) {
        return Err(ImageError::NotStatic(busybox.to_owned()));
    }
    let applets = applets(busybox)?;
    let rootfs = rootfs(&binary, &applets);
    let docker = engine
        .client()
        .await
        .map_err(|e| ImageError::Engine(e.message))?;
    let previous = docker.inspect_image(tag).await.ok().and_then(|i| i.id);
    let (repo, version) = split_tag(tag);
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(version)
        .changes(vec![
            "ENV PATH=/bin".into(),
            "USER 65534:65534".into(),
            "WORKDIR /".into(),
            "CMD [\"/bin/sh\"]".into(),
            format!("LABEL {IMAGE_LABEL}=busybox"),
        ])
        .build();
    let mut progress =
        docker.create_image(Some(options), Some(bollard::body_full(rootfs.into())), None);
    while let Some(step) = progress.next().await {
        step.map_err(|e| ImageError::Import(e.to_string()))?;
    }
    engine.forget_image(tag);
    let image = docker
        .inspect_image(tag)
        .await
        .map_err(|e| ImageError::Import(e.to_string()))?;
    let id = image.id.unwrap_or_default();
    // The image it replaces lost its name: remove it unless a container still uses it.
    if let Some(old) = previous.filter(|old| *old != id) {
        let none: Option<bollard::query_parameters::RemoveImageOptions> = None;
        let _ = docker.remove_image(&old, none, None).await;
    }
    Ok(id)
}

pub(crate) fn split_tag(tag: &str) -> (&str, &str) {
    match tag.rsplit_once(':') {
        Some((repo, version)) if !version.contains('/') => (repo, version),
        _ => (tag, "latest"),
    }
}

/// An ELF executable without a program interpreter needs no shared libraries.
fn is_static_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[5] != 1 {
        return false;
    }
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let (phoff, entsize, count) = match bytes[4] {
        2 => (u64_at(0x20), u16_at(0x36), u16_at(0x38)),
        1 => (u32_at(0x1c).map(u64::from), u16_at(0x2a), u16_at(0x2c)),
        _ => return false,
    };
    let (Some(phoff), Some(entsize), Some(count)) = (phoff, entsize, count) else {
        return false;
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    (0..usize::from(count))
        .all(|i| u32_at(phoff + i * usize::from(entsize)).is_some_and(|kind| kind != PT_INTERP))
}

fn applets(busybox: &Path) -> Result<Vec<String>, ImageError> {
    let out = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|e| ImageError::Applets(busybox.to_owned(), e.to_string()))?;
    if !out.status.success() {
        return Err(ImageError::Applets(
            busybox.to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_owned)
        .collect())
}

/// The image's whole filesystem as a tar.
fn rootfs(busybox: &[u8], applets: &[String]) -> Vec<u8> {
    let mut tar = Tar::default();
    for (dir, mode) in [
        ("bin", 0o755),
        ("etc", 0o755),
        ("tmp", 0o1777),
        ("workspace", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
    ] {
        tar.entry(dir, b'5', mode, b"", "");
    }
    tar.entry("bin/busybox", b'0', 0o755, busybox, "");
    for applet in applets {
        tar.entry(&format!("bin/{applet}"), b'2', 0o777, b"", "busybox");
    }
    let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n";
    tar.entry("etc/passwd", b'0', 0o644, passwd.as_bytes(), "");
    tar.entry(
        "etc/group",
        b'0',
        0o644,
        b"root:x:0:\nnogroup:x:65534:\n",
        "",
    );
    tar.finish()
}

/// Just enough of ustar for a small image: short names, root-owned entries.
#[derive(Default)]
struct Tar {
    bytes: Vec<u8>,
}

impl Tar {
    fn entry(&mut self, name: &str, kind: u8, mode: u32, data: &[u8], link: &str) {
        let mut h = [0u8; 512];
        let put = |h: &mut [u8; 512], at: usize, s: &[u8]| h[at..at + s.len()].copy_from_slice(s);
        put(&mut h, 0, name.as_bytes());
        put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
        put(&mut h, 108, b"0000000\0");
        put(&mut h, 116, b"0000000\0");
        put(&mut h, 124, format!("{:011o}\0", data.len()).as_bytes());
        put(&mut h, 136, b"00000000000\0");
        put(&mut h, 148, b"        ");
        h[156] = kind;
        put(&mut h, 157, link.as_bytes());
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        self.bytes.extend_from_slice(&h);
        self.bytes.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.bytes.extend(std::iter::repeat_n(0u8, pad));
    }

    fn finish(mut self) -> Vec<u8> {
        self.bytes.extend(std::iter::repeat_n(0u8, 1024));
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_split_into_repository_and_version() {
        assert_eq!(
            split_tag("warden-sandbox:latest"),
            ("warden-sandbox", "latest")
        );
        assert_eq!(split_tag("warden-sandbox"), ("warden-sandbox", "latest"));
        assert_eq!(split_tag("host:5000/x"), ("host:5000/x", "latest"));
    }

    #[test]
    fn only_static_programs_pass() {
        assert!(!is_static_elf(b"#!/bin/sh\n"));
        // This test binary is dynamically linked (Rust links glibc dynamically by default).
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me));
        if let Ok(busybox) = std::fs::read(BUSYBOX) {
            assert!(is_static_elf(&busybox) || busybox.len() < 1 << 20);
        }
    }

    #[test]
    fn the_tar_is_well_formed() {
        let tar = rootfs(b"\x7fELFbinary", &["sh".into(), "ls".into()]);
        assert_eq!(tar.len() % 512, 0);
        assert_eq!(&tar[257..263], b"ustar\0");
    }
}
