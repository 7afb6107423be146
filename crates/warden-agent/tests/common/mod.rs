//! Shared by the agent's tests: a toolbox of wasm tools in a temp dir (the wasm executor's
//! test bench, included from its tests), and a run against the scripted server.

#[path = "../../../warden-wasm/tests/common/bench.rs"]
#[allow(dead_code, reason = "the wasm tests use more of it than the agent's")]
mod bench;

pub(crate) use bench::Bench;
pub(crate) use warden_test_support::scripted;

use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_agent::{ChatConfig, Execution, Limits, Outcome, RetryPolicy, ReviewSource, Run};

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

/// The bench's runs folder.
pub(crate) fn runs(bench: &Bench) -> PathBuf {
    bench.dir.path().join("runs")
}

/// Starts a run of `task` and drives it to its stop.
pub(crate) async fn run(bench: &Bench, task: &str, exec: Execution) -> (Outcome, PathBuf) {
    let run = Run::create(&runs(bench), task, None).unwrap();
    let path = run.path().to_owned();
    let outcome = run.execute(exec, bench.logging_dispatcher()).await.unwrap();
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
