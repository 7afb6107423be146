//! Review in a run: decisions from a file, keyed by tool_call_id; a run pauses for calls the
//! file has no decision for, and resumes once it has.

use crate::common::scripted::{Scripted, answer, calls};
use crate::common::{Bench, execution, run, transcript};
use serde_json::json;
use std::sync::Arc;
use warden_agent::{Decisions, Limits, ReviewSource, Run, StopReason};

/// `add` needs review; `noop` does not.
fn reviewed_bench() -> Bench {
    let b = Bench::new();
    b.policy(
        "trivial.toml",
        "trivial",
        "[functions.add]\nreview = { required = true }",
    );
    b
}

fn decisions(bench: &Bench, value: serde_json::Value) -> ReviewSource {
    let path = bench.dir.path().join("decisions.json");
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    ReviewSource::File(Arc::new(Decisions::load(&path).unwrap()))
}

#[tokio::test(flavor = "multi_thread")]
async fn decisions_from_a_file_apply_by_call_id() {
    let bench = reviewed_bench();
    let server = Scripted::start(vec![
        calls(&[
            ("approve-me", "add", r#"{"a": 1, "b": 2}"#),
            ("edit-me", "add", r#"{"a": 1, "b": 2}"#),
            ("free", "noop", ""),
            ("bad-edit", "add", r#"{"a": 1, "b": 2}"#),
            ("reject-me", "add", r#"{"a": 1, "b": 2}"#),
            ("respond-me", "add", r#"{"a": 1, "b": 2}"#),
            ("switch-me", "add", r#"{"a": 1, "b": 2}"#),
        ]),
        answer("done"),
    ]);
    // Listed in another order than the calls: decisions go by id, never by position.
    let review = decisions(
        &bench,
        json!({
            "switch-me": {"decision": "edit", "tool": "noop", "arguments": {}},
            "respond-me": {"decision": "respond", "content": "the answer is 42"},
            "reject-me": {"decision": "reject", "reason": "not today"},
            "bad-edit": {"decision": "edit", "arguments": {"a": "one", "b": 2}},
            "edit-me": {"decision": "edit", "arguments": {"a": 100, "b": 1}},
            "approve-me": {"decision": "approve"},
        }),
    );
    let exec = execution(&server.base_url(), Limits::default(), review);
    let (outcome, path) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::Answered);

    let r = &server.requests()[1];
    assert_eq!(r.answer("approve-me"), "3");
    assert_eq!(r.answer("edit-me"), "101", "the edited arguments ran");
    assert_eq!(
        r.answer("free"),
        "ok",
        "a call that needs no review ran at once"
    );
    let bad = r.answer("bad-edit");
    assert!(
        bad.contains("invalid_arguments"),
        "an edit is checked again: {bad}"
    );
    assert!(bad.contains("/a"), "{bad}");
    let rejected = r.answer("reject-me");
    assert!(
        rejected.contains("rejected") && rejected.contains("not today"),
        "{rejected}"
    );
    assert_eq!(r.answer("respond-me"), "the answer is 42");
    let switched = r.answer("switch-me");
    assert!(
        switched.contains("rejected") && switched.contains("another tool"),
        "{switched}"
    );
    assert_eq!(bench.logged("reject-me"), 1, "logged, not run");

    let events = transcript(&path);
    let decision = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "decision" && e["call_id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(decision("edit-me")["decision"], "edit");
    assert_eq!(decision("edit-me")["arguments"]["a"], 100);
    assert_eq!(decision("edit-me")["source"], "file");
    assert_eq!(decision("reject-me")["reason"], "not today");
    let answered = events
        .iter()
        .find(|e| e["type"] == "answered" && e["message"]["tool_call_id"] == "respond-me")
        .unwrap();
    assert_eq!(answered["message"]["status"], "success");
}

/// An approval names the call it is for by digest, sha256 of the JCS form of tool and
/// arguments (computed here from the canonical text, as a decisions file's author would): the
/// same approval for other arguments is refused, and the call log records each decision with
/// the digest it was bound to.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_bound_to_the_calls_digest() {
    use warden_core::call_digest;
    let bench = reviewed_bench();
    let server = Scripted::start(vec![
        calls(&[
            ("bound", "add", r#"{"b": 2, "a": 1}"#),
            ("moved", "add", r#"{"a": 1, "b": 200}"#),
        ]),
        answer("done"),
    ]);
    let digest = call_digest("add", r#"{"a":1,"b":2}"#);
    let canonical = r#"["add",{"a":1,"b":2}]"#;
    assert_eq!(digest, format!("sha256:{}", sha256_hex(canonical)));
    let review = decisions(
        &bench,
        json!({
            "bound": {"decision": "approve", "digest": digest},
            "moved": {"decision": "approve", "digest": digest},
        }),
    );
    let exec = execution(&server.base_url(), Limits::default(), review);
    let (outcome, _) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::Answered);
    let r = &server.requests()[1];
    assert_eq!(r.answer("bound"), "3");
    let moved = r.answer("moved");
    assert!(
        moved.contains("rejected") && moved.contains("digest"),
        "{moved}"
    );

    let log = std::fs::read_to_string(bench.call_log()).unwrap();
    let decision = |id: &str| {
        log.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["event"] == "decision" && r["tool_call_id"] == id)
            .unwrap()
    };
    let (bound, moved) = (decision("bound"), decision("moved"));
    assert_eq!(
        (&bound["decision"], &bound["reviewer"]),
        (&json!("approve"), &json!("file"))
    );
    assert_eq!(bound["digest"], digest.as_str());
    assert_eq!(moved["decision"], "reject");
    assert_eq!(moved["digest"], call_digest("add", r#"{"a":1,"b":200}"#));
}

/// The hex of the sha256 of `text`, by `sha256sum`: another implementation than warden's.
fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_without_a_decision_pauses_the_run_until_resumed() {
    let bench = reviewed_bench();
    let server = Scripted::start(vec![calls(&[
        ("yes", "add", r#"{"a": 1, "b": 2}"#),
        ("later", "add", r#"{"a": 5, "b": 5}"#),
        ("free", "noop", ""),
    ])]);
    let review = decisions(&bench, json!({"yes": {"decision": "approve"}}));
    let exec = execution(&server.base_url(), Limits::default(), review);
    let (outcome, path) = run(&bench, "t", exec).await;
    assert_eq!(
        outcome.reason,
        StopReason::AwaitingReview {
            calls: vec!["later".into()]
        }
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(bench.logged("yes"), 1);
    assert_eq!(bench.logged("free"), 1);
    let pending: Vec<_> = transcript(&path)
        .into_iter()
        .filter(|e| e["type"] == "pending")
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["arguments"], r#"{"a": 5, "b": 5}"#);

    // The person decides; the run carries on without running the finished calls again.
    server.push(vec![answer("done")]);
    let review = decisions(
        &bench,
        json!({"yes": {"decision": "approve"}, "later": {"decision": "edit", "arguments": {"a": 6, "b": 5}}}),
    );
    let exec = execution(&server.base_url(), Limits::default(), review);
    let resumed = Run::resume(&path).unwrap();
    assert_eq!(resumed.previous().unwrap().model, "scripted-model");
    let outcome = resumed
        .execute(exec, bench.logging_dispatcher())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::Answered);
    assert_eq!(outcome.totals.tool_calls, 3);
    let r = &server.requests()[1];
    assert_eq!(r.tool_messages().len(), 3);
    assert_eq!(r.answer("yes"), "3");
    assert_eq!(r.answer("later"), "11");
    assert_eq!(bench.logged("yes"), 1, "not run twice");
    assert_eq!(bench.logged("free"), 1, "not run twice");
    assert_eq!(bench.logged("later"), 1);

    let finished = Run::resume(&path)
        .err()
        .expect("a finished run is not resumed");
    assert!(finished.to_string().contains("finished"), "{finished}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_reviewer_a_call_that_needs_review_is_rejected() {
    let bench = reviewed_bench();
    let server = Scripted::start(vec![
        calls(&[("c", "add", r#"{"a": 1, "b": 2}"#)]),
        answer("ok"),
    ]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, _) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::Answered);
    let a = server.requests()[1].answer("c");
    assert!(a.contains("rejected") && a.contains("no reviewer"), "{a}");
}
