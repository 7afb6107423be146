//! The `[executor]` knobs that both command executors (docker, host) take, each parsed and
//! checked once: the tool's name, its command line, the user, the network and `/tmp`.

use std::fmt;
use toml::Spanned;
use warden_core::{
    Capabilities, ExecutorTable, Grants, Located, NetHosts, Paths, PolicyError, Reach, Support,
};

/// What a command executor honours: env and roots (seen at `paths`), hosts and credentials
/// through warden's gate, sessions; not the DNS switch, fuel or the response cap, which
/// belong to wasm tools' host-side HTTP and instructions; which roots a command opened is
/// not observed. `changes`: whether the executor can hold a call's changes for a reviewer.
pub fn capabilities(paths: Paths, changes: Support) -> Capabilities {
    Capabilities {
        paths,
        env: Support::Honoured,
        caller_env: Support::Honoured,
        net: NetHosts::Enforced,
        dns: Support::Refused(
            "the switch is for wasm tools' own lookups; a command's names are resolved by \
             warden's gate (a resolver inside the sandbox would be a way out)",
        ),
        credentials: Support::Honoured,
        fuel: Support::Refused(
            "fuel counts WebAssembly instructions; a command's CPU is bounded by its executor's \
             own knobs (`cpus`, `cpu_time`) and the timeout",
        ),
        response: Support::Refused(
            "the cap is on wasm tools' HTTP responses; a command reads its network directly \
             (what it answers is capped by `output`)",
        ),
        memory_ceiling: None,
        sessions: true,
        programs: true,
        // A container or process opens its roots through the kernel, where warden does not
        // watch (fanotify needs privileges and sees every process on the mount).
        roots_observed: false,
        changes,
    }
}

/// Size of the private tmpfs at `/tmp` when the policy writes none.
const DEFAULT_TMP: u64 = 64 << 20;

/// Why a policy's `user` cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    #[error("user 0 is root: a command tool never runs as root")]
    Root,
    #[error("user `{0}` must be numeric: \"uid\" or \"uid:gid\", such as \"65534:65534\"")]
    NotNumeric(String),
}

/// A numeric user and group; never root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

impl User {
    /// The unprivileged user a command runs as when nothing else is chosen.
    pub const NOBODY: User = User {
        uid: 65534,
        gid: 65534,
    };

    /// `uid` or `uid:gid`, numeric (names are not warden's to trust), never root. A bare uid
    /// gets the group of the same number (Docker would pick group 0, root's, for a uid the
    /// image does not know).
    pub fn parse(written: &str) -> Result<User, UserError> {
        let mut parts = written.splitn(2, ':');
        let uid = parts.next().and_then(|u| u.parse::<u32>().ok());
        let gid = match parts.next() {
            Some(g) => g.parse::<u32>().ok(),
            None => uid,
        };
        match (uid, gid) {
            (Some(0), Some(_)) => Err(UserError::Root),
            (Some(uid), Some(gid)) => Ok(User { uid, gid }),
            _ => Err(UserError::NotNumeric(written.to_owned())),
        }
    }

    /// The policy's `user`, checked, with its line.
    pub fn written(
        table: &ExecutorTable,
        user: Option<Spanned<String>>,
    ) -> Result<Option<Located<User>>, PolicyError> {
        user.map(|u| {
            let line = table.line(&u.span());
            User::parse(u.get_ref())
                .map(|value| Located { value, line })
                .map_err(|e| table.error(line, e.to_string()))
        })
        .transpose()
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

/// The network a container or host process gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkMode {
    /// No way out: Docker's `network_mode: none`, or a new network namespace for a host
    /// process. The default.
    None,
    /// Every host, with no allowlist (Docker's default bridge, or the host's own network): an
    /// explicit opt-in the audit flags.
    Unrestricted,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Unrestricted => "unrestricted",
        }
    }

    /// Whether a sandbox gets warden's gate: under `none` when `net` grants hosts, which the
    /// gate alone lets through; `unrestricted` has the network itself instead.
    pub fn gated(self, grants: &Grants) -> bool {
        self == Self::None && !grants.net.hosts.is_empty()
    }

    /// What a sandbox of this mode reaches, for the audit.
    pub fn reach(self, grants: &Grants) -> Reach {
        match self {
            Self::Unrestricted => Reach::Unrestricted,
            Self::None if self.gated(grants) => Reach::Grants,
            Self::None => Reach::None,
        }
    }

    /// `network = "none" | "unrestricted"`, checked against the policy's `net` grants: they
    /// are kept under `none` (by the gate) and contradict `unrestricted`.
    pub fn written(
        table: &ExecutorTable,
        kind: &str,
        network: Option<Spanned<String>>,
        grants: &Grants,
    ) -> Result<Located<NetworkMode>, PolicyError> {
        let mode = match network {
            None => Located {
                value: NetworkMode::None,
                line: table.kind_line(),
            },
            Some(n) => {
                let line = table.line(&n.span());
                let value = match n.get_ref().as_str() {
                    "none" => NetworkMode::None,
                    "unrestricted" => NetworkMode::Unrestricted,
                    other => {
                        return Err(table.error(
                            line,
                            format!(
                                "network `{other}` is not known: \"none\" (the default: the \
                                 hosts in `net`, or nothing) or \"unrestricted\" (every host, \
                                 no allowlist)"
                            ),
                        ));
                    }
                };
                Located { value, line }
            }
        };
        if mode.value == NetworkMode::Unrestricted && !grants.net.hosts.is_empty() {
            return Err(table.error(
                mode.line,
                format!(
                    "network = \"unrestricted\" gives a {kind} tool every host, so its net \
                     grants would hold nothing back: keep the net grants (warden's gate lets \
                     only them through) or remove them"
                ),
            ));
        }
        Ok(mode)
    }
}

/// The shell a `session = true` tool keeps alive, from its argv template: a session is one
/// long-lived shell, so the template must be a shell running the command.
pub fn session_shell(
    table: &ExecutorTable,
    argv: &Located<Vec<String>>,
    template: &crate::Template,
    session: bool,
) -> Result<Option<String>, PolicyError> {
    match (session, template.shell()) {
        (false, _) => Ok(None),
        (true, Some(sh)) => Ok(Some(sh.to_owned())),
        (true, None) => Err(table.error(
            argv.line,
            "session = true keeps one long-lived shell, so argv must be a shell running the \
             command: [\"/bin/sh\", \"-c\", \"{command}\"] (any shell's path)",
        )),
    }
}

/// The `name` a command executor needs: its one tool's name.
pub fn tool_name(
    table: &ExecutorTable,
    kind: &str,
    name: Option<String>,
) -> Result<String, PolicyError> {
    name.ok_or_else(|| {
        table.error(
            table.kind_line(),
            format!("a {kind} executor needs `name = \"...\"`, the tool's name"),
        )
    })
}

/// The `argv` a command executor needs, with a program.
pub fn command_line(
    table: &ExecutorTable,
    kind: &str,
    argv: Option<Spanned<Vec<String>>>,
) -> Result<Located<Vec<String>>, PolicyError> {
    let argv = argv.ok_or_else(|| {
        table.error(
            table.kind_line(),
            format!(
                "a {kind} executor needs `argv`, the command line (for a shell tool: \
                 argv = [\"/bin/sh\", \"-c\", \"{{command}}\"])"
            ),
        )
    })?;
    let argv = table.located(argv);
    if argv.value.first().is_none_or(String::is_empty) {
        return Err(table.error(argv.line, "`argv` needs a program"));
    }
    Ok(argv)
}

/// The size of the private tmpfs at `/tmp`.
pub fn tmp_size(
    table: &ExecutorTable,
    tmp: Option<Spanned<warden_core::ByteSize>>,
) -> Result<u64, PolicyError> {
    match tmp {
        None => Ok(DEFAULT_TMP),
        Some(t) if t.get_ref().0 < (1 << 20) => {
            Err(table.error(table.line(&t.span()), "tmp must be at least 1MiB"))
        }
        Some(t) => Ok(t.get_ref().0),
    }
}

/// `transfer`: the most bytes a client may read from or write to a session's sandbox in one
/// request (`warden/read`, `warden/write`, never the model's); none unless written. It takes
/// effect in session mode only, whose sandbox outlives a call (the audit says so of a tool
/// without sessions).
pub fn transfer_size(
    table: &ExecutorTable,
    transfer: Option<Spanned<warden_core::ByteSize>>,
) -> Result<Option<u64>, PolicyError> {
    let Some(t) = transfer else {
        return Ok(None);
    };
    match t.get_ref().0 {
        0 => Err(table.error(table.line(&t.span()), "transfer must be more than 0 bytes")),
        n => Ok(Some(n)),
    }
}

/// The audit's line of a policy's `transfer`, when it writes one.
pub fn transfer_line(transfer: Option<u64>, session: bool) -> Option<warden_core::ReportLine> {
    transfer.map(|bytes| warden_core::ReportLine {
        label: "transfer",
        text: if session {
            format!(
                "a client (never the model) may read or write up to {} a request in a \
                 session's sandbox (`warden/read`, `warden/write`)",
                warden_core::ByteSize(bytes)
            )
        } else {
            "none: without `session = true` no sandbox outlives a call to be read or written".into()
        },
    })
}

/// A count written as an integer of at least 1 (`pids`, `processes`, `open_files`).
pub fn count(
    table: &ExecutorTable,
    what: &str,
    written: Option<Spanned<i64>>,
    default: u32,
) -> Result<u32, PolicyError> {
    match written {
        None => Ok(default),
        Some(n) => u32::try_from(*n.get_ref())
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                table.error(table.line(&n.span()), format!("{what} must be at least 1"))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_numeric_and_never_root() {
        assert_eq!(
            User::parse("1000"),
            Ok(User {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(User::parse("1000:50"), Ok(User { uid: 1000, gid: 50 }));
        assert!(User::parse("0").unwrap_err().to_string().contains("root"));
        assert!(User::parse("0:0").unwrap_err().to_string().contains("root"));
        assert!(
            User::parse("root")
                .unwrap_err()
                .to_string()
                .contains("numeric")
        );
        assert!(
            User::parse("1000:")
                .unwrap_err()
                .to_string()
                .contains("numeric")
        );
        assert_eq!(User::NOBODY.to_string(), "65534:65534");
    }
}
