//! The connection to one Docker engine (see [`crate::address`] for which): connected lazily
//! (loading a toolbox never needs a daemon), version negotiated, errors turned into messages a
//! person can act on, and, from first contact on, this instance's lease kept and the
//! containers of gone wardens removed ([`crate::lease`]).

use crate::address::{AddressError, EngineAddress, Place};
use crate::files::mode::Files;
use crate::lease::{INSTANCE_LABEL, LABEL, LEASE, Lease, OWNER_LABEL};
use bollard::Docker;
use bollard::errors::Error as BollardError;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_core::{ErrorKind, ToolError};

/// The tool a container runs.
pub(crate) const TOOL_LABEL: &str = "warden.tool";

/// warden's own sandbox image, built offline by `warden sandbox-image`.
pub const SANDBOX_IMAGE: &str = "warden-sandbox:latest";

/// How long the first contact waits for the containers of gone wardens to be removed.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// Seconds bollard waits for the headers of one response.
const REQUEST_TIMEOUT: u64 = 60;

/// One Docker engine, shared by every docker tool of a process that uses it.
pub struct Engine {
    /// Where it is, or why `DOCKER_HOST` names no engine warden accepts.
    address: Result<EngineAddress, AddressError>,
    extra_labels: BTreeMap<String, String>,
    files: Files,
    lease: Arc<Lease>,
    client: tokio::sync::Mutex<Option<Docker>>,
    /// The task renewing the lease and reaping leftovers, once connected.
    keeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    images: Mutex<HashSet<String>>,
}

impl Engine {
    /// The engine `DOCKER_HOST` names (with `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH`, as
    /// the docker CLI reads them), else /var/run/docker.sock. A setting warden refuses is
    /// kept as the engine's error: [`Engine::address`] and every call answer it. Roots are
    /// copied in when the engine is elsewhere or [`crate::FILES_ENV`] says `copy`.
    pub fn from_env() -> Self {
        let engine = Self::new(EngineAddress::from_env());
        match Files::from_env() {
            Files::Copied => engine.copying_files(),
            Files::Mounted => engine,
        }
    }

    /// The engine listening on the unix socket at `path`.
    pub fn with_socket(path: impl Into<std::path::PathBuf>) -> Self {
        Self::at(EngineAddress::Unix(path.into()))
    }

    /// The engine at `address`.
    pub fn at(address: EngineAddress) -> Self {
        Self::new(Ok(address))
    }

    fn new(address: Result<EngineAddress, AddressError>) -> Self {
        let engine = Self {
            address,
            extra_labels: BTreeMap::new(),
            files: Files::Mounted,
            lease: Arc::new(Lease::new(LEASE)),
            client: tokio::sync::Mutex::new(None),
            keeper: Mutex::default(),
            images: Mutex::default(),
        };
        // A bind mount names a folder of the engine's machine, which may not be this one.
        match engine.place() {
            Place::Local => engine,
            Place::Remote => engine.copying_files(),
        }
    }

    /// Another engine with this one's labels, lease length and (on this machine) way of
    /// handing roots over (a policy's `engine =`).
    pub(crate) fn sibling(&self, address: EngineAddress) -> Self {
        let mut engine = Self::at(address).lease_length(self.lease.length);
        engine.extra_labels = self.extra_labels.clone();
        match self.files {
            Files::Copied => engine.copying_files(),
            Files::Mounted => engine,
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

    /// How long this instance's lease lasts unrenewed ([`crate::LEASE`] unless set; tests
    /// shorten it).
    pub fn lease_length(mut self, length: Duration) -> Self {
        self.lease = Arc::new(self.lease.with_length(length));
        self
    }

    /// Where the engine is, or why the setting is refused.
    pub fn address(&self) -> Result<&EngineAddress, &AddressError> {
        self.address.as_ref()
    }

    /// The address as messages show it, or why the setting is refused.
    pub(crate) fn shown_address(&self) -> String {
        self.address
            .as_ref()
            .map_or_else(ToString::to_string, ToString::to_string)
    }

    /// On this machine or not: only a local engine's containers have pids, cgroups and
    /// network namespaces warden can use. A refused setting counts as remote.
    pub fn place(&self) -> Place {
        self.address
            .as_ref()
            .map_or(Place::Remote, EngineAddress::place)
    }

    /// This process's owner id, as written in [`OWNER_LABEL`].
    pub fn owner(&self) -> &str {
        &self.lease.owner
    }

    /// This instance's id, as written in [`INSTANCE_LABEL`].
    pub fn instance(&self) -> &str {
        &self.lease.instance
    }

    /// The labels of a container of `tool`.
    pub(crate) fn labels(&self, tool: &str, mode: &str) -> HashMap<String, String> {
        let mut labels: HashMap<String, String> = self
            .extra_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(LABEL.into(), "1".into());
        labels.insert(OWNER_LABEL.into(), self.lease.owner.clone());
        labels.insert(INSTANCE_LABEL.into(), self.lease.instance.clone());
        labels.insert(TOOL_LABEL.into(), tool.into());
        labels.insert("warden.mode".into(), mode.into());
        labels
    }

    /// The client, connecting on first use; a failed connection is retried on the next call.
    /// The first contact removes what gone wardens left and starts renewing this one's lease.
    pub async fn client(&self) -> Result<Docker, ToolError> {
        let mut slot = self.client.lock().await;
        if let Some(docker) = slot.as_ref() {
            return Ok(docker.clone());
        }
        let address = self.address.as_ref().map_err(|why| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("no Docker engine warden accepts is named: {why}"),
            )
        })?;
        if let Some(missing) = address.missing_cert() {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "the client certificates for the Docker engine at {address} lack {}: put \
                     ca.pem (the CA that signed the engine's certificate), cert.pem and key.pem \
                     (warden's, signed by a CA the engine's --tlscacert trusts) there",
                    missing.display()
                ),
            )
            .with_detail("engine", address.to_string()));
        }
        let docker = connect(address).map_err(|e| self.unreachable(&e))?;
        // bollard speaks a newer API than Debian's engine (1.41): agree on the older one.
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| self.unreachable(&e))?;
        // Bounded: a container the engine cannot remove (a runtime stuck starting it) must not
        // hold up this process's first call; the next start tries again.
        match tokio::time::timeout(REAP_WAIT, self.lease.reap(&docker)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!("cannot remove containers left by earlier warden processes: {e}");
            }
            Err(_) => tracing::warn!(
                "removing the containers left by earlier warden processes took over {REAP_WAIT:?}: \
                 left for the next start"
            ),
        }
        *self
            .keeper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(self.lease.clone().keep(docker.clone()));
        *slot = Some(docker.clone());
        Ok(docker)
    }

    /// A client of its own, not the shared one, for a runtime of its own (the shared one's
    /// connections belong to the runtime that made them); `None` when the engine does not
    /// answer.
    pub(crate) async fn fresh_client(&self) -> Option<Docker> {
        let address = self.address.as_ref().ok()?;
        connect(address).ok()?.negotiate_version().await.ok()
    }

    /// Takes this instance's lease on the engine, if it holds none yet: before its first
    /// container. `image` is one the engine has.
    pub(crate) async fn hold_lease(&self, docker: &Docker, image: &str) -> Result<(), ToolError> {
        self.lease
            .hold(docker, image)
            .await
            .map_err(|e| self.failure("create warden's lease marker", &e))
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
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(image)
    }

    /// Forgets that `image` was seen (it vanished under us).
    pub(crate) fn forget_image(&self, image: &str) {
        self.images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(image);
    }

    /// The engine cannot be reached: `unavailable`, naming its address and what to do.
    fn unreachable(&self, e: &BollardError) -> ToolError {
        let address = self.shown_address();
        let why = match e {
            BollardError::SocketNotFoundError(_) => "there is no socket there".to_owned(),
            other => chain(other),
        };
        let lower = why.to_lowercase();
        let hint = if lower.contains("http request to an https server") {
            "the engine speaks TLS: give warden its client certificates (DOCKER_TLS_VERIFY=1 and \
             DOCKER_CERT_PATH, or `engine_certs` in the policy)"
        } else if lower.contains("permission denied") {
            "let warden's user use Docker (add it to the `docker` group) or run warden as root"
        } else if ["certificate", "alert", "tls", "handshake", "pem"]
            .iter()
            .any(|w| lower.contains(w))
        {
            "the TLS handshake failed: check that the folder's ca.pem signed the engine's \
             certificate (for the name or IP warden dials), and that cert.pem and key.pem are \
             warden's, signed by the CA the engine's --tlscacert names"
        } else if self.place() == Place::Local {
            "start it (`sudo systemctl start docker`, or `sudo dockerd &`), or point DOCKER_HOST \
             at its socket"
        } else {
            "check that the engine runs and listens there (dockerd -H tcp://…:PORT --tlsverify), \
             and that DOCKER_HOST or the policy's `engine` names it"
        };
        ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "the Docker engine is not reachable at {address} ({why}): {hint}; then try again"
            ),
        )
        .with_detail("engine", address)
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

impl Drop for Engine {
    /// Stops renewing and gives the lease back: this instance's containers are removed by
    /// their own guards.
    fn drop(&mut self) {
        if let Some(keeper) = self
            .keeper
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            keeper.abort();
        }
        if let Some(docker) = self.client.get_mut().take() {
            self.lease.release(docker);
        }
    }
}

/// A client for `address` (nothing is sent yet).
pub(crate) fn connect(address: &EngineAddress) -> Result<Docker, BollardError> {
    let version = bollard::API_DEFAULT_VERSION;
    match address {
        EngineAddress::Unix(path) => {
            Docker::connect_with_unix(&path.to_string_lossy(), REQUEST_TIMEOUT, version)
        }
        EngineAddress::Tls { host, certs } => Docker::connect_with_ssl(
            host,
            &certs.join("key.pem"),
            &certs.join("cert.pem"),
            &certs.join("ca.pem"),
            REQUEST_TIMEOUT,
            version,
        ),
        EngineAddress::Plain { host } => Docker::connect_with_http(host, REQUEST_TIMEOUT, version),
    }
}

/// An error with its causes ("client error (Connect): Connection refused (os error 111)"),
/// on one line (the engine's messages may end in a newline).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string().trim_end().to_owned();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string().trim_end().to_owned();
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
        .strip_prefix(crate::names::DEBIAN_REPOSITORY)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_names_the_command_that_builds_it() {
        let busybox = missing_image(SANDBOX_IMAGE).message;
        assert!(busybox.contains("`warden sandbox-image`"), "{busybox}");
        let debian = missing_image(crate::names::DEBIAN_IMAGE).message;
        assert!(
            debian.contains("`warden sandbox-image --debian`"),
            "{debian}"
        );
        let other = missing_image("python:3.12-slim").message;
        assert!(other.contains("docker pull python:3.12-slim"), "{other}");
    }
}
