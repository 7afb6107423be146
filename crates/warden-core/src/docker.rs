//! The `[executor]` of `kind = "docker"`: the image, the command line, and the container knobs
//! that are the executor's own (timeout, memory and output stay in `[limits]`).

use crate::policy::{Located, PolicyError};
use crate::units::ByteSize;
use serde::Deserialize;
use std::path::Path;
use toml::Spanned;

/// Processes (threads included) in one container when the policy writes none.
pub const DEFAULT_PIDS: u32 = 128;
/// CPUs of one container, in billionths, when the policy writes none: one CPU.
pub const DEFAULT_NANO_CPUS: u64 = 1_000_000_000;
/// Size of the writable tmpfs at `/tmp` when the policy writes none.
pub const DEFAULT_TMP: u64 = 64 << 20;

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
}

/// A tool run in a Docker container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// The tool's name (a container runs one tool).
    pub name: String,
    pub description: Option<String>,
    /// The image to run, as the engine names it (`warden-sandbox:latest`).
    pub image: Located<String>,
    /// The command line; `{name}` is replaced by the string argument `name`, `{{`/`}}` are
    /// literal braces.
    pub argv: Located<Vec<String>>,
    /// Absolute working directory inside the container.
    pub workdir: Option<Located<String>>,
    /// One container and one long-lived shell per session instead of one container per call.
    pub session: bool,
    /// `uid` or `uid:gid`, never root; `None` picks the owner of the read-write roots, else
    /// nobody (65534).
    pub user: Option<Located<String>>,
    pub network: Located<NetworkMode>,
    /// Most processes in the container.
    pub pids: u32,
    /// CPUs in billionths (`cpus = 0.5` is 500_000_000).
    pub nano_cpus: u64,
    /// Bytes of the tmpfs at `/tmp`.
    pub tmp: u64,
}

/// A number that may be written as an integer or a float.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
}

/// The docker fields of an `[executor]` table as written.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DockerSpec {
    pub image: Option<Spanned<String>>,
    pub argv: Option<Spanned<Vec<String>>>,
    pub workdir: Option<Spanned<String>>,
    pub session: Option<bool>,
    pub user: Option<Spanned<String>>,
    pub network: Option<Spanned<String>>,
    pub pids: Option<Spanned<i64>>,
    pub cpus: Option<Spanned<Number>>,
    pub tmp: Option<Spanned<ByteSize>>,
}

impl DockerSpec {
    /// Checks the fields; `kind_line` is the line of `kind = "docker"`.
    pub(crate) fn resolve(
        self,
        path: &Path,
        kind_line: usize,
        name: Option<String>,
        description: Option<String>,
        line_of: &dyn Fn(usize) -> usize,
    ) -> Result<DockerConfig, PolicyError> {
        let err = |line: usize, m: String| PolicyError::new(path, Some(line), m);
        let at = |s: &std::ops::Range<usize>| line_of(s.start);
        let name = tool_name("docker", name, kind_line, &err)?;
        let image = self.image.ok_or_else(|| {
            err(
                kind_line,
                "a docker executor needs `image = \"...\"` (warden's own: `warden sandbox-image` \
                 builds warden-sandbox:latest)"
                    .into(),
            )
        })?;
        if image.get_ref().trim().is_empty() {
            return Err(err(at(&image.span()), "`image` is empty".into()));
        }
        let argv = command_line("docker", self.argv, kind_line, &err, &at)?;
        let workdir = match self.workdir {
            Some(w) if !w.get_ref().starts_with('/') => {
                return Err(err(
                    at(&w.span()),
                    format!("workdir `{}` must be an absolute path", w.get_ref()),
                ));
            }
            Some(w) => Some(Located {
                line: at(&w.span()),
                value: w.into_inner(),
            }),
            None => None,
        };
        let user = match self.user {
            Some(u) => {
                check_user(u.get_ref()).map_err(|m| err(at(&u.span()), m))?;
                Some(Located {
                    line: at(&u.span()),
                    value: u.into_inner(),
                })
            }
            None => None,
        };
        let network = network_mode(self.network, kind_line, &err, &at)?;
        let pids = match self.pids {
            None => DEFAULT_PIDS,
            Some(p) => u32::try_from(*p.get_ref())
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| err(at(&p.span()), "pids must be at least 1".into()))?,
        };
        let nano_cpus = match self.cpus {
            None => DEFAULT_NANO_CPUS,
            Some(c) => {
                let v = match c.get_ref() {
                    Number::Int(i) => *i as f64,
                    Number::Float(f) => *f,
                };
                if !(v.is_finite() && v >= 0.01) {
                    return Err(err(at(&c.span()), "cpus must be at least 0.01".into()));
                }
                (v * 1e9) as u64
            }
        };
        let tmp = tmp_size(self.tmp, &err, &at)?;
        Ok(DockerConfig {
            name,
            description,
            image: Located {
                line: at(&image.span()),
                value: image.into_inner(),
            },
            argv,
            workdir,
            session: self.session.unwrap_or(false),
            user,
            network,
            pids,
            nano_cpus,
            tmp,
        })
    }
}

/// The `name` a command executor (docker, host) needs: its one tool's name.
pub(crate) fn tool_name(
    kind: &str,
    name: Option<String>,
    kind_line: usize,
    err: &dyn Fn(usize, String) -> PolicyError,
) -> Result<String, PolicyError> {
    name.ok_or_else(|| {
        err(
            kind_line,
            format!("a {kind} executor needs `name = \"...\"`, the tool's name"),
        )
    })
}

/// The `argv` a command executor needs, with a program.
pub(crate) fn command_line(
    kind: &str,
    argv: Option<Spanned<Vec<String>>>,
    kind_line: usize,
    err: &dyn Fn(usize, String) -> PolicyError,
    at: &dyn Fn(&std::ops::Range<usize>) -> usize,
) -> Result<Located<Vec<String>>, PolicyError> {
    let argv = argv.ok_or_else(|| {
        err(
            kind_line,
            format!(
                "a {kind} executor needs `argv`, the command line (for a shell tool: \
                 argv = [\"/bin/sh\", \"-c\", \"{{command}}\"])"
            ),
        )
    })?;
    let line = at(&argv.span());
    let value = argv.into_inner();
    if value.first().is_none_or(String::is_empty) {
        return Err(err(line, "`argv` needs a program".into()));
    }
    Ok(Located { value, line })
}

/// The size of the private tmpfs at `/tmp` (docker and host).
pub(crate) fn tmp_size(
    tmp: Option<Spanned<ByteSize>>,
    err: &dyn Fn(usize, String) -> PolicyError,
    at: &dyn Fn(&std::ops::Range<usize>) -> usize,
) -> Result<u64, PolicyError> {
    match tmp {
        None => Ok(DEFAULT_TMP),
        Some(t) if t.get_ref().0 < (1 << 20) => {
            Err(err(at(&t.span()), "tmp must be at least 1MiB".into()))
        }
        Some(t) => Ok(t.get_ref().0),
    }
}

/// `network = "none" | "unrestricted"`, `None` when the policy writes none.
pub(crate) fn network_mode(
    written: Option<Spanned<String>>,
    kind_line: usize,
    err: &dyn Fn(usize, String) -> PolicyError,
    at: &dyn Fn(&std::ops::Range<usize>) -> usize,
) -> Result<Located<NetworkMode>, PolicyError> {
    let Some(n) = written else {
        return Ok(Located {
            value: NetworkMode::None,
            line: kind_line,
        });
    };
    let line = at(&n.span());
    let value = match n.get_ref().as_str() {
        "none" => NetworkMode::None,
        "unrestricted" => NetworkMode::Unrestricted,
        other => {
            return Err(err(
                line,
                format!(
                    "network `{other}` is not known: \"none\" (the default) or \"unrestricted\" \
                     (any host: warden cannot enforce an allowlist for a process)"
                ),
            ));
        }
    };
    Ok(Located { value, line })
}

/// `uid` or `uid:gid`, numeric (names are not warden's to trust), never root.
pub(crate) fn check_user(user: &str) -> Result<(), String> {
    let mut parts = user.splitn(2, ':');
    let uid = parts.next().unwrap_or_default();
    let ids_ok = std::iter::once(uid)
        .chain(parts)
        .all(|p| !p.is_empty() && p.parse::<u32>().is_ok());
    if !ids_ok {
        return Err(format!(
            "user `{user}` must be numeric: \"uid\" or \"uid:gid\", such as \"65534:65534\""
        ));
    }
    if uid.parse::<u32>() == Ok(0) {
        return Err("user 0 is root: a command tool never runs as root".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::policy::{ExecutorConfig, Policy, PolicyError};

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        Policy::parse(&dir.path().join("shell.toml"), text)
    }

    const SHELL: &str = "[executor]\nkind = \"docker\"\nname = \"shell\"\n\
        image = \"warden-sandbox:latest\"\nargv = [\"/bin/sh\", \"-c\", \"{command}\"]\n";

    #[test]
    fn a_minimal_docker_policy_is_hardened_by_default() {
        let p = parse(SHELL).unwrap();
        let ExecutorConfig::Docker(cfg) = &p.executor else {
            panic!("not docker");
        };
        assert_eq!(cfg.name, "shell");
        assert_eq!(cfg.network.value, super::NetworkMode::None);
        assert_eq!(cfg.pids, super::DEFAULT_PIDS);
        assert_eq!(cfg.nano_cpus, super::DEFAULT_NANO_CPUS);
        assert!(cfg.user.is_none() && !cfg.session);
        assert_eq!(p.executor.kind(), "docker");
    }

    #[test]
    fn knobs_are_read() {
        let p = parse(&format!(
            "{SHELL}session = true\nworkdir = \"/w\"\nuser = \"1000:1000\"\n\
             network = \"unrestricted\"\npids = 16\ncpus = 0.5\ntmp = \"8MiB\"\n"
        ))
        .unwrap();
        let ExecutorConfig::Docker(cfg) = &p.executor else {
            panic!("not docker");
        };
        assert!(cfg.session);
        assert_eq!(cfg.network.value, super::NetworkMode::Unrestricted);
        assert_eq!(cfg.network.line, 9);
        assert_eq!(
            (cfg.pids, cfg.nano_cpus, cfg.tmp),
            (16, 500_000_000, 8 << 20)
        );
    }

    #[test]
    fn net_grants_need_the_unrestricted_opt_in() {
        let e = parse(&format!("{SHELL}[grants]\nnet = [\"api.example.org\"]\n")).unwrap_err();
        assert!(e.message.contains("cannot enforce a host allowlist"), "{e}");
        let p = parse(&format!(
            "{SHELL}network = \"unrestricted\"\n[grants]\nnet = [\"api.example.org\"]\n"
        ));
        assert!(p.is_ok(), "{p:?}");
        let e = parse(&format!(
            "{SHELL}network = \"unrestricted\"\n[grants]\nnet = [\"a.org\"]\n\
             net_credentials = [{{ host = \"a.org\", header = \"X-Key\", from_host = \"K\" }}]\n"
        ))
        .unwrap_err();
        assert!(e.message.contains("net_credentials"), "{e}");
    }

    #[test]
    fn mistakes_name_their_line() {
        let cases = [
            (format!("{SHELL}user = \"0\"\n"), 6, "root"),
            (format!("{SHELL}user = \"root\"\n"), 6, "numeric"),
            (format!("{SHELL}network = \"host\"\n"), 6, "not known"),
            (format!("{SHELL}workdir = \"w\"\n"), 6, "absolute"),
            (format!("{SHELL}pids = 0\n"), 6, "pids"),
            (format!("{SHELL}cpus = 0\n"), 6, "cpus"),
            (
                format!("{SHELL}component = \"x.wasm\"\n"),
                6,
                "belongs to wasm",
            ),
            (format!("{SHELL}privileged = true\n"), 6, "unknown field"),
            (
                "[executor]\nkind = \"docker\"\nname = \"x\"\n".into(),
                2,
                "image",
            ),
            (
                "[executor]\nkind = \"wasm\"\ncomponent = \"t.wasm\"\nimage = \"x\"\n".into(),
                4,
                "belongs to docker",
            ),
        ];
        for (text, line, words) in cases {
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, Some(line), "{e}");
            assert!(e.message.contains(words), "{words}: {e}");
        }
    }
}
