//! The container's end of warden's gate. A container with `network = "none"` has a network
//! namespace of its own with only loopback up. warden, as root, enters that namespace on a
//! thread of its own, binds `127.0.0.1:GATE_PORT` there and leaves: the socket stays in the
//! container's namespace, warden serves it from its own with [`warden_net::Proxy`], and the
//! container reaches the gate and, through it, the granted hosts, and nothing else: nothing
//! routes out of its namespace, and nothing else listens in it.
//!
//! Every container's shell waits for its commands on stdin ([`crate::launch`]), which warden
//! sends once the gate listens. Under gVisor registered with `--network=host`, the namespace
//! gVisor's network uses is this same one ([`crate::runtime`]).
//!
//! Entering the namespace takes the container's pid as this machine sees it, so only a local
//! engine's containers can have a gate: a policy with net grants on a tcp engine does not
//! load ([`REMOTE`] says why), and a container is never given an open network instead.

use crate::address::Place;
use crate::engine::Engine;
use bollard::models::{ContainerCreateBody, Mount, MountType};
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use warden_core::{ErrorKind, Grants, ToolError};
use warden_net::{Credentials, GATE_PORT};

/// Where a container finds the bundle it trusts when its credentials go over HTTPS.
const TRUST_DIR: &str = "/run/warden-ca";
const BUNDLE: &str = "bundle.pem";

/// What one gated container needs besides its gate: its credentials (placeholders drawn for
/// it alone) and, with credentials, the folder holding the bundle it trusts, mounted
/// read-only and removed with this.
pub(crate) struct Sandboxed {
    pub credentials: Credentials,
    trust: Option<tempfile::TempDir>,
}

impl Sandboxed {
    /// Reads the credentials' values now: a missing one answers the call `unavailable`.
    pub(crate) fn new(grants: &Grants) -> Result<Self, ToolError> {
        let credentials = Credentials::new(grants.resolve_credentials()?);
        let failed = |why: String| {
            ToolError::new(
                ErrorKind::Internal,
                format!("the container's CA bundle: {why}"),
            )
        };
        let trust = match credentials
            .trust_bundle()
            .map_err(|e| failed(e.to_string()))?
        {
            None => None,
            Some(bundle) => {
                use std::os::unix::fs::PermissionsExt;
                let dir = tempfile::Builder::new()
                    .prefix("warden-ca-")
                    .tempdir()
                    .map_err(|e| failed(e.to_string()))?;
                let file = dir.path().join(BUNDLE);
                // The container's user is not warden's: the folder and file are for all to read.
                std::fs::write(&file, bundle)
                    .and_then(|()| {
                        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                    })
                    .and_then(|()| {
                        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                    })
                    .map_err(|e| failed(e.to_string()))?;
                Some(dir)
            }
        };
        Ok(Self { credentials, trust })
    }

    /// The container's env beyond its grants: the gate's variables, the placeholders, and the
    /// bundle's path.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let mut env = warden_net::proxy_env();
        env.extend(self.credentials.sandbox_env());
        if self.trust.is_some() {
            env.extend(Credentials::trust_env(&format!("{TRUST_DIR}/{BUNDLE}")));
        }
        env
    }

    /// Mounts the bundle's folder, read-only.
    pub(crate) fn mount_into(&self, body: &mut ContainerCreateBody) {
        let (Some(dir), Some(host)) = (&self.trust, body.host_config.as_mut()) else {
            return;
        };
        host.mounts.get_or_insert_with(Vec::new).push(Mount {
            target: Some(TRUST_DIR.into()),
            source: Some(dir.path().display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
}

/// Why a policy's net grants cannot be kept by a docker tool on this machine, if they cannot.
pub(crate) fn unsupported() -> Option<&'static str> {
    (!nix::unistd::Uid::effective().is_root()).then_some(
        "warden binds each container's gate inside the container's network namespace, which \
         takes root: run warden as root, or use a host tool (kind = \"host\"), whose gate needs \
         no privilege",
    )
}

/// Why a remote engine's containers get no gate.
pub(crate) const REMOTE: &str = "net grants for docker tools need a local engine (a unix socket \
     on this machine): warden enters each container's network namespace by its pid, and a tcp \
     engine's pids are not this machine's, even on loopback. Use a local engine, a host tool \
     (kind = \"host\"), or `network = \"unrestricted\"` to let the container reach every host";

/// Why the gate's listener could not be bound inside a container.
#[derive(Debug, thiserror::Error)]
enum BindError {
    #[error(
        "the container's process {pid} is not visible here ({source}); the gate needs the \
         Docker engine on this machine"
    )]
    Invisible { pid: i64, source: std::io::Error },
    #[error("entering the container's network namespace: {0}")]
    Namespace(#[source] nix::Error),
    #[error("binding 127.0.0.1:{port}: {source}", port = GATE_PORT)]
    Bind { source: std::io::Error },
}

/// Binds the gate's listener in the network namespace of the running container whose
/// process is `pid` (as this machine sees it).
pub(crate) async fn listen_in(engine: &Engine, pid: i64) -> Result<TcpListener, ToolError> {
    let failed = |why: String| {
        ToolError::new(
            ErrorKind::Unavailable,
            format!("warden could not open the gate in the container: {why}"),
        )
    };
    // Loading refuses gated policies on such engines; a pid there is not one of ours.
    if engine.place() == Place::Remote {
        return Err(failed(REMOTE.into()));
    }
    let bind = move || -> Result<TcpListener, BindError> {
        let namespace = File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|source| BindError::Invisible { pid, source })?;
        nix::sched::setns(namespace, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(BindError::Namespace)?;
        TcpListener::bind((Ipv4Addr::LOCALHOST, GATE_PORT))
            .map_err(|source| BindError::Bind { source })
    };
    // A thread of its own, which ends with it: this thread's namespace is the only one
    // `setns` changes, and no other task ever runs on it.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("warden-gate-bind".into())
        .spawn(move || {
            let _ = tx.send(bind());
        })
        .map_err(|e| failed(format!("a thread: {e}")))?;
    rx.await
        .map_err(|_| failed("the binding thread died".into()))?
        .map_err(|e| failed(e.to_string()))
}
