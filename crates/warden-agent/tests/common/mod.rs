//! Shared by the agent's tests: guest components built from source once, a toolbox in a temp
//! dir, and a run against the scripted server.
#![allow(dead_code)]

pub(crate) use warden_test_support::guests::{root, wasm};
pub(crate) use warden_test_support::scripted;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_agent::{ChatConfig, Execution, Limits, Outcome, RetryPolicy, ReviewSource, Run};
use warden_core::{CallLog, Dispatcher, Protected, Toolbox};
use warden_wasm::{Artifacts, WasmBackend};

/// A toolbox, a runs folder and a call log in a temp dir.
pub(crate) struct Bench {
    pub dir: tempfile::TempDir,
    pub toolbox: PathBuf,
    /// The logs of the dispatchers made, flushed before the log is read.
    logs: std::sync::Mutex<Vec<Arc<CallLog>>>,
}

impl Bench {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let toolbox = dir.path().join("policies");
        std::fs::create_dir(&toolbox).unwrap();
        Self {
            dir,
            toolbox,
            logs: Default::default(),
        }
    }

    /// A policy running `fixture`; `rest` adds tables.
    pub(crate) fn policy(&self, file: &str, fixture: &str, rest: &str) {
        let text = format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n{rest}\n",
            wasm(fixture).display().to_string()
        );
        std::fs::write(self.toolbox.join(file), text).unwrap();
    }

    /// `trivial` (add, noop) and `hostile` (fail, sleep, …), nothing granted.
    pub(crate) fn standard() -> Self {
        let b = Self::new();
        b.policy("trivial.toml", "trivial", "");
        b.policy("hostile.toml", "hostile", "[limits]\ntimeout = \"60s\"");
        b
    }

    pub(crate) fn runs(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    pub(crate) fn call_log(&self) -> PathBuf {
        self.dir.path().join("calls.jsonl")
    }

    pub(crate) fn dispatcher(&self) -> Dispatcher {
        let backend = WasmBackend::new(Artifacts {
            store: self.dir.path().join("store"),
            cache: root().join("target/warden-test-cache"),
        });
        let protected = [Protected::new("the toolbox", self.toolbox.clone())];
        let toolbox = Toolbox::load(&self.toolbox, &[&backend], &protected).expect("toolbox");
        let log = Arc::new(CallLog::open(&self.call_log()).unwrap());
        self.logs.lock().unwrap().push(log.clone());
        Dispatcher::new(Arc::new(toolbox)).call_log(log)
    }

    /// How many times the call log says `call_id` ran (or was answered).
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
            .filter(|v| v["event"] == "call" && v["call_id"] == call_id)
            .map(|v| v["outcome"].as_str().unwrap_or_default().to_owned())
            .collect();
        outcomes.sort();
        outcomes
    }
}

/// Settings for the scripted server: quick retries, a short request timeout.
pub(crate) fn execution(base_url: &str, limits: Limits, review: ReviewSource) -> Execution {
    Execution {
        chat: ChatConfig {
            base_url: base_url.to_owned(),
            api_key: Some("sk-test".into()),
            model: "scripted-model".into(),
            timeout: Duration::from_secs(20),
            retry: RetryPolicy {
                max_retries: 3,
                initial: Duration::from_millis(20),
                max_delay: Duration::from_millis(200),
                max_retry_after: Duration::from_secs(5),
            },
        },
        limits,
        review,
    }
}

/// Starts a run of `task` and drives it to its stop.
pub(crate) async fn run(bench: &Bench, task: &str, exec: Execution) -> (Outcome, PathBuf) {
    let run = Run::create(&bench.runs(), task, None).unwrap();
    let path = run.path().to_owned();
    let outcome = run.execute(exec, bench.dispatcher()).await.unwrap();
    (outcome, path)
}

/// The transcript's events, as JSON.
pub(crate) fn transcript(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
