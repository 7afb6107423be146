//! The engine's OCI runtimes. A policy's `runtime` is checked against the engine's `runtimes`
//! when the policy loads — the one thing loading asks an engine, and only for a policy that
//! names a runtime — so a name the engine lacks is a load error naming the fix, not a failure
//! at the first call. An engine that does not answer then is not waited for: the policy loads,
//! and its calls say what the engine says.
//!
//! gVisor's `runsc` brings its own network stack. warden's gate is a listener bound in the
//! container's network namespace ([`crate::gate`]); runsc sees that namespace only when it is
//! registered with `--network=host` (its host network is then the container's own empty
//! namespace, not this machine's), so a gated policy under a runsc registered otherwise is
//! refused at load. Under gVisor, what runs inside meets gVisor's kernel, not this
//! machine's: the seccomp profile holds the sandbox itself, and the sockets inside are the
//! ones gVisor implements (unix, TCP, UDP, and netlink route and uevent, which it answers
//! itself).

use crate::address::EngineAddress;
use std::path::Path;
use std::time::Duration;

/// How long loading waits for the engine's list of runtimes.
const ASK_WAIT: Duration = Duration::from_secs(3);

/// One runtime the engine has, as its `daemon.json` registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Runtime {
    pub name: String,
    /// The program the engine runs (`runc`, `/usr/bin/runsc`).
    pub path: String,
    /// The arguments it is registered with (`--network=host`).
    pub args: Vec<String>,
}

impl Runtime {
    /// True when it is gVisor's runsc.
    pub(crate) fn is_gvisor(&self) -> bool {
        Path::new(&self.path)
            .file_name()
            .is_some_and(|n| n == "runsc")
    }

    /// The value of one of its `--flag=value` (or `--flag value`) arguments.
    fn flag(&self, flag: &str) -> Option<&str> {
        let long = format!("--{flag}");
        let mut args = self.args.iter();
        while let Some(arg) = args.next() {
            if let Some(value) = arg.strip_prefix(&format!("{long}=")) {
                return Some(value);
            }
            if *arg == long {
                return args.next().map(String::as_str);
            }
        }
        None
    }

    /// Why warden's gate cannot serve its containers, if it cannot.
    pub(crate) fn refuses_gate(&self) -> Option<String> {
        if !self.is_gvisor() || self.flag("network") == Some("host") {
            return None;
        }
        Some(format!(
            "the engine's runtime `{}` is gVisor registered without `--network=host`, so its \
             containers use gVisor's own network stack, which warden's gate (a listener in the \
             container's empty network namespace) cannot reach: register it with \
             \"runtimeArgs\": [\"--network=host\"] in the engine's daemon.json (its host network \
             is then the container's own namespace, not this machine's) and reload the engine",
            self.name
        ))
    }

    /// What it is, for the audit.
    pub(crate) fn describe(&self) -> String {
        if !self.is_gvisor() {
            return format!(
                "{} ({}): the host's kernel, as with runc",
                self.name, self.path
            );
        }
        let mut how = Vec::new();
        if let Some(platform) = self.flag("platform") {
            how.push(format!("platform {platform}"));
        }
        if let Some(network) = self.flag("network") {
            how.push(format!("network {network}"));
        }
        let how = if how.is_empty() {
            String::new()
        } else {
            format!("; {}", how.join(", "))
        };
        format!("{} (gVisor: a user-space kernel{how})", self.name)
    }
}

/// Why a policy's runtime cannot be used on its engine.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RuntimeError {
    #[error(
        "the Docker engine has no runtime `{name}` (it has: {have}): register it in the engine's \
         daemon.json (\"runtimes\": {{\"{name}\": {{\"path\": \"/usr/bin/{name}\"}}}}, for gVisor \
         with \"runtimeArgs\": [\"--network=host\"]) and reload the engine (SIGHUP), or drop \
         `runtime` to use the engine's default"
    )]
    Missing { name: String, have: String },
}

/// The runtime named `name` on the engine at `address`; `Ok(None)` when the engine does not
/// answer within [`ASK_WAIT`] (nothing is known yet).
pub(crate) fn find(address: &EngineAddress, name: &str) -> Result<Option<Runtime>, RuntimeError> {
    let Some(runtimes) = ask(address) else {
        return Ok(None);
    };
    match runtimes.iter().find(|r| r.name == name) {
        Some(found) => Ok(Some(found.clone())),
        None => {
            let mut have: Vec<&str> = runtimes.iter().map(|r| r.name.as_str()).collect();
            have.sort_unstable();
            Err(RuntimeError::Missing {
                name: name.to_owned(),
                have: have.join(", "),
            })
        }
    }
}

/// The engine's runtimes, asked on a thread of its own (loading is not async, and may run
/// inside a runtime that must not be blocked on); `None` when it does not answer in time.
fn ask(address: &EngineAddress) -> Option<Vec<Runtime>> {
    let address = address.clone();
    let asked = std::thread::Builder::new()
        .name("warden-docker-runtimes".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let docker = crate::engine::connect(&address).ok()?;
                let asked = async {
                    let docker = docker.negotiate_version().await.ok()?;
                    docker.info().await.ok()
                };
                tokio::time::timeout(ASK_WAIT, asked).await.ok().flatten()
            })
        })
        .ok()?
        .join()
        .ok()??;
    let runtimes = asked.runtimes.unwrap_or_default();
    if runtimes.is_empty() {
        tracing::debug!("the Docker engine lists no runtimes");
    }
    Some(
        runtimes
            .into_iter()
            .map(|(name, r)| Runtime {
                path: r.path.unwrap_or_else(|| name.clone()),
                args: r.runtime_args.unwrap_or_default(),
                name,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runsc(args: &[&str]) -> Runtime {
        Runtime {
            name: "runsc".into(),
            path: "/usr/bin/runsc".into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn gvisor_keeps_the_gate_only_on_the_containers_own_namespace() {
        assert!(
            runsc(&["--platform=ptrace", "--network=host"])
                .refuses_gate()
                .is_none()
        );
        assert!(runsc(&["--network", "host"]).refuses_gate().is_none());
        let refused = runsc(&["--network=none"]).refuses_gate().unwrap();
        assert!(refused.contains("\"--network=host\""), "{refused}");
        assert!(runsc(&[]).refuses_gate().is_some());
        let runc = Runtime {
            name: "runc".into(),
            path: "runc".into(),
            args: vec![],
        };
        assert!(runc.refuses_gate().is_none() && !runc.is_gvisor());
    }

    #[test]
    fn the_audit_says_what_the_runtime_is() {
        assert_eq!(
            runsc(&["--platform=ptrace", "--network=host"]).describe(),
            "runsc (gVisor: a user-space kernel; platform ptrace, network host)"
        );
    }
}
