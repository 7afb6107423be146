//! A toolbox of wasm policies in a temp dir, run by dispatchers over the guest components:
//! the bench of the wasm executor's tests, and of the agent's (which include this file).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use warden_core::{CallLog, Dispatcher, Protected, Toolbox, ToolboxError};
use warden_net::{Egress, Resolver};
use warden_test_support::guests::{root, wasm};
use warden_wasm::{Artifacts, WasmBackend};

/// A toolbox folder, a component store and a call log in a temp dir. The compile cache is
/// shared by all tests of a run, so each fixture compiles once.
pub(crate) struct Bench {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) toolbox: PathBuf,
    pub(crate) artifacts: Artifacts,
    /// How tools' HTTP hosts resolve (tests pin names to loopback: there is no DNS here).
    pub(crate) resolver: Resolver,
    /// The logs of the logging dispatchers made, flushed before the log is read.
    logs: Mutex<Vec<Arc<CallLog>>>,
}

impl Bench {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let toolbox = dir.path().join("policies");
        std::fs::create_dir(&toolbox).unwrap();
        let artifacts = Artifacts {
            store: dir.path().join("store"),
            cache: root().join("target/warden-test-cache"),
        };
        Self {
            dir,
            toolbox,
            artifacts,
            resolver: Resolver::default(),
            logs: Mutex::default(),
        }
    }

    /// `trivial` (add, noop) and `hostile` (fail, sleep, …), nothing granted.
    pub(crate) fn standard() -> Self {
        let b = Self::new();
        b.policy("trivial.toml", "trivial", "");
        b.policy("hostile.toml", "hostile", "[limits]\ntimeout = \"60s\"");
        b
    }

    /// Writes a policy whose `[executor]` runs the named fixture; `rest` adds tables.
    pub(crate) fn policy(&self, file: &str, fixture: &str, rest: &str) -> PathBuf {
        self.policy_at(file, &wasm(fixture), rest)
    }

    /// Writes a policy running the component at `path`; `rest` adds tables.
    pub(crate) fn policy_at(&self, file: &str, path: &Path, rest: &str) -> PathBuf {
        let policy = self.toolbox.join(file);
        let text = format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n{rest}\n",
            path.display().to_string()
        );
        std::fs::write(&policy, text).unwrap();
        policy
    }

    /// A folder inside the bench, created.
    pub(crate) fn folder(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub(crate) fn load(&self) -> Result<Toolbox, ToolboxError> {
        let backend =
            WasmBackend::new(self.artifacts.clone()).egress(Egress::new(self.resolver.clone()));
        let protected = [
            Protected::new("the toolbox", self.toolbox.clone()),
            Protected::new("the component store", self.artifacts.store.clone()),
        ];
        Toolbox::load(&self.toolbox, &[&backend], &protected)
    }

    pub(crate) fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(Arc::new(self.load().expect("toolbox loads")))
    }

    /// A dispatcher that writes the bench's call log ([`Bench::call_log`]).
    pub(crate) fn logging_dispatcher(&self) -> Dispatcher {
        let log = Arc::new(CallLog::open(&self.call_log()).unwrap());
        self.logs.lock().unwrap().push(log.clone());
        self.dispatcher().call_log(log)
    }

    pub(crate) fn call_log(&self) -> PathBuf {
        self.dir.path().join("calls.jsonl")
    }

    /// How many times the call log says the call the caller named `call_id` ran (or was answered).
    pub(crate) fn logged(&self, call_id: &str) -> usize {
        self.outcomes(call_id).len()
    }

    /// The outcomes the call log has for `call_id`, sorted.
    pub(crate) fn outcomes(&self, call_id: &str) -> Vec<String> {
        self.logs.lock().unwrap().iter().for_each(|log| log.flush());
        let text = std::fs::read_to_string(self.call_log()).unwrap_or_default();
        let mut outcomes: Vec<String> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == "call" && v["tool_call_id"] == call_id)
            .map(|v| v["outcome"].as_str().unwrap_or_default().to_owned())
            .collect();
        outcomes.sort();
        outcomes
    }
}

impl Default for Bench {
    fn default() -> Self {
        Self::new()
    }
}
