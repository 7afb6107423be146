//! What warden tells the helper (the plan, on the helper's stdin: the sandbox, then the call)
//! and what the helper tells warden back (reports, one JSON line each, on file descriptor 3).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The file descriptor the helper reports on.
pub(crate) const REPORT_FD: i32 = 3;

/// The unix socket the helper hands the gate's listener to warden on, when the plan has one.
pub(crate) const GATE_FD: i32 = 4;

/// The sandbox's own small tmpfs at `/run` in its root, for what warden hands a sandbox with
/// credentials (no root may be seen below it then).
pub(crate) const TRUST_MOUNT: &str = "/run";

/// Where the command finds the bundle it trusts when its credentials go over HTTPS: in
/// [`TRUST_MOUNT`], at the path a Docker container finds it too.
pub(crate) const CA_BUNDLE: &str = "/run/warden-ca/bundle.pem";

/// Everything the helper needs to start one command, confined: the sandbox, then the call.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub sandbox: Sandbox,
    pub call: Call,
}

/// The helper's first frame: what a sandbox is, whichever call it serves. The helper sets it
/// up (namespaces, user mapping, its root and `/tmp`, the gate) before it reads the [`Call`], so a
/// sandbox can be prepared ahead of its call, off the call's path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sandbox {
    /// The working directory, inside a granted root's guest path (or `/`).
    pub cwd: PathBuf,
    pub uid: u32,
    pub gid: u32,
    /// Keep the host's network (`network = "unrestricted"`); else a new, empty namespace.
    pub host_network: bool,
    /// The policy grants hosts: in the new namespace, loopback is brought up and a listener
    /// bound at `127.0.0.1:GATE_PORT` is handed to warden on [`GATE_FD`], warden's gate.
    pub gate: bool,
    /// The granted roots; everything else but the system folders is out of reach.
    pub roots: Vec<Root>,
    /// Bytes of the call's own tmpfs at `/tmp`.
    pub tmp: u64,
    /// The policy has credentials: a tmpfs of the command's user at [`TRUST_MOUNT`] holds the
    /// bundle it trusts ([`CA_BUNDLE`]), read-only once written.
    pub trust: bool,
    /// What the command's stdin is.
    pub stdin: Stdin,
    /// Run with what the kernel offers instead of refusing.
    pub best_effort: bool,
    /// Set for a shell beside a session's: the session's sandbox, joined rather than made.
    #[serde(default)]
    pub join: Option<Join>,
    /// Warden's views folder (in its transaction store), for the views of shells beside a
    /// session's: where warden is not root, a session's sandbox keeps it with a copy of each
    /// viewed root under a cover ([`crate::layout::STASH`]), where such a shell makes its
    /// own; where warden is root, such a shell makes its views of it before it joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stash: Option<PathBuf>,
}

/// A live sandbox to join: its `init`, and its PID namespace's inode (a pid reused since is
/// not joined).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Join {
    pub init: i32,
    pub pid_namespace: u64,
    /// The shell's own view of the session's viewed roots, in their order: each layer's
    /// folders relative to the views folder of the session's stash. `None`: the session
    /// writes its roots in place, and so does the shell beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<Vec<ViewLayer>>,
}

/// What a command reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Stdin {
    /// `/dev/null`: a call's command reads nothing.
    Nothing,
    /// The helper's stdin after the plan: a session's commands, a program's input.
    Helper,
    /// The terminal its stdout is: a program of `warden exec` at a person's terminal, whose
    /// stdin, stdout and stderr are one pseudo-terminal, its controlling terminal.
    Terminal,
}

/// The helper's second frame: one call in the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Call {
    /// The command line; `argv[0]` is a path, or a name looked up in the granted `PATH`.
    pub argv: Vec<String>,
    /// The whole environment of the command: the grants, nothing else.
    pub env: Vec<(String, String)>,
    pub rlimits: Rlimits,
    /// Seconds after which the helper kills the command on its own, should warden fail to;
    /// counted from when the helper reads this frame. 0 for none (a session's shell, a
    /// program without a time limit).
    pub deadline_secs: u64,
    /// With credentials: this machine's roots and the sandbox's CA (PEM), written read-only
    /// to [`CA_BUNDLE`].
    pub ca_bundle: Option<String>,
}

/// Why a plan could not be framed for the helper.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("the helper's plan: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the helper's plan is too large ({0} bytes)")]
    TooLarge(usize),
}

/// One frame on the helper's stdin: its length (u32, little-endian), then its JSON.
pub(crate) fn frame(value: &impl Serialize) -> Result<Vec<u8>, FrameError> {
    let json = serde_json::to_vec(value)?;
    let len = u32::try_from(json.len()).map_err(|_| FrameError::TooLarge(json.len()))?;
    let mut framed = Vec::with_capacity(json.len() + 4);
    framed.extend_from_slice(&len.to_le_bytes());
    framed.extend_from_slice(&json);
    Ok(framed)
}

/// One granted folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Root {
    /// Where it is on the host (canonical).
    pub host: PathBuf,
    /// Where the command sees it: mounted there in the sandbox's root, unless it is in a
    /// system folder, where it is seen as it is (then it is the host path).
    pub guest: PathBuf,
    pub writable: bool,
    /// A call's view of a writable root (see `warden_tx`): the sandbox sees the root through an
    /// overlay whose upper layer takes its writes, and the root itself is untouched until
    /// warden commits them. `None`: the root itself, read-only or written in place (a
    /// session's, a program's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<ViewLayer>,
}

/// The folders of a root's overlay, in warden's home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ViewLayer {
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// The resource limits of every process of the command.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rlimits {
    /// Seconds of CPU time (`RLIMIT_CPU`): SIGXCPU at the limit, SIGKILL a second later.
    pub cpu_secs: u64,
    /// Bytes of address space (`RLIMIT_AS`).
    pub address_space: u64,
    /// Bytes of the largest file written (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Processes of the command's user (`RLIMIT_NPROC`).
    pub processes: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
}

impl Rlimits {
    /// What the model reads when the kernel ended `who` (the command, a session's shell) with
    /// `signal` for a limit of these it broke; `None` for a signal no limit sends.
    pub(crate) fn broken_by(&self, signal: i32, who: &str) -> Option<String> {
        match signal {
            nix::libc::SIGXCPU => Some(self.cpu_time_used(who)),
            nix::libc::SIGXFSZ => Some(format!(
                "{who} wrote a file larger than its limit of {} and was killed",
                warden_core::ByteSize(self.file_size)
            )),
            _ => None,
        }
    }

    /// What the model reads when `who` used all its CPU time.
    pub(crate) fn cpu_time_used(&self, who: &str) -> String {
        format!(
            "{who} used its CPU time limit of {}s and was killed; try a quicker command or a \
             smaller input",
            self.cpu_secs
        )
    }
}

/// One line on the report descriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Report {
    /// The helper started `init` in the new namespaces: its pid, as warden sees it.
    Init { pid: i32 },
    /// The confinement is in place; the command is being executed.
    Ready(Protections),
    /// The helper could not confine or start the command; nothing ran.
    Failed {
        /// `unavailable` when this machine lacks a protection, `setup` otherwise.
        unavailable: bool,
        message: String,
    },
    /// What the command's processes used, every one `init` reaped: CPU time and the largest
    /// resident set. Sent just before [`Report::Exited`].
    Used { cpu_ms: f64, max_rss_bytes: u64 },
    /// The command ended: its exit code, or the signal that killed it.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// The protections that were in force for one command, as the helper set them up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Protections {
    /// `uid:gid` the command ran as.
    pub user: String,
    /// A user namespace mapped warden's own user (when warden is not root).
    pub user_namespace: bool,
    /// A new PID namespace: the command sees (and can signal) only its own processes, and
    /// they all die with it.
    pub pid_namespace: bool,
    /// A new network namespace: nothing in it but loopback and, with net grants, warden's
    /// gate; no route out.
    pub network_namespace: bool,
    /// The only way out is warden's gate at `127.0.0.1:3128`, which allows the granted hosts.
    pub gate: bool,
    /// A mount namespace with a root of its own: the system folders, the granted roots at
    /// their guest paths, and the call's own tmpfs at `/tmp`, gone with the call.
    pub private_tmp: bool,
    /// The Landlock ABI in force, 0 when none.
    pub landlock_abi: u32,
    /// Landlock scopes signals and abstract unix sockets to the sandbox (ABI 6).
    pub landlock_scoped: bool,
    /// Landlock also denies TCP bind and connect (ABI 4, when there is no network grant).
    pub landlock_tcp_denied: bool,
    /// A seccomp filter allows only TCP and UDP sockets and unix socketpairs, and refuses
    /// io_uring.
    pub seccomp: bool,
    /// The seccomp filter also refuses new namespaces (`unshare`, `clone` with a namespace
    /// flag, `clone3`) and `setns`; threads and `fork` stay.
    pub new_namespaces_denied: bool,
    /// Rlimits, no-new-privileges, empty environment, closed stdin, own session.
    pub rlimits: bool,
    /// What was missing and accepted because the policy says `isolation = "best-effort"`.
    pub missing: Vec<String>,
}

impl Protections {
    /// What a command has where the kernel refused namespaces (`why`) and the policy accepts
    /// best effort: none of what the namespaces give, each named missing.
    pub(crate) fn without_namespaces(why: &str, host_network: bool) -> Self {
        let mut missing = vec![
            format!("namespaces (the kernel refused them: {why})"),
            "a root of its own: no private /tmp (/tmp is out of reach), the roots at their host \
             paths"
                .into(),
        ];
        if !host_network {
            missing.push("network isolation: the host's network is reachable".into());
        }
        Self {
            missing,
            ..Self::default()
        }
    }

    /// One line per protection, for the audit and messages.
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut out = vec![format!("runs as {}", self.user)];
        if self.user_namespace {
            out.push("user namespace".into());
        }
        if self.pid_namespace {
            out.push("PID namespace (sees and signals only its own processes)".into());
        }
        if self.gate {
            out.push(
                "network namespace whose only way out is warden's gate (the granted hosts)".into(),
            );
        } else if self.network_namespace {
            out.push("network namespace (no network)".into());
        }
        if self.private_tmp {
            out.push(
                "mount namespace with a root of its own: the system folders, the granted roots \
                 at their guest paths, a private /tmp"
                    .into(),
            );
        }
        if self.landlock_abi > 0 {
            let mut l = format!(
                "landlock ABI {}: files only in the granted roots and system folders",
                self.landlock_abi
            );
            if self.landlock_scoped {
                l.push_str("; signals and abstract sockets scoped");
            }
            if self.landlock_tcp_denied {
                l.push_str(if self.gate {
                    "; TCP only to the gate"
                } else {
                    "; TCP denied"
                });
            }
            out.push(l);
        }
        if self.seccomp {
            let mut s = String::from(
                "seccomp: sockets only TCP and UDP over IPv4 and IPv6 and unix socketpairs \
                 (no unix sockets, vsock, MPTCP, raw or netlink), no io_uring",
            );
            if self.new_namespaces_denied {
                s.push_str(", no new namespaces or setns (threads and fork stay)");
            }
            out.push(s);
        }
        if self.rlimits {
            out.push(
                "rlimits (CPU, address space, file size, processes, open files, no core), \
                 no-new-privileges, own session"
                    .into(),
            );
        }
        for m in &self.missing {
            out.push(format!("MISSING: {m}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Protections;

    #[test]
    fn a_sandbox_without_namespaces_names_each_protection_it_lacks() {
        let described = Protections::without_namespaces("EPERM", false).describe();
        for words in ["namespaces", "no private /tmp", "host's network"] {
            assert!(
                described
                    .iter()
                    .any(|l| l.starts_with("MISSING: ") && l.contains(words)),
                "{words}: {described:?}"
            );
        }
        let shared = Protections::without_namespaces("EPERM", true).missing;
        assert!(!shared.iter().any(|m| m.contains("network")), "{shared:?}");
    }

    #[test]
    fn the_seccomp_line_names_what_the_filter_refuses() {
        let p = Protections {
            seccomp: true,
            new_namespaces_denied: true,
            ..Protections::default()
        };
        assert!(
            p.describe().contains(
                &"seccomp: sockets only TCP and UDP over IPv4 and IPv6 and unix socketpairs \
                  (no unix sockets, vsock, MPTCP, raw or netlink), no io_uring, no new \
                  namespaces or setns (threads and fork stay)"
                    .to_owned()
            ),
            "{:?}",
            p.describe()
        );
    }
}
