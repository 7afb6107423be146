//! The `[executor]` of `kind = "host"`: a command run as a confined host process. The command
//! line and the knobs that are the executor's own (timeout, memory and output stay in
//! `[limits]`).

use crate::docker::{NetworkMode, check_user, command_line, network_mode, tmp_size, tool_name};
use crate::grants::Grants;
use crate::policy::{Located, PolicyError};
use crate::units::{ByteSize, HumanDuration};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// The unprivileged user a host command runs as when the policy names none: nobody.
pub const NOBODY: u32 = 65534;
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
    /// The working directory, canonical and inside a granted root; `None`: the first granted
    /// root, else `/` (where the command can read nothing).
    pub workdir: Option<Located<PathBuf>>,
    pub uid: u32,
    pub gid: u32,
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
}

/// The host fields of an `[executor]` table as written (`argv`, `workdir`, `user`,
/// `network` and `tmp` are shared with docker).
#[derive(Debug, Default)]
pub(crate) struct HostSpec {
    pub argv: Option<Spanned<Vec<String>>>,
    pub workdir: Option<Spanned<String>>,
    pub user: Option<Spanned<String>>,
    pub network: Option<Spanned<String>>,
    pub tmp: Option<Spanned<ByteSize>>,
    pub processes: Option<Spanned<i64>>,
    pub cpu_time: Option<Spanned<HumanDuration>>,
    pub open_files: Option<Spanned<i64>>,
    pub file_size: Option<Spanned<ByteSize>>,
    pub isolation: Option<Spanned<String>>,
}

impl HostSpec {
    /// Checks the fields; `kind_line` is the line of `kind = "host"`.
    pub(crate) fn resolve(
        self,
        path: &Path,
        kind_line: usize,
        name: Option<String>,
        description: Option<String>,
        line_of: &dyn Fn(usize) -> usize,
    ) -> Result<HostConfig, PolicyError> {
        let err = |line: usize, m: String| PolicyError::new(path, Some(line), m);
        let at = |s: &std::ops::Range<usize>| line_of(s.start);
        let name = tool_name("host", name, kind_line, &err)?;
        let argv = command_line("host", self.argv, kind_line, &err, &at)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let workdir = match self.workdir {
            Some(w) => {
                let line = at(&w.span());
                let value = base.join(w.get_ref()).canonicalize().map_err(|e| {
                    err(
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
        let (uid, gid) = match self.user {
            None => (NOBODY, NOBODY),
            Some(u) => {
                check_user(u.get_ref()).map_err(|m| err(at(&u.span()), m))?;
                let mut ids = u
                    .get_ref()
                    .split(':')
                    .map(|p| p.parse::<u32>().unwrap_or(NOBODY));
                let uid = ids.next().unwrap_or(NOBODY);
                (uid, ids.next().unwrap_or(uid))
            }
        };
        let network = network_mode(self.network, kind_line, &err, &at)?;
        let tmp = tmp_size(self.tmp, &err, &at)?;
        let count = |v: Option<Spanned<i64>>, default: u32, what: &str| match v {
            None => Ok(default),
            Some(n) => u32::try_from(*n.get_ref())
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| err(at(&n.span()), format!("{what} must be at least 1"))),
        };
        let processes = count(self.processes, DEFAULT_PROCESSES, "processes")?;
        let open_files = count(self.open_files, DEFAULT_OPEN_FILES, "open_files")?;
        let cpu_time = match self.cpu_time {
            Some(c) if c.get_ref().0 < Duration::from_secs(1) => {
                return Err(err(
                    at(&c.span()),
                    "cpu_time must be at least 1s (the kernel counts whole seconds)".into(),
                ));
            }
            Some(c) => Some(c.get_ref().0),
            None => None,
        };
        let file_size = match self.file_size {
            None => DEFAULT_FILE_SIZE,
            Some(f) => f.get_ref().0,
        };
        let isolation = match self.isolation {
            None => Located {
                value: Isolation::Required,
                line: kind_line,
            },
            Some(i) => {
                let line = at(&i.span());
                let value = match i.get_ref().as_str() {
                    "required" => Isolation::Required,
                    "best-effort" => Isolation::BestEffort,
                    other => {
                        return Err(err(
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
        Ok(HostConfig {
            name,
            description,
            argv,
            workdir,
            uid,
            gid,
            network,
            tmp,
            processes,
            cpu_time,
            open_files,
            file_size,
            isolation,
        })
    }
}

impl HostConfig {
    /// The folder the command starts in.
    pub fn start_dir<'a>(&'a self, grants: &'a Grants) -> &'a Path {
        match &self.workdir {
            Some(w) => &w.value,
            None => grants.fs.first().map_or(Path::new("/"), |g| &g.host),
        }
    }

    /// A workdir outside every granted root would be a folder the command cannot use.
    pub(crate) fn check(&self, path: &Path, grants: &Grants) -> Result<(), PolicyError> {
        if let Some(w) = &self.workdir
            && !grants.fs.iter().any(|g| w.value.starts_with(&g.host))
        {
            return Err(PolicyError::new(
                path,
                Some(w.line),
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
    use crate::policy::{ExecutorConfig, Policy, PolicyError};

    fn parse_in(dir: &std::path::Path, text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(&dir.join("shell.toml"), text)
    }

    const SHELL: &str = "[executor]\nkind = \"host\"\nname = \"shell\"\n\
        argv = [\"/bin/sh\", \"-c\", \"{command}\"]\n";

    #[test]
    fn a_minimal_host_policy_is_confined_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let p = parse_in(dir.path(), SHELL).unwrap();
        let ExecutorConfig::Host(cfg) = &p.executor else {
            panic!("not host");
        };
        assert_eq!((cfg.uid, cfg.gid), (super::NOBODY, super::NOBODY));
        assert_eq!(cfg.network.value, super::NetworkMode::None);
        assert_eq!(cfg.isolation.value, super::Isolation::Required);
        assert_eq!(cfg.processes, super::DEFAULT_PROCESSES);
        assert_eq!(cfg.start_dir(&p.grants), std::path::Path::new("/"));
        assert_eq!(p.executor.kind(), "host");
    }

    #[test]
    fn roots_are_host_paths_and_the_first_is_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("w")).unwrap();
        let p = parse_in(
            dir.path(),
            &format!("{SHELL}[grants]\nfs = [{{ host = \"w\", access = \"read-only\" }}]\n"),
        )
        .unwrap();
        let ExecutorConfig::Host(cfg) = &p.executor else {
            panic!("not host");
        };
        let w = dir.path().join("w").canonicalize().unwrap();
        assert_eq!(p.grants.fs[0].guest, w.to_string_lossy());
        assert_eq!(cfg.start_dir(&p.grants), w);
        let e = parse_in(
            dir.path(),
            &format!(
                "{SHELL}[grants]\nfs = [{{ host = \"w\", guest = \"/w\", access = \"read-only\" }}]\n"
            ),
        )
        .unwrap_err();
        assert!(e.message.contains("host paths"), "{e}");
    }

    #[test]
    fn fuel_is_refused_for_command_tools() {
        let dir = tempfile::tempdir().unwrap();
        let e = parse_in(dir.path(), &format!("{SHELL}[limits]\nfuel = 1000\n")).unwrap_err();
        assert!(e.message.contains("host tool cannot have it"), "{e}");
        assert!(e.message.contains("cpu_time"), "{e}");
        let docker = "[executor]\nkind = \"docker\"\nname = \"s\"\nimage = \"i\"\nargv = [\"x\"]\n\
                      [functions.s]\nlimits = { fuel = 5 }\n";
        let e = parse_in(dir.path(), docker).unwrap_err();
        assert!(e.message.contains("docker tool cannot have it"), "{e}");
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
            (format!("{SHELL}image = \"x\"\n"), 5, "belongs to docker"),
            (
                format!("{SHELL}component = \"x.wasm\"\n"),
                5,
                "belongs to wasm",
            ),
            (
                "[executor]\nkind = \"docker\"\nname = \"s\"\nimage = \"i\"\nargv = [\"x\"]\n\
                 isolation = \"best-effort\"\n"
                    .into(),
                6,
                "belongs to host",
            ),
            (
                format!("{SHELL}[grants]\nnet = [\"example.org\"]\n"),
                2,
                "unrestricted",
            ),
        ];
        for (text, line, words) in cases {
            let e = parse_in(dir.path(), &text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(words), "{words}: {e}");
        }
    }
}
