//! Which filesystem roots a wasm call opened: named in its answer and its call record, bounded
//! like the destinations it reached, and read back by the usage report, which names the roots
//! no call opened with their policy lines. Components built from source (guest-sdk's `files`
//! tool and `hostile` fixture).

use crate::common::{Bench, call, kind};
use serde_json::{Value, json};
use std::sync::Arc;
use warden_core::{CallLog, Dispatcher, ToolMessage};
use warden_usage::UsageReport;

/// A bench with `files.toml` granting `/workspace` (read-only, line 6) and `/other`
/// (read-write, line 7), a dispatcher writing a call log, and the log's path.
fn two_roots() -> (Bench, Dispatcher, Arc<CallLog>) {
    let bench = Bench::new();
    let workspace = bench.folder("workspace");
    let other = bench.folder("other");
    std::fs::write(workspace.join("note.txt"), "hello").unwrap();
    bench.policy(
        "files.toml",
        "files",
        &format!(
            "[grants]\nfs = [\n  {{ host = {:?}, guest = \"/workspace\", access = \"read-only\" }},\n  {{ host = {:?}, guest = \"/other\", access = \"read-write\" }},\n]",
            workspace.display().to_string(),
            other.display().to_string()
        ),
    );
    let log = Arc::new(CallLog::open(&bench.dir.path().join("calls.jsonl")).unwrap());
    let d = bench.dispatcher().call_log(log.clone());
    (bench, d, log)
}

/// The roots a message says its call opened, and how many uses of them.
fn opened(m: &ToolMessage) -> (Vec<String>, u64) {
    let details = match &m.error {
        Some(e) => Some(&e.details),
        None => m.artifact.as_ref(),
    };
    let roots = details
        .and_then(|d| d.get("roots_opened"))
        .map(|r| serde_json::from_value(r.clone()).unwrap())
        .unwrap_or_default();
    let count = details
        .and_then(|d| d.get("root_uses"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    (roots, count)
}

/// The call records of the log, in order.
fn records(log: &CallLog) -> Vec<Value> {
    log.flush();
    std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "call")
        .collect()
}

fn report(bench: &Bench, log: &CallLog) -> UsageReport {
    log.flush();
    UsageReport::read(&log.files(), None, &bench.load().unwrap()).unwrap()
}

/// The unused grants of a report as `(key, line, why)`.
fn unused(r: &UsageReport) -> Vec<(&str, usize, &str)> {
    r.unused_grants
        .iter()
        .map(|g| (g.key, g.line, g.why.as_str()))
        .collect()
}

#[tokio::test]
async fn a_call_names_the_root_it_opened_and_the_audit_the_root_never_opened() {
    let (bench, d, log) = two_roots();
    let read = call(&d, "read-file", json!({"path": "note.txt"})).await;
    assert_eq!(read.content, "hello", "{read:?}");
    let (roots, count) = opened(&read);
    assert_eq!(roots, ["/workspace"], "{read:?}");
    assert!(count >= 1);
    let artifact = read.artifact.as_ref().unwrap();
    assert!(artifact.get("roots_opened_count").is_none(), "{read:?}");
    let record = &records(&log)[0];
    assert_eq!(record["roots_opened"], json!(["/workspace"]), "{record}");
    assert_eq!(record["root_uses"], json!(count), "{record}");
    // One root is not counted as many: no count of roots beside the uses.
    assert!(record.get("roots_opened_count").is_none(), "{record}");

    let r = report(&bench, &log);
    assert_eq!(
        unused(&r),
        [("fs", 7, "no call in the window opened it")],
        "{r:#?}"
    );
    assert!(r.unused_grants[0].grant.contains("-> /other (read-write)"));
    let workspace = bench.dir.path().join("workspace").canonicalize().unwrap();
    assert_eq!(
        r.suggestions[0].grants,
        format!(
            "[grants]\nfs = [{{ host = {:?}, guest = \"/workspace\", access = \"read-only\" }}]\n",
            workspace.display().to_string()
        )
    );

    // Once a call opens /other, every root was used and nothing narrower is offered.
    let wrote = call(
        &d,
        "write-file",
        json!({"path": "/other/new.txt", "contents": "x"}),
    )
    .await;
    assert_eq!(kind(&wrote), "success", "{wrote:?}");
    assert_eq!(opened(&wrote).0, ["/other"], "{wrote:?}");
    let r = report(&bench, &log);
    assert_eq!(unused(&r), [], "{r:#?}");
    assert_eq!(r.suggestions, [], "{r:#?}");
}

#[tokio::test]
async fn a_call_that_opens_no_root_records_none() {
    let (bench, d, log) = two_roots();
    // Outside every root: wasi-libc finds no preopen for the path and asks no root.
    let m = call(&d, "read-file", json!({"path": "/elsewhere/note.txt"})).await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    assert_eq!(opened(&m), (vec![], 0), "{m:?}");
    let record = &records(&log)[0];
    assert!(record.get("roots_opened").is_none(), "{record}");
    assert!(record.get("root_uses").is_none(), "{record}");
    // The tool ran and opened neither root: both are named.
    let r = report(&bench, &log);
    let lines: Vec<(&str, usize)> = unused(&r).iter().map(|u| (u.0, u.1)).collect();
    assert_eq!(lines, [("fs", 6), ("fs", 7)], "{r:#?}");
    assert!(r.suggestions[0].grants.contains("fs = []"), "{r:#?}");
}

#[tokio::test]
async fn a_call_keeps_the_first_hundred_roots_and_counts_every_use() {
    let bench = Bench::new();
    const ROOTS: usize = 120;
    let mut grants = String::from("[grants]\nfs = [\n");
    for i in 0..ROOTS {
        let dir = bench.folder(&format!("r{i}"));
        std::fs::write(dir.join("f.txt"), "x").unwrap();
        grants.push_str(&format!(
            "  {{ host = {:?}, guest = \"/r{i}\", access = \"read-only\" }},\n",
            dir.display().to_string()
        ));
    }
    grants.push(']');
    bench.policy("hostile.toml", "hostile", &grants);
    let d = bench.dispatcher();
    // Every root twice: 240 uses of 120 roots.
    let paths: Vec<String> = (0..2 * ROOTS)
        .map(|i| format!("/r{}/f.txt", i % ROOTS))
        .collect();
    let m = call(&d, "read-each", json!({"paths": paths})).await;
    assert_eq!(m.content, (2 * ROOTS).to_string(), "{m:?}");
    let (roots, count) = opened(&m);
    let first: Vec<String> = (0..100).map(|i| format!("/r{i}")).collect();
    assert_eq!(roots, first);
    assert!(count >= 2 * ROOTS as u64, "{count}");
}
