//! warden in-process: a Rust agent loads a toolbox with every executor kind this build has, gets
//! a dispatcher, runs its model's tool calls as batches and closes the session — the same path
//! (validation, limits, review, redaction, call log) as `warden call`, `warden serve` and
//! `warden agent`.
//!
//! ```
//! use serde_json::json;
//! use warden::{RunLimits, ToolCall, Warden};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let home = tempfile::tempdir()?;
//! # let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
//! # if !root.join("target/wasm32-wasip2/release/units.wasm").is_file() {
//! #     // The example tools are built by scripts/test and `warden demo`. Where they were meant
//! #     // to be built (CI, or scripts/test's WARDEN_GUESTS_BUILT), a missing one is a broken
//! #     // build: passing without running would hide it.
//! #     assert!(
//! #         !warden_test_support::under_ci() && std::env::var_os("WARDEN_GUESTS_BUILT").is_none(),
//! #         "target/wasm32-wasip2/release/units.wasm is missing: build guest-sdk first"
//! #     );
//! #     return Ok(());
//! # }
//! # let policies = root.join("policies");
//! let warden = Warden::builder(policies).home(home.path()).build()?;
//! let runtime = tokio::runtime::Runtime::new()?;
//! runtime.block_on(async {
//!     // One dispatcher is one session: a Docker or host shell keeps its state between calls.
//!     let session = warden.dispatcher(RunLimits::default())?;
//!     let answers = session
//!         .dispatch(vec![
//!             ToolCall::new("c1", "convert", &json!({
//!                 "quantity": {"value": 5, "unit": "mile"}, "to": "kilometer"
//!             })),
//!             ToolCall::new("c2", "no-such-tool", &json!({})),
//!         ])
//!         .await;
//!     session.close().await;
//!     // Exactly one message per call, in order, whatever happened to each.
//!     assert!(answers[0].content.starts_with("8.04"));
//!     assert_eq!(answers[1].error.as_ref().map(|e| e.kind.as_str()), Some("unknown_tool"));
//!     Ok::<_, warden::Error>(())
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! A program that runs host tools (`kind = "host"`) must let warden start it as the
//! sandbox helper: call [`run_host_helper_if_asked`] first thing in `main`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{
    Admission, Backend, CallLog, ExecutorKind, Loading, Protected, Rotation, Seals, Toolbox,
    ToolboxError,
};
use warden_docker::{DockerBackend, Engine};
use warden_host::{Helper, HostBackend};
use warden_net::{Egress, Resolver};
use warden_tx::Store;
use warden_wasm::{Artifacts, CompileHook, WasmBackend, Workload};

pub use warden_core::{
    Decision, Dispatcher, ErrorKind, Reviewer, RunLimits, Status, ToolCall, ToolError, ToolMessage,
    ToolSpec,
};

/// The first argument that makes a program warden's host helper.
pub const HOST_HELPER_ARG: &str = "__warden-host-helper";

/// The small host helper program built and installed beside `warden`
/// (`src/bin/warden-helper.rs`): host calls start it when it is there and of the same build,
/// and start this program ([`run_host_helper_if_asked`]) otherwise.
pub const HELPER_PROGRAM: &str = "warden-helper";

/// Becomes the host executor's sandbox helper, and never returns, when this process was
/// started as one. Call it first thing in `main`, while the process has one thread.
pub fn run_host_helper_if_asked() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == HOST_HELPER_ARG)
    {
        warden_host::helper_main();
    }
}

/// What embedding warden can fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot tell where to keep warden's files: set WARDEN_HOME or HOME, or name a home")]
    NoHome,
    #[error("loading the toolbox {0}: {1}")]
    Toolbox(PathBuf, ToolboxError),
    #[error("opening the call log {0}: {1}")]
    CallLog(PathBuf, std::io::Error),
}

/// warden's places and backends: where the toolbox, the component store, the compile cache,
/// the call log and the agent's transcripts are, and every executor kind that loads tools.
pub struct Warden {
    /// The folder of policy files.
    pub toolbox: PathBuf,
    pub artifacts: Artifacts,
    pub call_log: PathBuf,
    /// When the call log is rotated and how many old files are kept.
    pub call_log_rotation: Rotation,
    /// How the call log's chain is sealed: the key, and where heads are exported.
    pub seals: Seals,
    /// The agent's run transcripts.
    pub runs: PathBuf,
    /// Calls' views of their read-write roots and the pre-images of what they committed
    /// (`warden undo`, `warden rewind`), opened at its first use.
    pub transactions: Arc<Store>,
    /// Snapshots of sessions' sandboxes that clients took (`warden/snapshot`).
    pub snapshots: Arc<warden_snapshot::Snapshots>,
    /// The keys `warden add oci://…` and `warden pull` trust per registry or repository
    /// prefix ([`warden_oci::TrustFile`]).
    pub trust: PathBuf,
    /// How warden reaches out for tools: names it pins, roots it verifies upstream TLS with.
    pub egress: Egress,
    /// Docker tools share one engine (connected on their first call, never at load).
    pub docker: DockerBackend,
    /// Host tools start their calls through [`HELPER_PROGRAM`] beside this program, or this
    /// program started as the helper.
    pub host: HostBackend,
    /// Called before a component is compiled.
    pub on_compile: CompileHook,
    /// What the WebAssembly engine and host sandboxes prepared ahead are sized for.
    pub workload: Workload,
    /// Whether a policy that does not load fails the toolbox or is left out and reported.
    pub loading: Loading,
}

/// Chooses warden's places; [`Builder::build`] fills in the defaults.
pub struct Builder {
    toolbox: PathBuf,
    home: Option<PathBuf>,
    cache: Option<PathBuf>,
    call_log: Option<PathBuf>,
    call_log_rotation: Rotation,
    ledger_key: Option<PathBuf>,
    syslog: Option<PathBuf>,
    egress: Egress,
    on_compile: CompileHook,
    workload: Workload,
}

impl Builder {
    /// warden's own files [default: `$XDG_DATA_HOME/warden` or `~/.local/share/warden`].
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// The compile cache [default: HOME/cache].
    pub fn cache(mut self, cache: Option<PathBuf>) -> Self {
        self.cache = cache;
        self
    }

    /// The call log, one JSON line per call [default: HOME/calls.jsonl].
    pub fn call_log(mut self, call_log: Option<PathBuf>) -> Self {
        self.call_log = call_log;
        self
    }

    /// When the call log is rotated, and how many old files are kept [default: 64 MiB, 4].
    pub fn call_log_rotation(mut self, rotation: Rotation) -> Self {
        self.call_log_rotation = rotation;
        self
    }

    /// The key that seals the call log [default: HOME/ledger.key], and the syslog socket
    /// each seal's head goes to [default: none].
    pub fn ledger(mut self, key: Option<PathBuf>, syslog: Option<PathBuf>) -> Self {
        self.ledger_key = key;
        self.syslog = syslog;
        self
    }

    /// How tools' HTTP hosts resolve [default: the system's resolver].
    pub fn resolver(mut self, resolver: Resolver) -> Self {
        self.egress = self.egress.with_resolver(resolver);
        self
    }

    /// How warden reaches out for tools: resolver and upstream roots [default: the system's
    /// resolver, the Mozilla roots].
    pub fn egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// Called before a component is compiled (a slow step worth telling a person about).
    pub fn on_compile(mut self, hook: CompileHook) -> Self {
        self.on_compile = hook;
        self
    }

    /// What warden is sized for [default: a server's many calls]: the WebAssembly engine's
    /// pool, and host sandboxes prepared ahead (none for a one-shot workload).
    pub fn workload(mut self, workload: Workload) -> Self {
        self.workload = workload;
        self
    }

    pub fn build(self) -> Result<Warden, Error> {
        let home = match self.home {
            Some(h) => h,
            None => default_home().ok_or(Error::NoHome)?,
        };
        let transactions = Store::at(&home.join("transactions"));
        Ok(Warden {
            artifacts: Artifacts {
                store: home.join("store"),
                cache: self.cache.unwrap_or_else(|| home.join("cache")),
            },
            call_log: self.call_log.unwrap_or_else(|| home.join("calls.jsonl")),
            call_log_rotation: self.call_log_rotation,
            seals: Seals {
                key: self.ledger_key.unwrap_or_else(|| home.join("ledger.key")),
                export: self.syslog,
            },
            runs: home.join("runs"),
            transactions: transactions.clone(),
            snapshots: Arc::new(warden_snapshot::Snapshots::at(
                &home.join("snapshots"),
                transactions,
            )),
            trust: home.join("trust.toml"),
            toolbox: self.toolbox,
            egress: self.egress,
            docker: DockerBackend::new(Engine::from_env()),
            host: HostBackend::new(Helper::this_program(&[HOST_HELPER_ARG]))
                .preferring_beside(HELPER_PROGRAM),
            on_compile: self.on_compile,
            workload: self.workload,
            loading: Loading::default(),
        })
    }
}

impl Warden {
    /// warden over the policies in `toolbox`, its own files in the default home.
    pub fn builder(toolbox: impl Into<PathBuf>) -> Builder {
        Builder {
            toolbox: toolbox.into(),
            home: None,
            cache: None,
            call_log: None,
            call_log_rotation: Rotation::default(),
            ledger_key: None,
            syslog: None,
            egress: Egress::default(),
            on_compile: Arc::new(|_| {}),
            workload: Workload::default(),
        }
    }

    /// warden's own places, which no grant may reach; and its programs (this one and the
    /// host helper beside it, there or not: a sandbox could plant one), which no read-write
    /// grant may contain.
    pub fn protected(&self) -> Vec<Protected> {
        let mut places = vec![
            Protected::new("the toolbox", &self.toolbox),
            Protected::new("the component store", &self.artifacts.store),
            Protected::new("the compile cache", &self.artifacts.cache),
            Protected::new("the call log", &self.call_log),
            Protected::new("the call log's seal key", &self.seals.key),
            Protected::new("the agent's transcripts", &self.runs),
            Protected::new("the calls' views and pre-images", self.transactions.dir()),
        ];
        if let Ok(exe) = std::env::current_exe() {
            places.push(Protected::unwritten(
                "the host helper's place",
                exe.with_file_name(HELPER_PROGRAM),
            ));
            places.push(Protected::unwritten("warden's own program", exe));
        }
        places
    }

    /// The wasm backend.
    pub fn wasm(&self) -> WasmBackend {
        WasmBackend::new(self.artifacts.clone())
            .on_compile(self.on_compile.clone())
            .egress(self.egress.clone())
            .workload(self.workload)
            .transactions(self.transactions.clone(), self.host.overlays())
    }

    /// The host backend as configured; a one-shot workload prepares no sandbox ahead (its
    /// one call would start its own beside it).
    fn host_backend(&self) -> HostBackend {
        let host = self
            .host
            .clone()
            .egress(self.egress.clone())
            .transactions(self.transactions.clone());
        match self.workload {
            Workload::OneShot => host.prepared(0),
            Workload::Server => host,
        }
    }

    /// Every backend this build has: a new executor kind is one more line here.
    pub fn backends(&self) -> Backends {
        Backends(vec![
            Box::new(self.wasm()),
            Box::new(
                self.docker
                    .clone()
                    .egress(self.egress.clone())
                    .transactions(self.transactions.clone()),
            ),
            Box::new(self.host_backend()),
        ])
    }

    /// Loads the toolbox as [`Warden::loading`] says: a policy that cannot be honoured is
    /// left out and reported ([`Toolbox::broken`]), or an error naming file and line.
    pub fn load(&self) -> Result<Toolbox, Error> {
        self.backends()
            .load(&self.toolbox, &self.protected(), self.loading)
            .map_err(|e| Error::Toolbox(self.toolbox.clone(), e))
    }

    /// As [`Warden::load`], the tools that run programs alone (docker and host): every
    /// policy is read and checked, and no wasm component is loaded.
    pub fn load_programs(&self) -> Result<Toolbox, Error> {
        let backends = self.backends();
        Toolbox::load_where(
            &self.toolbox,
            &backends.list(),
            &self.protected(),
            self.loading,
            |backend, _| backend.capabilities().programs,
        )
        .map_err(|e| Error::Toolbox(self.toolbox.clone(), e))
    }

    /// As [`Warden::load`], for a call of `tool` alone ([`Toolbox::load_for`]): the policies
    /// known to serve other tools only are checked, not loaded. The whole toolbox where only
    /// it tells what the call meets.
    pub fn load_for(&self, tool: &str) -> Result<Toolbox, Error> {
        let backends = self.backends();
        let (list, protected) = (backends.list(), self.protected());
        let toolbox = Toolbox::load_for(&self.toolbox, &list, &protected, self.loading, tool);
        match toolbox.map_err(|e| Error::Toolbox(self.toolbox.clone(), e))? {
            Some(toolbox) => Ok(toolbox),
            None => self.load(),
        }
    }

    /// The call log, opened for appending: a log that cannot be written is an error now,
    /// not a lost record later.
    pub fn open_call_log(&self) -> Result<CallLog, Error> {
        CallLog::open_rotated(&self.call_log, self.call_log_rotation)
            .map(|log| log.sealed(self.seals.clone()))
            .map_err(|e| Error::CallLog(self.call_log.clone(), e))
    }

    /// A dispatcher over the toolbox in a session of its own, logging every call. Close it
    /// ([`Dispatcher::close`]) when the agent's run ends, to free its shells.
    pub fn dispatcher(&self, run: RunLimits) -> Result<Dispatcher, Error> {
        self.dispatcher_over(self.load()?, run)
    }

    /// As [`Warden::dispatcher`], for a call of `tool` alone ([`Warden::load_for`]).
    pub fn dispatcher_for(&self, tool: &str, run: RunLimits) -> Result<Dispatcher, Error> {
        self.dispatcher_over(self.load_for(tool)?, run)
    }

    /// As [`Warden::dispatcher`], over the tools that run programs alone
    /// ([`Warden::load_programs`]): what `warden exec` needs.
    pub fn programs_dispatcher(&self, run: RunLimits) -> Result<Dispatcher, Error> {
        self.dispatcher_over(self.load_programs()?, run)
    }

    fn dispatcher_over(&self, toolbox: Toolbox, run: RunLimits) -> Result<Dispatcher, Error> {
        let toolbox = Arc::new(toolbox);
        let log = self.open_call_log()?;
        let admission = Admission {
            run,
            ..Admission::default()
        };
        Ok(Dispatcher::with_admission(toolbox, admission).call_log(Arc::new(log)))
    }
}

/// The backends of every executor kind, for loading policies.
pub struct Backends(Vec<Box<dyn Backend>>);

impl Backends {
    /// Every backend, as `Toolbox::load` takes them.
    pub fn list(&self) -> Vec<&dyn Backend> {
        self.0.iter().map(|b| &**b).collect()
    }

    /// Every backend's executor kind, as `Policy::load` checks a policy against them.
    pub fn kinds(&self) -> Vec<&dyn ExecutorKind> {
        self.0.iter().map(|b| &**b as _).collect()
    }

    /// Loads the toolbox in `dir` with every backend, refusing grants that reach `protected`,
    /// taking a policy that does not load as `loading` says.
    pub fn load(
        &self,
        dir: &Path,
        protected: &[Protected],
        loading: Loading,
    ) -> Result<Toolbox, ToolboxError> {
        Toolbox::load_with(dir, &self.list(), protected, loading)
    }

    /// The tools of `policy` alone, as [`Backends::load`] makes them: one of the toolbox's
    /// policies loaded again with its roots moved to a fork's copies, which are warden's own
    /// (so no grant is held against the protected places).
    pub fn load_one(&self, policy: warden_core::Policy) -> Result<Toolbox, ToolboxError> {
        let mut toolbox = Toolbox::default();
        toolbox.add_policy(Arc::new(policy), &self.list())?;
        Ok(toolbox)
    }
}

fn default_home() -> Option<PathBuf> {
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(data).join("warden"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    Some(PathBuf::from(home).join(".local/share/warden"))
}
