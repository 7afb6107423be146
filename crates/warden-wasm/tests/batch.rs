//! Batches through the dispatcher with real components: N calls in, N messages out, in order,
//! failures isolated; limits, retries, review, redaction and the call log.

use crate::common::{Bench, kind};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{
    Admission, Asked, BoxFuture, CallLog, ChangesToReview, Decision, Dispatcher, Reviewer,
    RunLimits, Status, ToolCall, ToolMessage, Verdict,
};

/// The secret WARDEN_TEST_TOKEN holds ([`crate::common::host_vars`]).
pub(crate) const TOKEN: &str = "tok-3b9f0c11d2a7";

fn call(id: &str, tool: &str, args: Value) -> ToolCall {
    ToolCall::new(id, tool, &args)
}

fn mixed_bench(hostile_limits: &str) -> Bench {
    let bench = Bench::new();
    bench.policy("trivial.toml", "trivial", "");
    bench.policy("hostile.toml", "hostile", hostile_limits);
    bench
}

/// A dispatcher that writes its call log into the bench, and the log.
fn logged(bench: &Bench) -> (Dispatcher, Arc<CallLog>) {
    let log = Arc::new(CallLog::open(&bench.dir.path().join("calls.jsonl")).unwrap());
    let d = bench.dispatcher().call_log(log.clone());
    (d, log)
}

/// The log as written so far.
fn log_text(log: &CallLog) -> String {
    log.flush();
    std::fs::read_to_string(log.path()).unwrap()
}

/// The hostile fixture with a read-write `/slots` folder shared by its instances.
fn slots_bench(limits: &str) -> Bench {
    let bench = Bench::new();
    let shared = bench.folder("slots");
    bench.policy(
        "hostile.toml",
        "hostile",
        &format!(
            "[grants]\nfs = [{{ host = {:?}, guest = \"/slots\", access = \"read-write\" }}]\n[limits]\n{limits}",
            shared.display().to_string()
        ),
    );
    bench
}

/// `n` calls that each hold a slot in `/slots` for 200 ms and report how many they saw.
fn occupy_calls(n: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| {
            call(
                &format!("c{i}"),
                "occupy",
                json!({"dir": "/slots", "id": format!("s{i}"), "ms": 200}),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_calls_with_five_failures_answer_all_in_order() {
    let bench = mixed_bench("[limits]\ntimeout = \"3s\"\nmemory = \"64MiB\"");
    let d = bench.dispatcher();
    let mut calls = Vec::new();
    for i in 0..100 {
        let c = match i {
            7 => call("c7", "spin", json!({})),
            19 => call("c19", "alloc", json!({"mib": 1024})),
            42 => call("c42", "boom", json!({"message": "boom at 42"})),
            63 => call("c63", "no-such-tool", json!({})),
            88 => ToolCall {
                id: "c88".into(),
                name: "add".into(),
                arguments: "{\"a\": 1,".into(),
            },
            91..=94 => call(&format!("c{i}"), "sleep", json!({"ms": 2000})),
            _ => call(&format!("c{i}"), "add", json!({"a": i, "b": 1000})),
        };
        calls.push(c);
    }
    let start = Instant::now();
    let messages = d.dispatch(calls).await;
    let took = start.elapsed();
    assert_eq!(messages.len(), 100);
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.tool_call_id, format!("c{i}"), "order broken at {i}");
        let expected = match i {
            7 => "timeout",
            19 => "out_of_memory",
            42 => "trap",
            63 => "unknown_tool",
            88 => "malformed_arguments",
            _ => "success",
        };
        assert_eq!(kind(m), expected, "call {i}: {m:?}");
        if expected == "success" && !(91..=94).contains(&i) {
            assert_eq!(m.content, (i + 1000).to_string());
        }
    }
    // One 3 s timeout and four 2 s sleeps: in parallel about 3 s, in sequence 11 s.
    assert!(took < Duration::from_secs(7), "the batch took {took:?}");
}

#[tokio::test]
async fn a_granted_secret_never_reaches_the_model_or_the_log() {
    crate::common::host_vars();
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[grants]\nenv_from_host = [\"WARDEN_TEST_TOKEN\"]\nenv = { PIN = \"pin-5521-xyz\" }\nsecret_env = [\"PIN\"]",
    );
    let (d, log) = logged(&bench);
    let batch = vec![
        call("a", "echo-env", json!({"name": "WARDEN_TEST_TOKEN"})),
        call("b", "env", json!({})),
        call("c", "fail", json!({"message": format!("token is {TOKEN}")})),
        call("d", "boom", json!({"message": TOKEN})),
        call("e", "echo-env", json!({"name": "PIN"})),
    ];
    let messages = d.dispatch(batch).await;
    assert_eq!(messages[0].content, "[redacted:WARDEN_TEST_TOKEN]");
    assert_eq!(messages[4].content, "[redacted:PIN]");
    for m in &messages {
        let all = m.to_langchain().to_string();
        assert!(
            !all.contains(TOKEN) && !all.contains("pin-5521-xyz"),
            "leaked: {all}"
        );
    }
    assert!(messages[2].content.contains("[redacted:WARDEN_TEST_TOKEN]"));
    let log = log_text(&log);
    assert!(
        !log.contains(TOKEN) && !log.contains("pin-5521-xyz"),
        "{log}"
    );
    let records: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&Value> = records.iter().filter(|r| r["event"] == "call").collect();
    assert_eq!(calls.len(), 5, "{log}");
    // The grants in force are in the policy record the calls name, ahead of them.
    assert_eq!(records[0]["event"], "policy", "{log}");
    assert!(records[0].get("grants").is_some(), "{log}");
    for key in [
        "tool",
        "call_id",
        "tool_call_id",
        "executor",
        "policy_digest",
        "outcome",
        "duration_ms",
    ] {
        assert!(
            calls[0].get(key).is_some(),
            "{key} missing from {}",
            calls[0]
        );
    }
    assert_eq!(calls[0]["policy_digest"], records[0]["policy_digest"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limits_hold() {
    let bench = slots_bench("concurrency = 3");
    let d = bench.dispatcher();
    let calls = occupy_calls(12);
    let messages = d.dispatch(calls).await;
    let seen: Vec<u64> = messages
        .iter()
        .map(|m| m.content.parse().expect(&m.content))
        .collect();
    assert!(
        seen.iter().all(|&n| n <= 3),
        "more than 3 at once: {seen:?}"
    );
    assert!(
        seen.iter().any(|&n| n >= 2),
        "never ran in parallel: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_budget_makes_calls_wait_for_room() {
    let bench = slots_bench("memory = \"40MiB\"");
    let admission = Admission {
        memory_budget: 100 << 20,
        ..Admission::default()
    };
    let d = Dispatcher::with_admission(Arc::new(bench.load().unwrap()), admission);
    let calls = occupy_calls(8);
    let seen: Vec<u64> = d
        .dispatch(calls)
        .await
        .iter()
        .map(|m| m.content.parse().unwrap())
        .collect();
    assert!(seen.iter().all(|&n| n <= 2), "over the budget: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_batch_stops_its_calls_and_frees_their_places() {
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[limits]\nconcurrency = 1\ntimeout = \"60s\"",
    );
    let d = bench.dispatcher();
    let batch = d.dispatch(vec![
        call("a", "spin", json!({})),
        call("b", "spin", json!({})),
    ]);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), batch)
            .await
            .is_err()
    );
    // The only slot of the tool is free again: a new call runs at once.
    let start = Instant::now();
    let m = d.call(call("c", "burn", json!({"iterations": 10}))).await;
    assert_eq!(kind(&m), "success", "{m:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "waited {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn run_limits_refuse_calls_over_them_and_run_the_rest() {
    let bench = mixed_bench("");
    let admission = Admission {
        run: RunLimits {
            max_calls: Some(5),
            max_calls_per_tool: Some(2),
        },
        ..Admission::default()
    };
    let d = Dispatcher::with_admission(Arc::new(bench.load().unwrap()), admission);
    let batch = vec![
        call("1", "add", json!({"a": 1, "b": 1})),
        call("2", "add", json!({"a": 1, "b": 2})),
        call("3", "add", json!({"a": 1, "b": 3})),
        call("4", "burn", json!({"iterations": 1})),
        call("5", "noop", json!({})),
    ];
    let kinds: Vec<&str> = d.dispatch(batch).await.iter().map(kind).collect();
    assert_eq!(
        kinds,
        ["success", "success", "limit_exceeded", "success", "success"]
    );
    let next = d
        .dispatch(vec![
            call("6", "noop", json!({})),
            call("7", "burn", json!({"iterations": 1})),
        ])
        .await;
    assert_eq!(kind(&next[0]), "success", "the fifth counted call");
    assert_eq!(kind(&next[1]), "limit_exceeded", "the run's sixth");
}

#[tokio::test]
async fn only_idempotent_tools_are_retried_and_only_when_transient() {
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[limits]\ntimeout = \"200ms\"\n[functions.sleep]\nidempotent = true\n[functions.fail]\nidempotent = true",
    );
    let (d, log) = logged(&bench);
    d.dispatch(vec![
        call("slow", "sleep", json!({"ms": 10_000})),
        call("bad", "sleep", json!({"ms": "soon"})),
        call("err", "fail", json!({"message": "no"})),
    ])
    .await;
    let attempts: Vec<(String, u64)> = log_text(&log)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["event"] == "call")
        .map(|v| {
            (
                v["tool_call_id"].as_str().unwrap().to_owned(),
                v["attempts"].as_u64().unwrap(),
            )
        })
        .collect();
    let of = |id: &str| attempts.iter().find(|(c, _)| c == id).map(|(_, n)| *n);
    assert_eq!(of("slow"), Some(3), "{attempts:?}");
    assert_eq!(of("bad"), Some(1), "invalid arguments are never retried");
    assert_eq!(of("err"), Some(1), "a tool error is not transient");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_is_opt_in() {
    let bench = mixed_bench("[limits]\ntimeout = \"30s\"");
    let batch = || {
        vec![
            call("boom", "boom", json!({"message": "x"})),
            call("long", "sleep", json!({"ms": 3000})),
            call("ok", "noop", json!({})),
        ]
    };
    let d = bench.dispatcher();
    let kinds: Vec<&str> = d.dispatch(batch()).await.iter().map(kind).collect();
    assert_eq!(
        kinds,
        ["trap", "success", "success"],
        "by default one failure touches nothing else"
    );
    let start = Instant::now();
    let messages = bench.dispatcher().fail_fast(true).dispatch(batch()).await;
    assert_eq!(kind(&messages[0]), "trap");
    assert_eq!(kind(&messages[1]), "unavailable");
    assert!(
        messages[1].content.contains("fail_fast"),
        "{}",
        messages[1].content
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "the sleeper was not cancelled"
    );
}

/// Decisions written ahead by a person, keyed by call id.
struct Scripted(Vec<(&'static str, Decision)>);

impl Reviewer for Scripted {
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision> {
        let d = self
            .0
            .iter()
            .find(|(id, _)| *id == asked.call.id)
            .map(|(_, d)| d.clone());
        Box::pin(async move {
            d.unwrap_or(Decision::Reject {
                reason: "no decision".into(),
            })
        })
    }

    fn review_changes<'a>(
        &'a self,
        _: &'a Asked<'a>,
        _: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async {
            Verdict::Reject {
                reason: "wasm tools hold no changes".into(),
            }
        })
    }

    fn name(&self) -> &'static str {
        "scripted"
    }
}

#[tokio::test]
async fn review_decides_per_call_id() {
    let bench = Bench::new();
    bench.policy(
        "units.toml",
        "units",
        "[functions.add]\nreview = { required = true }",
    );
    let reviewer = Scripted(vec![
        (
            "e",
            Decision::Edit {
                arguments: json!({"a": 10, "b": 10}),
            },
        ),
        (
            "x",
            Decision::Edit {
                arguments: json!({"a": "ten"}),
            },
        ),
        (
            "r",
            Decision::Reject {
                reason: "not today".into(),
            },
        ),
        (
            "s",
            Decision::Respond {
                content: "it is 7".into(),
            },
        ),
        ("a", Decision::Approve),
    ]);
    let d = bench.dispatcher().reviewer(Arc::new(reviewer));
    let args = json!({"a": 1, "b": 2});
    let ids = ["a", "r", "s", "e", "x"];
    let messages = d
        .dispatch(ids.iter().map(|id| call(id, "add", args.clone())).collect())
        .await;
    assert_eq!(messages[0].content, "3");
    assert_eq!(kind(&messages[1]), "rejected");
    assert!(messages[1].content.contains("not today"));
    assert_eq!(
        (messages[2].status, messages[2].content.as_str()),
        (Status::Success, "it is 7")
    );
    assert_eq!(messages[3].content, "20");
    assert_eq!(
        kind(&messages[4]),
        "invalid_arguments",
        "an edit is checked again"
    );
    let convert = d
        .call(call(
            "n",
            "convert",
            json!({"quantity": {"value": 1, "unit": "meter"}, "to": "meter"}),
        ))
        .await;
    assert_eq!(
        kind(&convert),
        "success",
        "tools without review run at once"
    );
    let unreviewed = bench.dispatcher().call(call("z", "add", args)).await;
    assert_eq!(kind(&unreviewed), "rejected");
    assert!(
        unreviewed.content.contains("reviewer"),
        "{}",
        unreviewed.content
    );
}

#[derive(Debug, Clone)]
enum Planned {
    Good(i32),
    Unknown,
    Malformed,
    Invalid,
    ToolError,
    Trap,
    Duplicate,
}

fn planned() -> impl Strategy<Value = Planned> {
    prop_oneof![
        4 => any::<i16>().prop_map(|n| Planned::Good(n.into())),
        1 => Just(Planned::Unknown),
        1 => Just(Planned::Malformed),
        1 => Just(Planned::Invalid),
        1 => Just(Planned::ToolError),
        1 => Just(Planned::Trap),
        1 => Just(Planned::Duplicate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_call_gets_its_own_message_in_order(plan in proptest::collection::vec(planned(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let bench = mixed_bench("");
        let d = bench.dispatcher();
        let calls: Vec<ToolCall> = plan.iter().enumerate().map(|(i, p)| {
            let id = match p { Planned::Duplicate if i > 0 => "c0".to_owned(), _ => format!("c{i}") };
            match p {
                Planned::Good(n) => call(&id, "add", json!({"a": n, "b": 1})),
                Planned::Unknown => call(&id, "nope", json!({})),
                Planned::Malformed => ToolCall { id, name: "add".into(), arguments: "{".into() },
                Planned::Invalid => call(&id, "add", json!({"a": "x"})),
                Planned::ToolError => call(&id, "fail", json!({"message": "m"})),
                Planned::Trap => call(&id, "boom", json!({"message": "m"})),
                Planned::Duplicate => call(&id, "noop", json!({})),
            }
        }).collect();
        let messages = rt.block_on(d.dispatch(calls.clone()));
        prop_assert_eq!(messages.len(), calls.len());
        for (i, (m, c)) in messages.iter().zip(&calls).enumerate() {
            prop_assert_eq!(&m.tool_call_id, &c.id);
            prop_assert_eq!(&m.name, &c.name);
            let want = match &plan[i] {
                Planned::Good(_) => "success",
                Planned::Unknown => "unknown_tool",
                Planned::Malformed => "malformed_arguments",
                Planned::Invalid => "invalid_arguments",
                Planned::ToolError => "tool_error",
                Planned::Trap => "trap",
                Planned::Duplicate if i > 0 => "invalid_arguments",
                Planned::Duplicate => "success",
            };
            prop_assert_eq!(kind(m), want, "call {}: {:?}", i, m);
            if let Planned::Good(n) = plan[i] {
                prop_assert_eq!(m.content.clone(), (n + 1).to_string());
            }
        }
    }
}

/// Every answer says what its call used: an 8 MiB allocation shows at least 8 MiB of peak
/// memory, a CPU loop its CPU time, a small call little of either, and a failed call too.
#[tokio::test]
async fn each_answer_carries_what_its_call_used() {
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[limits]\ntimeout = \"20s\"\nmemory = \"64MiB\"",
    );
    let d = bench.dispatcher();
    let usage = |m: &ToolMessage| match &m.error {
        Some(e) => e.details["usage"].clone(),
        None => m.artifact.as_ref().unwrap()["usage"].clone(),
    };
    let big = d.call(call("a", "alloc", json!({"mib": 8}))).await;
    assert_eq!(kind(&big), "success", "{big:?}");
    assert!(
        usage(&big)["peak_memory_bytes"].as_u64() >= Some(8 << 20),
        "{big:?}"
    );
    let burnt = d
        .call(call("b", "burn", json!({"iterations": 300_000_000u64})))
        .await;
    let cpu = usage(&burnt)["cpu_ms"].as_f64().unwrap();
    let wall = usage(&burnt)["wall_ms"].as_f64().unwrap();
    assert!(cpu > 20.0 && cpu <= wall * 1.1 + 5.0, "{burnt:?}");
    let small = d.call(call("c", "burn", json!({"iterations": 10}))).await;
    assert!(
        usage(&small)["peak_memory_bytes"].as_u64() < Some(8 << 20),
        "{small:?}"
    );
    let failed = d.call(call("d", "alloc", json!({"mib": 1024}))).await;
    assert_eq!(kind(&failed), "out_of_memory", "{failed:?}");
    assert!(
        usage(&failed)["peak_memory_bytes"].as_u64() > Some(0),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_what_the_engines_pool_holds_are_unavailable_and_the_rest_run() {
    // More calls waiting at once than the pool has async stacks (256): a dispatcher allowed
    // to admit them all.
    let bench = mixed_bench("[limits]\nconcurrency = 300\nmemory = \"16MiB\"\ntimeout = \"5s\"");
    let admission = Admission {
        global_concurrency: 300,
        memory_budget: 8 << 30,
        ..Admission::default()
    };
    let d = Dispatcher::with_admission(Arc::new(bench.load().unwrap()), admission);
    let calls: Vec<ToolCall> = (0..300)
        .map(|i| call(&format!("c{i}"), "sleep", json!({"ms": 1500})))
        .collect();
    let messages = d.dispatch(calls).await;
    assert_eq!(messages.len(), 300);
    let refused: Vec<&ToolMessage> = messages
        .iter()
        .filter(|m| m.status != Status::Success)
        .collect();
    assert!(!refused.is_empty(), "the pool held 300 calls at once");
    assert!(refused.len() < 300 - 200, "{} refused", refused.len());
    for m in &refused {
        assert_eq!(kind(m), "unavailable", "{m:?}");
        let message = &m.error.as_ref().unwrap().message;
        assert!(message.contains("try again"), "{message}");
    }
    // Their places are free again.
    let after = d
        .dispatch(vec![call("last", "sleep", json!({"ms": 1}))])
        .await;
    assert_eq!(after[0].status, Status::Success, "{:?}", after[0]);
}
