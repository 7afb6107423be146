//! The connection to the Docker engine: connected lazily (loading a toolbox never needs a
//! daemon), version negotiated, errors turned into messages a person can act on, and the
//! containers of dead warden processes removed on first contact.

use crate::files::Files;
use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use warden_core::{ErrorKind, ToolError};

/// Every container warden creates carries this label (`docker ps -a --filter label=warden`).
pub const LABEL: &str = "warden";
/// The process that owns a container: `boot-id:pid:start-time`.
pub const OWNER_LABEL: &str = "warden.owner";
/// The tool a container runs.
pub(crate) const TOOL_LABEL: &str = "warden.tool";

/// warden's own sandbox image, built offline by `warden sandbox-image`.
pub const SANDBOX_IMAGE: &str = "warden-sandbox:latest";

const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// Seconds bollard waits for the headers of one response.
const REQUEST_TIMEOUT: u64 = 60;

/// One Docker engine, shared by every docker tool of a process.
pub struct Engine {
    socket: String,
    owner: String,
    extra_labels: BTreeMap<String, String>,
    files: Files,
    client: tokio::sync::Mutex<Option<Docker>>,
    images: Mutex<HashSet<String>>,
}

impl Engine {
    /// The engine at `$DOCKER_HOST` when it names a unix socket, else /var/run/docker.sock;
    /// roots copied in when [`crate::FILES_ENV`] says `copy`.
    pub fn from_env() -> Self {
        let socket = std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(str::to_owned))
            .unwrap_or_else(|| DEFAULT_SOCKET.to_owned());
        let engine = Self::with_socket(socket);
        match Files::from_env() {
            Files::Copied => engine.copying_files(),
            Files::Mounted => engine,
        }
    }

    /// The engine listening on the unix socket at `path`.
    pub fn with_socket(path: impl Into<String>) -> Self {
        Self {
            socket: path.into(),
            owner: owner_id(),
            extra_labels: BTreeMap::new(),
            files: Files::Mounted,
            client: tokio::sync::Mutex::new(None),
            images: Mutex::default(),
        }
    }

    /// Adds a label to every container (tests mark theirs).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_labels.insert(key.into(), value.into());
        self
    }

    /// Copies granted roots into its containers instead of mounting them: for an engine
    /// whose machine does not hold this one's folders.
    pub fn copying_files(mut self) -> Self {
        self.files = Files::Copied;
        self
    }

    /// How granted roots reach its containers.
    pub fn files(&self) -> Files {
        self.files
    }

    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// This process's owner id, as written in [`OWNER_LABEL`].
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The labels of a container of `tool`.
    pub(crate) fn labels(&self, tool: &str, mode: &str) -> HashMap<String, String> {
        let mut labels: HashMap<String, String> = self
            .extra_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(LABEL.into(), "1".into());
        labels.insert(OWNER_LABEL.into(), self.owner.clone());
        labels.insert(TOOL_LABEL.into(), tool.into());
        labels.insert("warden.mode".into(), mode.into());
        labels
    }

    /// The client, connecting on first use; a failed connection is retried on the next call.
    pub async fn client(&self) -> Result<Docker, ToolError> {
        let mut slot = self.client.lock().await;
        if let Some(docker) = slot.as_ref() {
            return Ok(docker.clone());
        }
        let docker =
            Docker::connect_with_unix(&self.socket, REQUEST_TIMEOUT, bollard::API_DEFAULT_VERSION)
                .map_err(|e| self.unreachable(&e))?;
        // bollard speaks a newer API than Debian's engine (1.41): agree on the older one.
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if let Err(e) = reap_dead_owners(&docker).await {
            tracing::warn!("cannot remove containers left by earlier warden processes: {e}");
        }
        *slot = Some(docker.clone());
        Ok(docker)
    }

    /// Checks once per process that `image` is on the engine.
    pub(crate) async fn ensure_image(&self, docker: &Docker, image: &str) -> Result<(), ToolError> {
        if self.known_image(image) {
            return Ok(());
        }
        match docker.inspect_image(image).await {
            Ok(_) => {
                self.images
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(image.to_owned());
                Ok(())
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Err(missing_image(image)),
            Err(e) => Err(self.failure("inspect the image", &e)),
        }
    }

    fn known_image(&self, image: &str) -> bool {
        self.images
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(image)
    }

    /// Forgets that `image` was seen (it vanished under us).
    pub(crate) fn forget_image(&self, image: &str) {
        self.images
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(image);
    }

    /// The daemon cannot be reached: `unavailable`, naming the socket and how to start it.
    fn unreachable(&self, e: &BollardError) -> ToolError {
        let why = match e {
            BollardError::SocketNotFoundError(_) => "there is no socket there".to_owned(),
            other => chain(other),
        };
        let hint = if why.to_lowercase().contains("permission denied") {
            "let warden's user use Docker (add it to the `docker` group) or run warden as root"
        } else {
            "start it (`sudo systemctl start docker`, or `sudo dockerd &`), or point DOCKER_HOST \
             at its unix socket"
        };
        ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "the Docker daemon is not reachable at unix://{} ({why}): {hint}; then try again",
                self.socket
            ),
        )
        .with_detail("socket", self.socket.clone())
    }

    /// A request the engine failed: `unavailable` when the daemon went away, else `internal`.
    pub(crate) fn failure(&self, what: &str, e: &BollardError) -> ToolError {
        match e {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => ToolError::new(
                ErrorKind::Unavailable,
                format!("the Docker engine refused to {what} ({status_code}: {message})"),
            ),
            BollardError::SocketNotFoundError(_)
            | BollardError::HyperLegacyError { .. }
            | BollardError::IOError { .. } => self.unreachable(e),
            other => ToolError::new(
                ErrorKind::Internal,
                format!(
                    "talking to the Docker engine failed while trying to {what}: {}",
                    chain(other)
                ),
            ),
        }
    }
}

/// An error with its causes ("client error (Connect): Connection refused (os error 111)").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// The image is not on the engine: name it and the command that makes it.
pub(crate) fn missing_image(image: &str) -> ToolError {
    let debian = image
        .strip_prefix(crate::debian::DEBIAN_REPOSITORY)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'));
    let how = if image == SANDBOX_IMAGE {
        "build it with `warden sandbox-image` (offline, from Debian's busybox-static)".to_owned()
    } else if debian {
        "build it with `warden sandbox-image --debian` (from this machine's apt sources with \
         mmdebstrap; a minute or more)"
            .to_owned()
    } else {
        format!(
            "build or pull it (`docker pull {image}`); warden's own sandbox image is built by \
             `warden sandbox-image`"
        )
    };
    ToolError::new(
        ErrorKind::Unavailable,
        format!("the Docker image `{image}` is not on this engine: {how}"),
    )
    .with_detail("image", image.to_owned())
}

/// Removes every warden container whose owner process is gone (a crash, a kill -9).
async fn reap_dead_owners(docker: &Docker) -> Result<usize, BollardError> {
    let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![LABEL])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let mut removed = 0;
    for c in docker.list_containers(Some(options)).await? {
        let owner = c.labels.as_ref().and_then(|l| l.get(OWNER_LABEL));
        if owner.is_some_and(|o| owner_alive(o)) {
            continue;
        }
        let Some(id) = c.id else { continue };
        // `v`: with the volumes that held its copied roots.
        let force = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match docker.remove_container(&id, Some(force)).await {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(container = %id, "cannot remove a leftover container: {e}"),
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "removed containers left by warden processes that are gone"
        );
    }
    Ok(removed)
}

/// `boot-id:pid:start-time` of this process: a pid alone is reused, after a reboot too.
fn owner_id() -> String {
    let pid = std::process::id();
    format!(
        "{}:{pid}:{}",
        boot_id(),
        start_time(pid).unwrap_or_default()
    )
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(str::to_owned)
}

/// True while the process named by an owner label still runs on this machine.
pub(crate) fn owner_alive(owner: &str) -> bool {
    let mut parts = owner.splitn(3, ':');
    let (Some(boot), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    boot == boot_id() && start_time(pid).as_deref() == Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_names_the_command_that_builds_it() {
        let busybox = missing_image(SANDBOX_IMAGE).message;
        assert!(busybox.contains("`warden sandbox-image`"), "{busybox}");
        let debian = missing_image(crate::debian::DEBIAN_IMAGE).message;
        assert!(
            debian.contains("`warden sandbox-image --debian`"),
            "{debian}"
        );
        let other = missing_image("python:3.12-slim").message;
        assert!(other.contains("docker pull python:3.12-slim"), "{other}");
    }

    #[test]
    fn this_process_is_alive_and_a_stranger_is_not() {
        assert!(owner_alive(&owner_id()));
        let id = owner_id();
        let (head, _) = id.rsplit_once(':').unwrap();
        assert!(!owner_alive(&format!("{head}:1")));
        assert!(!owner_alive("garbage"));
        assert!(!owner_alive(&format!(
            "other-boot:{}:1",
            std::process::id()
        )));
    }
}
