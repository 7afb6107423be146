//! Where things are, and loading the toolbox with every backend this build has.

use anyhow::{Context as _, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{
    Admission, Backend, CallLog, Dispatcher, Protected, RunLimits, Toolbox, ToolboxError,
};
use warden_docker::{DockerBackend, Engine};
use warden_host::{Helper, HostBackend};
use warden_wasm::{Artifacts, Resolver, WasmBackend};

/// The folders a command works with.
pub struct Context {
    pub toolbox: PathBuf,
    pub artifacts: Artifacts,
    pub call_log: PathBuf,
    /// The agent's run transcripts.
    pub runs: PathBuf,
    /// How tools' HTTP hosts resolve.
    pub resolver: Resolver,
    /// Docker tools share one engine (connected on their first call, never at load).
    pub docker: DockerBackend,
    /// Host tools start their calls through this program, re-executed as the helper.
    pub host: HostBackend,
}

/// The backends of every executor kind this build has: a new kind is one more field here.
pub struct Backends {
    wasm: WasmBackend,
    docker: DockerBackend,
    host: HostBackend,
}

impl Backends {
    /// Every backend, for loading policies.
    pub fn list(&self) -> [&dyn Backend; 3] {
        [&self.wasm, &self.docker, &self.host]
    }

    /// Loads the toolbox in `dir` with every backend.
    pub fn load(&self, dir: &Path, protected: &[Protected]) -> Result<Toolbox, ToolboxError> {
        Toolbox::load(dir, &self.list(), protected)
    }
}

impl Context {
    pub fn new(
        toolbox: PathBuf,
        home: Option<PathBuf>,
        cache: Option<PathBuf>,
        call_log: Option<PathBuf>,
    ) -> Result<Self> {
        let home = match home {
            Some(h) => h,
            None => default_home()?,
        };
        let cache = cache.unwrap_or_else(|| home.join("cache"));
        Ok(Self {
            call_log: call_log.unwrap_or_else(|| home.join("calls.jsonl")),
            runs: home.join("runs"),
            toolbox,
            docker: DockerBackend::new(Engine::from_env()),
            host: HostBackend::new(Helper::this_program(&[crate::HOST_HELPER_ARG])),
            artifacts: Artifacts {
                store: home.join("store"),
                cache,
            },
            resolver: Resolver::default(),
        })
    }

    /// Resolves tools' HTTP hosts with `resolver`.
    pub fn resolver(mut self, resolver: Resolver) -> Self {
        self.resolver = resolver;
        self
    }

    /// warden's own places, which no grant may reach.
    pub fn protected(&self) -> Vec<Protected> {
        vec![
            Protected {
                what: "the toolbox",
                path: self.toolbox.clone(),
            },
            Protected {
                what: "the component store",
                path: self.artifacts.store.clone(),
            },
            Protected {
                what: "the compile cache",
                path: self.artifacts.cache.clone(),
            },
            Protected {
                what: "the call log",
                path: self.call_log.clone(),
            },
            Protected {
                what: "the agent's transcripts",
                path: self.runs.clone(),
            },
        ]
    }

    pub fn backend(&self) -> WasmBackend {
        let hook: warden_wasm::CompileHook = Arc::new(|path: &Path| {
            if std::io::stderr().is_terminal() {
                eprintln!(
                    "compiling {} (once; later runs load it from the cache)…",
                    path.display()
                );
            }
        });
        WasmBackend::new(self.artifacts.clone())
            .on_compile(hook)
            .resolver(self.resolver.clone())
    }

    /// Every backend this build has, for loading (and reloading) a toolbox.
    pub fn backends(&self) -> Backends {
        Backends {
            wasm: self.backend(),
            docker: self.docker.clone(),
            host: self.host.clone(),
        }
    }

    /// Loads the toolbox; any policy that cannot be honoured is an error.
    pub fn load(&self) -> Result<Toolbox> {
        self.backends()
            .load(&self.toolbox, &self.protected())
            .with_context(|| format!("loading the toolbox {}", self.toolbox.display()))
    }

    /// A dispatcher over the toolbox that logs every call and asks a person on a terminal.
    pub fn dispatcher(&self, run: RunLimits) -> Result<Dispatcher> {
        let toolbox = Arc::new(self.load()?);
        let log = CallLog::open(&self.call_log)
            .with_context(|| format!("opening the call log {}", self.call_log.display()))?;
        let admission = Admission {
            run,
            ..Admission::default()
        };
        let mut d = Dispatcher::with_admission(toolbox, admission).call_log(Arc::new(log));
        if let Some(r) = crate::review::TerminalReviewer::if_terminal() {
            d = d.reviewer(r);
        }
        Ok(d)
    }
}

/// The async runtime the commands use.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn default_home() -> Result<PathBuf> {
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(data).join("warden"));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .context("cannot tell where to keep warden's files: set WARDEN_HOME or HOME")?;
    Ok(PathBuf::from(home).join(".local/share/warden"))
}
