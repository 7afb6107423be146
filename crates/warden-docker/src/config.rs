//! The `[executor]` of `kind = "docker"`: the image, the command line, and the container knobs
//! that are the executor's own (timeout, memory and output stay in `[limits]`). Every default
//! is here.

use crate::address::EngineAddress;
use crate::files::{DEFAULT_COPY_LIMIT, Files};
use serde::Deserialize;
use toml::Spanned;
use warden_command::{NetworkMode, User, command_line, count, tmp_size, tool_name, transfer_size};
use warden_core::{ByteSize, ExecutorTable, Located, Policy, PolicyError};

/// Processes (threads included) in one container when the policy writes none.
pub const DEFAULT_PIDS: u32 = 128;
/// CPUs of one container, in billionths, when the policy writes none: one CPU.
pub const DEFAULT_NANO_CPUS: u64 = 1_000_000_000;
/// The most containers a tool's warm pool may keep (`pool = N`); none are kept when the
/// policy writes none.
pub const MAX_POOL: u32 = 64;

/// A tool run in a Docker container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// The tool's name (a container runs one tool).
    pub name: String,
    pub description: Option<String>,
    /// The image to run, as the engine names it (`warden-sandbox:latest`).
    pub image: Located<String>,
    /// Other images a session's client may choose for its containers instead
    /// (`_meta["warden/image"]`); none when the policy writes none.
    pub images: Vec<String>,
    /// The command line; `{name}` is replaced by the string argument `name`, `{{`/`}}` are
    /// literal braces.
    pub argv: Located<Vec<String>>,
    /// Absolute working directory inside the container.
    pub workdir: Option<Located<String>>,
    /// One container and one long-lived shell per session instead of one container per call.
    pub session: bool,
    /// The most bytes a client may read from or write to a session's sandbox in one
    /// request; `None`: none (see `warden_command::transfer_size`).
    pub transfer: Option<u64>,
    /// Containers kept created, started and waiting, each for one call (or one session's
    /// first command); `None`: each is started on its call's path.
    pub pool: Option<Located<u32>>,
    /// The engine's OCI runtime to run the containers (`runsc` for gVisor), by the name the
    /// engine's `runtimes` give it; `None`: the engine's default (runc).
    pub runtime: Option<Located<String>>,
    /// `None` picks the owner of the read-write roots, else nobody.
    pub user: Option<Located<User>>,
    pub network: Located<NetworkMode>,
    /// Most processes in the container.
    pub pids: u32,
    /// CPUs in billionths (`cpus = 0.5` is 500_000_000).
    pub nano_cpus: u64,
    /// Bytes of the tmpfs at `/tmp`.
    pub tmp: u64,
    /// How the tool's roots reach its containers (`files = "copy"` or `"mount"`); `None`: as
    /// the engine has them (copied on an engine elsewhere, or with `WARDEN_DOCKER_FILES=copy`).
    pub files: Option<Located<Files>>,
    /// Bytes of files the tool's roots may hold when they are copied in.
    pub copy_limit: u64,
    /// Read-write roots on an engine that gets roots copied in: written back at each
    /// container's end (without it they are refused).
    pub copy_back: Option<Located<bool>>,
    /// The engine the policy names (`engine`, `engine_certs`); `None`: the process's own
    /// (`DOCKER_HOST`).
    pub engine: Option<Located<EngineAddress>>,
}

/// A number that may be written as an integer or a float.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Float(f64),
}

/// The `[executor]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DockerSpec {
    name: Option<String>,
    description: Option<String>,
    image: Option<Spanned<String>>,
    images: Option<Spanned<Vec<String>>>,
    argv: Option<Spanned<Vec<String>>>,
    workdir: Option<Spanned<String>>,
    session: Option<bool>,
    transfer: Option<Spanned<ByteSize>>,
    pool: Option<Spanned<i64>>,
    runtime: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    network: Option<Spanned<String>>,
    pids: Option<Spanned<i64>>,
    cpus: Option<Spanned<Number>>,
    tmp: Option<Spanned<ByteSize>>,
    files: Option<Spanned<String>>,
    copy_limit: Option<Spanned<ByteSize>>,
    copy_back: Option<Spanned<bool>>,
    engine: Option<Spanned<String>>,
    engine_certs: Option<Spanned<String>>,
}

impl DockerConfig {
    /// Parses and checks the policy's `[executor]` table.
    pub fn from_policy(policy: &Policy) -> Result<DockerConfig, PolicyError> {
        let table = &policy.executor;
        let spec: DockerSpec = table.parse()?;
        let name = tool_name(table, "docker", spec.name)?;
        let image = image(table, spec.image)?;
        let images = images(table, spec.images, &image.value)?;
        let argv = command_line(table, "docker", spec.argv)?;
        let workdir = workdir(table, spec.workdir)?;
        let user = User::written(table, spec.user)?;
        let network = NetworkMode::written(table, "docker", spec.network, &policy.grants)?;
        let pids = count(table, "pids", spec.pids, DEFAULT_PIDS)?;
        let nano_cpus = nano_cpus(table, spec.cpus)?;
        let tmp = tmp_size(table, spec.tmp)?;
        let pool = pool(table, spec.pool)?;
        let runtime = runtime(table, spec.runtime)?;
        let files = files(table, spec.files)?;
        let copy_limit = copy_limit(table, spec.copy_limit)?;
        let copy_back = spec.copy_back.map(|c| table.located(c));
        let engine = engine(policy, spec.engine, spec.engine_certs)?;
        let session = spec.session.unwrap_or(false);
        let transfer = transfer_size(table, spec.transfer)?;
        Ok(DockerConfig {
            name,
            description: spec.description,
            image,
            images,
            argv,
            workdir,
            session,
            transfer,
            pool,
            runtime,
            user,
            network,
            pids,
            nano_cpus,
            tmp,
            files,
            copy_limit,
            copy_back,
            engine,
        })
    }
}

/// `images`: other images a client may choose, each named once, none empty nor `image`.
fn images(
    table: &ExecutorTable,
    written: Option<Spanned<Vec<String>>>,
    image: &str,
) -> Result<Vec<String>, PolicyError> {
    let Some(written) = written else {
        return Ok(Vec::new());
    };
    let images = table.located(written);
    let mut seen = std::collections::HashSet::from([image]);
    for other in &images.value {
        if other.trim().is_empty() {
            return Err(table.error(images.line, "`images` holds an empty name"));
        }
        if !seen.insert(other) {
            return Err(table.error(
                images.line,
                format!("`images` names {other:?} twice (with `image`): name each image once"),
            ));
        }
    }
    Ok(images.value)
}

/// `image`, which every docker tool names.
fn image(
    table: &ExecutorTable,
    written: Option<Spanned<String>>,
) -> Result<Located<String>, PolicyError> {
    let image = written.ok_or_else(|| {
        table.error(
            table.kind_line(),
            "a docker executor needs `image = \"...\"` (warden's own: `warden sandbox-image` \
             builds warden-sandbox:latest, `warden sandbox-image --debian` \
             warden-sandbox-debian:latest)",
        )
    })?;
    let image = table.located(image);
    if image.value.trim().is_empty() {
        return Err(table.error(image.line, "`image` is empty"));
    }
    Ok(image)
}

/// `workdir`, an absolute path if written.
fn workdir(
    table: &ExecutorTable,
    written: Option<Spanned<String>>,
) -> Result<Option<Located<String>>, PolicyError> {
    let workdir = written.map(|w| table.located(w));
    if let Some(w) = &workdir
        && !w.value.starts_with('/')
    {
        return Err(table.error(
            w.line,
            format!("workdir `{}` must be an absolute path", w.value),
        ));
    }
    Ok(workdir)
}

/// `cpus`, at least 0.01, in billionths.
fn nano_cpus(table: &ExecutorTable, written: Option<Spanned<Number>>) -> Result<u64, PolicyError> {
    let Some(c) = written else {
        return Ok(DEFAULT_NANO_CPUS);
    };
    let v = match c.get_ref() {
        Number::Int(i) => *i as f64,
        Number::Float(f) => *f,
    };
    if !(v.is_finite() && v >= 0.01) {
        return Err(table.error(table.line(&c.span()), "cpus must be at least 0.01"));
    }
    Ok((v * 1e9) as u64)
}

/// `pool`, from 1 to [`MAX_POOL`] if written.
fn pool(
    table: &ExecutorTable,
    written: Option<Spanned<i64>>,
) -> Result<Option<Located<u32>>, PolicyError> {
    let Some(p) = written else {
        return Ok(None);
    };
    let line = table.line(&p.span());
    match u32::try_from(*p.get_ref()) {
        Ok(n) if (1..=MAX_POOL).contains(&n) => Ok(Some(Located { value: n, line })),
        _ => Err(table.error(
            line,
            format!(
                "pool must be from 1 to {MAX_POOL} (containers kept started, each for one \
                 call); drop it to start each container on its call's path"
            ),
        )),
    }
}

/// `runtime`, a name of visible ASCII if written (the engine is asked for it at load).
fn runtime(
    table: &ExecutorTable,
    written: Option<Spanned<String>>,
) -> Result<Option<Located<String>>, PolicyError> {
    let runtime = written.map(|r| table.located(r));
    if let Some(r) = &runtime
        && (r.value.is_empty() || !r.value.chars().all(|c| c.is_ascii_graphic()))
    {
        return Err(table.error(
            r.line,
            "runtime must name one of the engine's runtimes (`docker info` lists them: \
             runc, runsc, …)",
        ));
    }
    Ok(runtime)
}

/// `files`, `"copy"` or `"mount"` if written.
fn files(
    table: &ExecutorTable,
    written: Option<Spanned<String>>,
) -> Result<Option<Located<Files>>, PolicyError> {
    let Some(written) = written.map(|f| table.located(f)) else {
        return Ok(None);
    };
    let value = match written.value.as_str() {
        "copy" => Files::Copied,
        "mount" => Files::Mounted,
        _ => {
            return Err(table.error(
                written.line,
                "files must be \"copy\" (the roots copied into each container, and read-write \
                 ones read back with `copy_back = true`) or \"mount\" (bound from this machine)",
            ));
        }
    };
    Ok(Some(Located {
        value,
        line: written.line,
    }))
}

/// `copy_limit`, more than 0 bytes.
fn copy_limit(
    table: &ExecutorTable,
    written: Option<Spanned<ByteSize>>,
) -> Result<u64, PolicyError> {
    match written {
        None => Ok(DEFAULT_COPY_LIMIT),
        Some(c) if c.get_ref().0 == 0 => Err(table.error(
            table.line(&c.span()),
            "copy_limit must be more than 0 (it bounds the roots copied into a container, \
             e.g. `copy_limit = \"256MiB\"`)",
        )),
        Some(c) => Ok(c.get_ref().0),
    }
}

/// `engine = "tcp://host:port"` (or `unix:///path`) and `engine_certs = "folder"` (relative
/// to the policy file, holding ca.pem, cert.pem and key.pem): checked here, never dialled.
fn engine(
    policy: &Policy,
    written: Option<Spanned<String>>,
    certs: Option<Spanned<String>>,
) -> Result<Option<Located<EngineAddress>>, PolicyError> {
    let table = &policy.executor;
    let Some(written) = written else {
        return match certs {
            Some(c) => Err(table.error(
                table.line(&c.span()),
                "`engine_certs` without `engine`: name the engine (engine = \"tcp://host:2376\"), \
                 or drop it to use DOCKER_HOST's",
            )),
            None => Ok(None),
        };
    };
    let line = table.line(&written.span());
    let certs = certs.map(|c| {
        let at = table.line(&c.span());
        let dir = policy
            .path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join(c.into_inner());
        (at, dir)
    });
    let address = EngineAddress::parse(written.get_ref(), certs.as_ref().map(|(_, d)| d.clone()))
        .map_err(|e| table.error(line, format!("engine: {e}")))?;
    if let (Some(missing), Some((at, _))) = (address.missing_cert(), &certs) {
        return Err(table.error(
            *at,
            format!(
                "engine_certs: {} is missing; the folder holds ca.pem (the CA that signed the \
                 engine's certificate), cert.pem and key.pem (warden's client certificate and key)",
                missing.display()
            ),
        ));
    }
    Ok(Some(Located {
        value: address,
        line,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DockerBackend;
    use warden_core::Backend;

    fn parse(text: &str) -> Result<DockerConfig, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        let backend = DockerBackend::new(crate::Engine::from_env());
        let policy = Policy::parse(
            &dir.path().join("shell.toml"),
            text,
            &[&backend as &dyn Backend],
        )?;
        DockerConfig::from_policy(&policy)
    }

    const SHELL: &str = "[executor]\nkind = \"docker\"\nname = \"shell\"\n\
        image = \"warden-sandbox:latest\"\nargv = [\"/bin/sh\", \"-c\", \"{command}\"]\n";

    #[test]
    fn a_minimal_docker_policy_is_hardened_by_default() {
        let cfg = parse(SHELL).unwrap();
        assert_eq!(cfg.name, "shell");
        assert_eq!(cfg.network.value, NetworkMode::None);
        assert_eq!(cfg.pids, DEFAULT_PIDS);
        assert_eq!(cfg.nano_cpus, DEFAULT_NANO_CPUS);
        assert!(cfg.user.is_none() && !cfg.session);
        assert!(cfg.pool.is_none() && cfg.runtime.is_none());
    }

    #[test]
    fn knobs_are_read() {
        let cfg = parse(&format!(
            "{SHELL}session = true\nworkdir = \"/w\"\nuser = \"1000:1000\"\n\
             network = \"unrestricted\"\npids = 16\ncpus = 0.5\ntmp = \"8MiB\"\n"
        ))
        .unwrap();
        assert!(cfg.session);
        assert_eq!(cfg.network.value, NetworkMode::Unrestricted);
        assert_eq!(cfg.network.line, 9);
        assert_eq!(
            cfg.user.map(|u| u.value),
            Some(User {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(
            (cfg.pids, cfg.nano_cpus, cfg.tmp),
            (16, 500_000_000, 8 << 20)
        );
        let cfg = parse(&format!(
            "{SHELL}copy_limit = \"256MiB\"\ncopy_back = true\n"
        ))
        .unwrap();
        assert_eq!(cfg.copy_limit, 256 << 20);
        let pooled = parse(&format!("{SHELL}pool = 8\nruntime = \"runsc\"\n")).unwrap();
        assert_eq!(pooled.pool.map(|p| (p.value, p.line)), Some((8, 6)));
        assert_eq!(pooled.runtime.map(|r| r.value), Some("runsc".to_owned()));
        assert_eq!(cfg.copy_back.map(|c| (c.value, c.line)), Some((true, 7)));
        assert_eq!(parse(SHELL).unwrap().copy_limit, DEFAULT_COPY_LIMIT);
        let files = |extra: &str| parse(&format!("{SHELL}{extra}")).unwrap().files;
        assert_eq!(
            files("files = \"copy\"\n").map(|f| (f.value, f.line)),
            Some((Files::Copied, 6))
        );
        assert_eq!(
            files("files = \"mount\"\n").map(|f| f.value),
            Some(Files::Mounted)
        );
        assert!(files("").is_none(), "the engine's way");
    }

    #[test]
    fn a_transfer_is_more_than_nothing() {
        let cfg = parse(&format!("{SHELL}session = true\ntransfer = \"8MiB\"\n")).unwrap();
        assert_eq!(cfg.transfer, Some(8 << 20));
        assert_eq!(parse(SHELL).unwrap().transfer, None);
        let e = parse(&format!("{SHELL}transfer = \"0B\"\n")).unwrap_err();
        assert!(
            e.message.contains("transfer must be more than 0 bytes"),
            "{e}"
        );
    }

    #[test]
    fn other_images_are_listed_once_each_and_never_empty() {
        let cfg = parse(&format!(
            "{SHELL}images = [\"debian:12\", \"python:3.12\"]\n"
        ))
        .unwrap();
        assert_eq!(cfg.images, ["debian:12", "python:3.12"]);
        assert!(parse(SHELL).unwrap().images.is_empty());
        for (images, why) in [
            ("[\"\"]", "`images` holds an empty name"),
            ("[\"a\", \"a\"]", "`images` names \"a\" twice"),
        ] {
            let e = parse(&format!("{SHELL}images = {images}\n")).unwrap_err();
            assert!(e.message.contains(why), "{e}");
        }
        let image = SHELL
            .lines()
            .find_map(|l| l.strip_prefix("image = "))
            .unwrap();
        let e = parse(&format!("{SHELL}images = [{image}]\n")).unwrap_err();
        assert!(e.message.contains("twice (with `image`)"), "{e}");
    }

    #[test]
    fn net_grants_go_through_the_gate_and_contradict_the_opt_in_to_every_host() {
        let p = parse(&format!("{SHELL}[grants]\nnet = [\"api.example.org\"]\n"));
        assert!(p.is_ok(), "{p:?}");
        let e = parse(&format!(
            "{SHELL}network = \"unrestricted\"\n[grants]\nnet = [\"api.example.org\"]\n"
        ))
        .unwrap_err();
        assert!(e.message.contains("would hold nothing back"), "{e}");
    }

    #[test]
    fn what_a_container_cannot_honour_is_refused_with_its_line() {
        let cases = [
            (
                format!("{SHELL}[grants]\ndns = true\n"),
                7,
                "dns = true cannot be honoured",
            ),
            (
                format!("{SHELL}[limits]\nresponse = \"1MiB\"\n"),
                7,
                "[limits] response cannot be honoured for a docker tool",
            ),
            (
                format!("{SHELL}[limits]\nfuel = 1000\n"),
                7,
                "fuel cannot be honoured for a docker tool",
            ),
            (
                format!("{SHELL}[functions.shell]\nlimits = {{ fuel = 5 }}\n"),
                7,
                "[functions.shell] fuel",
            ),
        ];
        for (text, line, words) in cases {
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(words), "{words}: {e}");
        }
    }

    #[test]
    fn an_engine_is_read_with_its_certificates_beside_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).unwrap();
        let at = |extra: &str| {
            let backend = DockerBackend::new(crate::Engine::from_env());
            let policy = Policy::parse(
                &dir.path().join("shell.toml"),
                &format!("{SHELL}{extra}"),
                &[&backend as &dyn Backend],
            )?;
            DockerConfig::from_policy(&policy)
        };
        let tls = "engine = \"tcp://engine.example:2376\"\nengine_certs = \"certs\"\n";
        let e = at(tls).unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("ca.pem is missing"), "{e}");
        for f in crate::CERT_FILES {
            std::fs::write(certs.join(f), "").unwrap();
        }
        let engine = at(tls).unwrap().engine.unwrap();
        assert_eq!(engine.line, 6);
        assert_eq!(
            engine.value,
            EngineAddress::Tls {
                host: "engine.example:2376".into(),
                certs: dir.path().join("certs"),
            }
        );
        let plain = at("engine = \"tcp://127.0.0.1:2375\"\n")
            .unwrap()
            .engine
            .unwrap();
        assert!(matches!(plain.value, EngineAddress::Plain { .. }));
        assert!(at("").unwrap().engine.is_none(), "DOCKER_HOST's engine");
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
            (format!("{SHELL}copy_limit = \"0\"\n"), 6, "copy_limit"),
            (
                format!("{SHELL}files = \"nfs\"\n"),
                6,
                "files must be \"copy\"",
            ),
            (format!("{SHELL}pool = 0\n"), 6, "pool must be from 1 to 64"),
            (
                format!("{SHELL}pool = 65\n"),
                6,
                "pool must be from 1 to 64",
            ),
            (format!("{SHELL}runtime = \"\"\n"), 6, "runtime must name"),
            (
                format!("{SHELL}component = \"x.wasm\"\n"),
                6,
                "unknown field `component`",
            ),
            (format!("{SHELL}privileged = true\n"), 6, "unknown field"),
            (
                format!("{SHELL}engine = \"tcp://10.0.0.1:2375\"\n"),
                6,
                "without TLS is refused",
            ),
            (
                format!("{SHELL}engine = \"ssh://me@engine\"\n"),
                6,
                "not an engine address",
            ),
            (
                format!("{SHELL}engine_certs = \"certs\"\n"),
                6,
                "without `engine`",
            ),
            (
                "[executor]\nkind = \"docker\"\nname = \"x\"\n".into(),
                2,
                "image",
            ),
            (
                "[executor]\nkind = \"docker\"\nimage = \"i\"\nargv = [\"x\"]\n".into(),
                2,
                "needs `name",
            ),
        ];
        for (text, line, words) in cases {
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(words), "{words}: {e}");
        }
    }
}
