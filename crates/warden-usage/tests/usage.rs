//! The usage report read from call logs the dispatcher wrote: the same calls give the same
//! report from one file as from many rotated ones, and grants are read against the policy's
//! lines. The executor is a fake that reports what a sandbox would (reaches, refusals, CPU).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use warden_core::{
    BoxFuture, CallLog, Denial, Dispatcher, ErrorKind, Executor, Invocation, Output, Reached,
    Rotation, ToolCall, ToolError, Toolbox,
};
use warden_test_support::TestBackend;
use warden_usage::UsageReport;

/// Reaches `{"reach": "http://host:port"}` and is refused `{"deny": "..."}`; fails when
/// told to.
struct Netish;

impl Executor for Netish {
    fn execute(&self, inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            if let Some(to) = inv.arguments["reach"].as_str() {
                inv.usage.reach(Reached {
                    destination: to.to_owned(),
                    address: Some("127.0.0.1:8080".parse().unwrap()),
                });
            }
            if let Some(to) = inv.arguments["deny"].as_str() {
                inv.denials.push(Denial {
                    destination: to.to_owned(),
                    reason: "not granted".into(),
                });
            }
            inv.usage.record(|u| {
                u.cpu_ms = Some(2.0);
                u.peak_memory_bytes = Some(1 << 20);
            });
            if inv.arguments["fail"] == true {
                return Err(ToolError::new(ErrorKind::ToolError, "asked to fail"));
            }
            Ok(Output::default())
        })
    }
}

const GRANTS: &str = "[grants]\nenv_from_host = [\"HOME\"]\nnet = [\n  \"a.test:8080\",\n  \
                      \"b.test:8080\",\n  \"127.0.0.1:8080\",\n  \"*.wide.test\",\n]\n";

fn toolbox(dir: &Path) -> Toolbox {
    TestBackend::new()
        .tool("net", Arc::new(Netish))
        .toolbox(dir, GRANTS)
        .unwrap()
}

/// The calls: 300 of them, a few failing, all reaching a.test and one host under wide.test,
/// some refused the same host.
fn calls() -> Vec<ToolCall> {
    (0..300)
        .map(|i| {
            let mut args = json!({"reach": "http://a.test:8080"});
            if i % 7 == 0 {
                args["reach"] = json!("https://api.wide.test:443");
            }
            if i % 50 == 0 {
                args["fail"] = json!(true);
                args["deny"] = json!("http://c.test:80");
            }
            ToolCall::new(format!("c{i}"), "net", &args)
        })
        .collect()
}

async fn run(dir: &Path, log: &Path, rotation: Rotation) -> Vec<std::path::PathBuf> {
    let log = Arc::new(CallLog::open_rotated(log, rotation).unwrap());
    let d = Dispatcher::new(Arc::new(toolbox(dir))).call_log(log.clone());
    for batch in calls().chunks(25) {
        d.dispatch(batch.to_vec()).await;
    }
    log.flush();
    log.files()
}

#[tokio::test]
async fn rotated_files_give_the_same_report_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let small = Rotation {
        max_bytes: 8 << 10,
        keep: 100,
    };
    let rotated = run(dir.path(), &dir.path().join("rotated.jsonl"), small).await;
    assert!(rotated.len() > 5, "the log rotated: {rotated:?}");
    let one = run(
        dir.path(),
        &dir.path().join("one.jsonl"),
        Rotation::default(),
    )
    .await;
    assert_eq!(one.len(), 1);

    let toolbox = toolbox(dir.path());
    // Two runs of the same calls: all the same but their wall times.
    let same = |files: &[std::path::PathBuf]| {
        let mut r = UsageReport::read(files, None, &toolbox).unwrap();
        for t in &mut r.tools {
            assert!(
                t.wall_ms_p50 > 0.0 && t.wall_ms_p95 >= t.wall_ms_p50,
                "{t:?}"
            );
            (t.wall_ms_p50, t.wall_ms_p95) = (0.0, 0.0);
        }
        r
    };
    let from_one = same(&one);
    assert_eq!(same(&rotated), from_one);

    let r = from_one;
    assert_eq!(r.calls, 300);
    assert_eq!(r.unreadable_lines, 0);
    let t = &r.tools[0];
    assert_eq!((t.tool.as_str(), t.calls), ("net", 300));
    assert_eq!(t.errors.get("tool_error"), Some(&6));
    assert_eq!(t.cpu_ms, Some(600.0));
    assert_eq!(t.peak_memory_bytes, Some(1 << 20));
    assert_eq!(t.destinations, 2);
    // b.test is the one grant no call used; 127.0.0.1 let a.test's address through.
    let unused: Vec<(usize, &str)> = r
        .unused_grants
        .iter()
        .map(|g| (g.line, g.grant.as_str()))
        .collect();
    assert_eq!(unused, vec![(7, "b.test:8080")], "{r:#?}");
    // The wide grant narrows to the one host it was used for.
    assert_eq!(
        r.suggestions[0].grants,
        "[grants]\nnet = [\"a.test:8080\", \"127.0.0.1:8080\", \"api.wide.test:443\"]\n"
    );
    assert_eq!(r.refused_repeatedly.len(), 1);
    assert_eq!(r.refused_repeatedly[0].destination, "http://c.test:80");
    assert_eq!(r.refused_repeatedly[0].times, 6);
}

#[tokio::test]
async fn a_policy_whose_tools_never_ran_has_every_host_and_host_variable_unused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    std::fs::write(&log, "").unwrap();
    let r = UsageReport::read(&[log], None, &toolbox(dir.path())).unwrap();
    let unused: Vec<(&str, usize)> = r.unused_grants.iter().map(|g| (g.key, g.line)).collect();
    assert_eq!(
        unused,
        vec![
            ("net", 6),
            ("net", 7),
            ("net", 8),
            ("net", 9),
            ("env_from_host", 4)
        ]
    );
    assert!(
        r.suggestions[0]
            .grants
            .contains("net = []\nenv_from_host = []")
    );
    let missing = UsageReport::read(&[dir.path().join("nope.jsonl")], None, &toolbox(dir.path()));
    assert!(missing.unwrap_err().to_string().contains("nope.jsonl"));
}
