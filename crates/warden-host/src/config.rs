//! The `[executor]` of `kind = "host"`: a command run as a confined host process. The command
//! line and the knobs that are the executor's own (timeout, memory and output stay in
//! `[limits]`). Every default is here.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;
use warden_command::{NetworkMode, User, command_line, count, tmp_size, tool_name, transfer_size};
use warden_core::{ByteSize, ExecutorTable, Grants, HumanDuration, Located, Policy, PolicyError};

/// Processes of the command's user when the policy writes none.
pub const DEFAULT_PROCESSES: u32 = 64;
/// Open files of one process when the policy writes none.
pub const DEFAULT_OPEN_FILES: u32 = 256;
/// Largest file the command may write when the policy writes none.
pub const DEFAULT_FILE_SIZE: u64 = 64 << 20;

/// What happens when this machine cannot confine a host command fully.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// The call is refused (`unavailable`) unless every protection is in force. The default.
    Required,
    /// The command runs with what the kernel offers: an explicit opt-in the audit flags.
    BestEffort,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::BestEffort => "best-effort",
        }
    }
}

/// A tool run as a confined host process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// The tool's name.
    pub name: String,
    pub description: Option<String>,
    /// The command line, an argv template (see [`crate::command::Template`]).
    pub argv: Located<Vec<String>>,
    /// The working directory on the host, canonical and inside a granted root (the command
    /// sees it below that root's guest path); `None`: the first granted root, else `/` (where
    /// the command can read nothing).
    pub workdir: Option<Located<PathBuf>>,
    pub user: User,
    pub network: Located<NetworkMode>,
    /// Bytes of the call's own tmpfs at `/tmp` (in a mount namespace of its own).
    pub tmp: u64,
    /// Most processes of the command's user (`RLIMIT_NPROC`).
    pub processes: u32,
    /// CPU time of each process (`RLIMIT_CPU`); `None`: the call's timeout, rounded up.
    pub cpu_time: Option<Duration>,
    /// Most open files of each process (`RLIMIT_NOFILE`).
    pub open_files: u32,
    /// Largest file the command may write (`RLIMIT_FSIZE`).
    pub file_size: u64,
    pub isolation: Located<Isolation>,
    /// One confined shell per session instead of one confined process tree per call.
    pub session: bool,
    /// The most bytes a client may read from or write to a session's sandbox in one
    /// request; `None`: none (see `warden_command::transfer_size`).
    pub transfer: Option<u64>,
}

/// The `[executor]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostSpec {
    name: Option<String>,
    description: Option<String>,
    argv: Option<Spanned<Vec<String>>>,
    workdir: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    network: Option<Spanned<String>>,
    tmp: Option<Spanned<ByteSize>>,
    processes: Option<Spanned<i64>>,
    cpu_time: Option<Spanned<HumanDuration>>,
    open_files: Option<Spanned<i64>>,
    file_size: Option<Spanned<ByteSize>>,
    isolation: Option<Spanned<String>>,
    session: Option<bool>,
    transfer: Option<Spanned<ByteSize>>,
}

impl HostConfig {
    /// Parses and checks the policy's `[executor]` table.
    pub fn from_policy(policy: &Policy) -> Result<HostConfig, PolicyError> {
        let table = &policy.executor;
        let spec: HostSpec = table.parse()?;
        let name = tool_name(table, "host", spec.name)?;
        let argv = command_line(table, "host", spec.argv)?;
        let workdir = match spec.workdir {
            Some(w) => {
                let line = table.line(&w.span());
                let value = table.base().join(w.get_ref()).canonicalize().map_err(|e| {
                    table.error(
                        line,
                        format!(
                            "workdir `{}` cannot be used ({e}); it must be a folder inside a \
                             granted root (relative paths are relative to the policy file)",
                            w.get_ref()
                        ),
                    )
                })?;
                Some(Located { value, line })
            }
            None => None,
        };
        let user = User::written(table, spec.user)?.map_or(User::NOBODY, |u| u.value);
        let network = NetworkMode::written(table, "host", spec.network, &policy.grants)?;
        let tmp = tmp_size(table, spec.tmp)?;
        let processes = count(table, "processes", spec.processes, DEFAULT_PROCESSES)?;
        let open_files = count(table, "open_files", spec.open_files, DEFAULT_OPEN_FILES)?;
        let cpu_time = match spec.cpu_time {
            Some(c) if c.get_ref().0 < Duration::from_secs(1) => {
                return Err(table.error(
                    table.line(&c.span()),
                    "cpu_time must be at least 1s (the kernel counts whole seconds)",
                ));
            }
            Some(c) => Some(c.get_ref().0),
            None => None,
        };
        let file_size = spec.file_size.map_or(DEFAULT_FILE_SIZE, |f| f.get_ref().0);
        let session = spec.session.unwrap_or(false);
        let transfer = transfer_size(table, spec.transfer)?;
        let isolation = match spec.isolation {
            None => Located {
                value: Isolation::Required,
                line: table.kind_line(),
            },
            Some(i) => {
                let line = table.line(&i.span());
                let value = match i.get_ref().as_str() {
                    "required" => Isolation::Required,
                    "best-effort" => Isolation::BestEffort,
                    other => {
                        return Err(table.error(
                            line,
                            format!(
                                "isolation `{other}` is not known: \"required\" (the default: \
                                 refuse to run unconfined) or \"best-effort\" (run with what \
                                 this kernel offers; the audit flags it)"
                            ),
                        ));
                    }
                };
                Located { value, line }
            }
        };
        let config = HostConfig {
            name,
            description: spec.description,
            argv,
            workdir,
            user,
            network,
            tmp,
            processes,
            cpu_time,
            open_files,
            file_size,
            isolation,
            session,
            transfer,
        };
        config.check(table, &policy.grants)?;
        Ok(config)
    }
}

impl HostConfig {
    /// The folder the command starts in, as it sees it: `workdir` at its root's guest path
    /// (the innermost root that holds it), else the first root's.
    pub fn start_dir(&self, grants: &Grants) -> PathBuf {
        let Some(w) = &self.workdir else {
            return grants
                .fs
                .first()
                .map_or("/".into(), |g| g.guest.clone().into());
        };
        grants
            .fs
            .iter()
            .filter_map(|g| Some((g, w.value.strip_prefix(&g.host).ok()?)))
            .min_by_key(|(_, inside)| inside.components().count())
            .map_or_else(
                || w.value.clone(),
                |(g, inside)| Path::new(&g.guest).join(inside),
            )
    }

    /// A workdir outside every granted root would be a folder the command cannot use.
    fn check(&self, table: &ExecutorTable, grants: &Grants) -> Result<(), PolicyError> {
        if let Some(w) = &self.workdir
            && !grants.fs.iter().any(|g| w.value.starts_with(&g.host))
        {
            return Err(table.error(
                w.line,
                format!(
                    "workdir {} is outside every granted root: grant it in [grants] fs, or \
                     leave workdir out (the first granted root is the default)",
                    w.value.display()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Helper, HostBackend};
    use warden_core::Backend;

    fn parse_in(dir: &Path, text: &str) -> Result<(Policy, HostConfig), PolicyError> {
        let backend = HostBackend::new(Helper {
            program: PathBuf::from("/nonexistent"),
            args: Vec::new(),
        });
        let policy = Policy::parse(&dir.join("shell.toml"), text, &[&backend as &dyn Backend])?;
        let cfg = HostConfig::from_policy(&policy)?;
        Ok((policy, cfg))
    }

    const SHELL: &str = "[executor]\nkind = \"host\"\nname = \"shell\"\n\
        argv = [\"/bin/sh\", \"-c\", \"{command}\"]\n";

    #[test]
    fn a_minimal_host_policy_is_confined_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let (p, cfg) = parse_in(dir.path(), SHELL).unwrap();
        assert_eq!(cfg.user, User::NOBODY);
        assert_eq!(cfg.network.value, NetworkMode::None);
        assert_eq!(cfg.isolation.value, Isolation::Required);
        assert_eq!(cfg.processes, DEFAULT_PROCESSES);
        assert_eq!(cfg.start_dir(&p.grants), Path::new("/"));
        assert!(!cfg.session);
    }

    #[test]
    fn session_mode_needs_a_shell_running_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let (_, cfg) = parse_in(dir.path(), &format!("{SHELL}session = true\n")).unwrap();
        assert!(cfg.session);
        let (policy, cfg) = parse_in(
            dir.path(),
            "[executor]\nkind = \"host\"\nname = \"ls\"\nargv = [\"/bin/ls\", \"{path}\"]\n\
             session = true\n",
        )
        .unwrap();
        assert!(cfg.session);
        let backend = HostBackend::new(Helper {
            program: PathBuf::from("/nonexistent"),
            args: Vec::new(),
        });
        let e = backend.load(&std::sync::Arc::new(policy)).err().unwrap();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("session = true"), "{e}");
    }

    #[test]
    fn roots_are_seen_at_their_guest_or_host_paths_and_the_first_is_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("w/sub")).unwrap();
        let (p, cfg) = parse_in(
            dir.path(),
            &format!("{SHELL}[grants]\nfs = [{{ host = \"w\", access = \"read-only\" }}]\n"),
        )
        .unwrap();
        let w = dir.path().join("w").canonicalize().unwrap();
        assert_eq!(p.grants.fs[0].guest, w.to_string_lossy());
        assert_eq!(cfg.start_dir(&p.grants), w);
        // A workdir is written as a host path and started in at its root's guest path.
        let (p, cfg) = parse_in(
            dir.path(),
            &format!(
                "{SHELL}workdir = \"w/sub\"\n[grants]\nfs = [{{ host = \"w\", guest = \"/w\", access = \"read-only\" }}]\n"
            ),
        )
        .unwrap();
        assert_eq!(p.grants.fs[0].guest, "/w");
        assert_eq!(cfg.start_dir(&p.grants), Path::new("/w/sub"));
    }

    #[test]
    fn what_a_process_cannot_honour_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                format!("{SHELL}[limits]\nfuel = 1000\n"),
                6,
                "fuel cannot be honoured for a host tool",
            ),
            (
                format!("{SHELL}[limits]\nresponse = \"1MiB\"\n"),
                6,
                "[limits] response cannot be honoured for a host tool",
            ),
            (format!("{SHELL}[grants]\ndns = true\n"), 6, "dns = true"),
        ];
        for (text, line, words) in cases {
            let e = parse_in(dir.path(), &text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(words), "{words}: {e}");
        }
    }

    #[test]
    fn mistakes_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (format!("{SHELL}user = \"0:0\"\n"), 5, "root"),
            (format!("{SHELL}processes = 0\n"), 5, "processes"),
            (format!("{SHELL}cpu_time = \"10ms\"\n"), 5, "cpu_time"),
            (
                format!("{SHELL}tmp = \"10KiB\"\n"),
                5,
                "tmp must be at least 1MiB",
            ),
            (format!("{SHELL}isolation = \"none\"\n"), 5, "best-effort"),
            (
                format!("{SHELL}workdir = \"/\"\n"),
                5,
                "outside every granted root",
            ),
            (
                format!("{SHELL}image = \"x\"\n"),
                5,
                "unknown field `image`",
            ),
            (
                format!("{SHELL}network = \"unrestricted\"\n[grants]\nnet = [\"example.org\"]\n"),
                5,
                "would hold nothing back",
            ),
        ];
        for (text, line, words) in cases {
            let e = parse_in(dir.path(), &text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(words), "{words}: {e}");
        }
    }
}
