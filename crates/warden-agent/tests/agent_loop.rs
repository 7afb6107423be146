//! The loop against a scripted OpenAI-compatible server: batches, errors the model can correct,
//! limits, retries and provider errors.

use crate::common::scripted::{Scripted, answer, calls, error};
use crate::common::{Bench, execution, run, transcript};
use serde_json::Value;
use std::time::Duration;
use warden_agent::{Limits, ReviewSource, Run, StopReason};

#[tokio::test(flavor = "multi_thread")]
async fn multi_step_task_with_parallel_calls_one_failing() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![
        calls(&[
            ("a", "add", r#"{"a": 1, "b": 2}"#),
            ("b", "fail", r#"{"message": "the disk is on fire"}"#),
            ("c", "add", r#"{"a": 3, "b": 4}"#),
        ]),
        calls(&[("d", "add", r#"{"a": 3, "b": 7}"#)]),
        answer("3, 7 and 10; the other call failed"),
    ]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, path) = run(&bench, "add some numbers", exec).await;

    assert_eq!(outcome.reason, StopReason::Answered);
    assert_eq!(
        outcome.answer.as_deref(),
        Some("3, 7 and 10; the other call failed")
    );
    assert_eq!(
        (
            outcome.totals.steps,
            outcome.totals.model_calls,
            outcome.totals.tool_calls
        ),
        (3, 3, 4)
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let first = &requests[0].body;
    assert_eq!(first["model"], "scripted-model");
    assert_eq!(requests[0].authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(first["messages"][0]["content"], "add some numbers");
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"add") && tools.contains(&"fail"),
        "{tools:?}"
    );
    let add = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "add")
        .unwrap();
    assert_eq!(add["type"], "function");
    assert_eq!(add["function"]["parameters"]["type"], "object");

    // Every call of the batch is answered, in the model's order, the failure among them.
    let second = requests[1].tool_messages();
    let ids: Vec<&str> = second.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(second[0].1, "3");
    assert!(second[1].1.contains("tool_error"), "{}", second[1].1);
    assert!(
        second[1].1.contains("the disk is on fire"),
        "{}",
        second[1].1
    );
    assert_eq!(second[2].1, "7");
    // The assistant turn goes back just before its answers.
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["tool_calls"][1]["id"], "b");
    assert_eq!(requests[2].answer("d"), "10");
    assert_eq!(requests[2].tool_messages().len(), 4);

    // The transcript: each call started before it was answered, and a stop at the end.
    let events = transcript(&path);
    assert_eq!(events[0]["type"], "run");
    assert_eq!(events[0]["model"], "scripted-model");
    for id in ["a", "b", "c", "d"] {
        let started = position(&events, "started", id).expect("started");
        let answered = position(&events, "answered", id).expect("answered");
        assert!(started < answered, "{id}");
    }
    let last = events.last().unwrap();
    assert_eq!(last["type"], "stop");
    assert_eq!(last["reason"]["kind"], "answered");
    assert_eq!(last["totals"]["tool_calls"], 4);
    // What the calls used rides in the stop event: each answer counted, the failure too.
    assert_eq!(last["totals"]["usage"]["calls"], 4, "{last}");
    assert!(
        last["totals"]["usage"]["errors"].as_u64() >= Some(1),
        "{last}"
    );
    assert!(!std::fs::read_to_string(&path).unwrap().contains("sk-test"));
}

fn position(events: &[Value], kind: &str, id: &str) -> Option<usize> {
    events.iter().position(|e| {
        e["type"] == kind && (e["call_id"] == id || e["message"]["tool_call_id"] == id)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_arguments_unknown_tools_and_duplicate_ids_are_answered() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![
        calls(&[
            ("m", "add", r#"{"a": 1, "b": "#),
            ("u", "ad", r#"{"a": 1, "b": 2}"#),
            ("v", "add", r#"{"a": "one", "b": 2}"#),
            ("x", "add", r#"{"a": 1, "b": 1}"#),
            ("x", "add", r#"{"a": 2, "b": 2}"#),
        ]),
        calls(&[("m2", "add", r#"{"a": 1, "b": 2}"#)]),
        answer("3"),
    ]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, _) = run(&bench, "add", exec).await;
    assert_eq!(outcome.reason, StopReason::Answered);

    let answers = server.requests()[1].tool_messages();
    assert_eq!(answers.len(), 5, "one answer per call: {answers:?}");
    assert!(answers[0].1.contains("malformed_arguments"), "{answers:?}");
    assert!(answers[1].1.contains("unknown_tool"), "{answers:?}");
    assert!(answers[1].1.contains("Did you mean `add`"), "{answers:?}");
    assert!(answers[2].1.contains("invalid_arguments"), "{answers:?}");
    assert_eq!(answers[3].1, "2");
    assert!(
        answers[4].1.contains("used by an earlier call"),
        "{answers:?}"
    );
    assert_eq!(
        server.requests()[2].answer("m2"),
        "3",
        "the model corrected itself"
    );
    assert_eq!(
        bench.outcomes("x"),
        ["invalid_arguments", "success"],
        "the first `x` ran; the second was refused, not run"
    );
    assert_eq!(bench.outcomes("m"), ["malformed_arguments"]);
    assert_eq!(bench.outcomes("u"), ["unknown_tool"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_step_limit_stops_the_run() {
    let bench = Bench::standard();
    let again = || calls(&[("s", "noop", "")]);
    let server = Scripted::start(vec![again(), again(), again()]);
    let limits = Limits {
        max_steps: 2,
        ..Limits::default()
    };
    let exec = execution(&server.base_url(), limits, ReviewSource::Nobody);
    let (outcome, path) = run(&bench, "loop", exec).await;
    assert_eq!(outcome.reason, StopReason::MaxSteps { limit: 2 });
    assert_eq!(outcome.answer, None);
    assert_eq!(server.requests().len(), 2);
    let stop = transcript(&path).pop().unwrap();
    assert_eq!(stop["reason"]["kind"], "max_steps");
    assert_eq!(stop["reason"]["limit"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_call_limits_stop_the_run_per_run_and_per_tool() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![
        calls(&[("a", "noop", ""), ("b", "noop", "")]),
        calls(&[("c", "add", r#"{"a":1,"b":1}"#), ("d", "noop", "")]),
    ]);
    let limits = Limits {
        max_tool_calls: Some(3),
        ..Limits::default()
    };
    let exec = execution(&server.base_url(), limits, ReviewSource::Nobody);
    let (outcome, path) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::MaxToolCalls { limit: 3 });
    assert_eq!(outcome.totals.tool_calls, 3);
    assert_eq!(server.requests().len(), 2, "the model is not asked again");
    assert_eq!(bench.logged("c"), 1);
    assert_eq!(
        bench.outcomes("d"),
        ["limit_exceeded"],
        "the call over the limit did not run"
    );
    let events = transcript(&path);
    let refused = events
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["tool_call_id"] == "d")
        .expect("the refused call is answered in the transcript");
    assert!(
        refused["message"]["content"]
            .as_str()
            .unwrap()
            .contains("limit_exceeded")
    );

    let server = Scripted::start(vec![calls(&[
        ("a", "noop", ""),
        ("b", "add", r#"{"a":1,"b":1}"#),
        ("c", "noop", ""),
    ])]);
    let limits = Limits {
        max_calls_per_tool: Some(1),
        ..Limits::default()
    };
    let exec = execution(&server.base_url(), limits, ReviewSource::Nobody);
    let (outcome, _) = run(&bench, "t", exec).await;
    assert_eq!(
        outcome.reason,
        StopReason::MaxCallsPerTool {
            tool: "noop".into(),
            limit: 1
        }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_run_keeps_counting_its_tool_calls() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![
        calls(&[("a", "noop", ""), ("b", "noop", "")]),
        calls(&[("c", "noop", "")]),
    ]);
    let limits = |max| Limits {
        max_tool_calls: Some(max),
        ..Limits::default()
    };
    let exec = execution(&server.base_url(), limits(2), ReviewSource::Nobody);
    let (outcome, path) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::MaxToolCalls { limit: 2 });
    assert_eq!(bench.outcomes("c"), ["limit_exceeded"]);

    // Carried on with room for one more call: the two made before still count.
    server.push(vec![calls(&[("d", "noop", ""), ("e", "noop", "")])]);
    let exec = execution(&server.base_url(), limits(3), ReviewSource::Nobody);
    let resumed = Run::resume(&path).unwrap();
    let outcome = resumed
        .execute(exec, bench.logging_dispatcher())
        .await
        .unwrap();
    assert_eq!(outcome.reason, StopReason::MaxToolCalls { limit: 3 });
    assert_eq!(outcome.totals.tool_calls, 3);
    assert_eq!(server.requests().len(), 3, "the model is not asked again");
    assert_eq!(bench.outcomes("d"), ["success"]);
    assert_eq!(bench.outcomes("e"), ["limit_exceeded"]);
    let sent = server.requests()[2].tool_messages();
    assert_eq!(
        sent.len(),
        3,
        "a, b and c went back before the resume: {sent:?}"
    );
    let events = transcript(&path);
    let refused = events
        .iter()
        .rev()
        .find(|v| v["type"] == "answered" && v["message"]["tool_call_id"] == "e")
        .expect("the refusal is in the transcript");
    assert_eq!(
        refused["message"]["error"]["details"]["run_limit"],
        "max_calls"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_and_server_errors_are_retried_honouring_retry_after() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![
        error(
            429,
            &[("retry-after", "1")],
            "slow down",
            "rate_limit_exceeded",
        ),
        error(503, &[], "overloaded", "server_error"),
        answer("fine"),
    ]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, path) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::Answered);
    assert_eq!(outcome.totals.model_calls, 3);
    assert_eq!(outcome.totals.steps, 1);
    let r = server.requests();
    assert!(
        r[1].at - r[0].at >= Duration::from_millis(990),
        "Retry-After: 1 was honoured ({:?})",
        r[1].at - r[0].at
    );
    let calls: Vec<Value> = transcript(&path)
        .into_iter()
        .filter(|e| e["type"] == "model_call")
        .collect();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0]["status"], 429);
    assert_eq!(calls[0]["retry_in_ms"], 1000);
    assert_eq!(calls[1]["status"], 503);
    assert_eq!(calls[2]["status"], 200);
    assert_eq!(calls[2]["usage"]["total_tokens"], 15);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_times_out_is_retried_a_bounded_number_of_times() {
    use crate::common::scripted::Reply;
    let bench = Bench::standard();
    let late = || Reply::Late(Duration::from_secs(5), Box::new(answer("too late")));
    let server = Scripted::start(vec![late(), answer("in time")]);
    let mut exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    exec.chat.timeout = Duration::from_secs(1);
    let (outcome, _) = run(&bench, "t", exec).await;
    assert_eq!(outcome.answer.as_deref(), Some("in time"));

    let server = Scripted::start(vec![
        error(500, &[], "boom", "server_error"),
        error(502, &[], "boom", "server_error"),
        error(500, &[], "boom", "server_error"),
        error(500, &[], "boom", "server_error"),
        answer("never asked"),
    ]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, _) = run(&bench, "t", exec).await;
    let StopReason::ModelUnavailable { message } = &outcome.reason else {
        panic!("{:?}", outcome.reason);
    };
    assert!(message.contains("4 attempt"), "{message}");
    assert_eq!(server.requests().len(), 4, "1 attempt + 3 retries");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_error_ends_the_run_with_that_error() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![error(
        400,
        &[],
        "This model's maximum context length is 8192 tokens.",
        "context_length_exceeded",
    )]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, path) = run(&bench, "t", exec).await;
    let StopReason::ProviderError { status, message } = &outcome.reason else {
        panic!("{:?}", outcome.reason);
    };
    assert_eq!(*status, Some(400));
    assert!(message.contains("context_length_exceeded"), "{message}");
    assert!(message.contains("maximum context length"), "{message}");
    assert_eq!(server.requests().len(), 1, "a refusal is not retried");
    assert_eq!(transcript(&path).pop().unwrap()["reason"]["status"], 400);

    let server = Scripted::start(vec![error(
        401,
        &[],
        "Incorrect API key",
        "invalid_api_key",
    )]);
    let exec = execution(&server.base_url(), Limits::default(), ReviewSource::Nobody);
    let (outcome, _) = run(&bench, "t", exec).await;
    assert!(outcome.reason.to_string().contains("OPENAI_API_KEY"));

    let exec = execution("not-a-url", Limits::default(), ReviewSource::Nobody);
    let (outcome, _) = run(&bench, "t", exec).await;
    assert!(
        outcome.reason.to_string().contains("cannot send a request"),
        "{}",
        outcome.reason
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_time_budget_stops_a_batch_and_keeps_what_finished() {
    let bench = Bench::standard();
    let server = Scripted::start(vec![calls(&[
        ("quick", "add", r#"{"a":1,"b":1}"#),
        ("slow", "sleep", r#"{"ms": 30000}"#),
    ])]);
    let limits = Limits {
        budget: Some(Duration::from_millis(1500)),
        ..Limits::default()
    };
    let exec = execution(&server.base_url(), limits, ReviewSource::Nobody);
    let began = std::time::Instant::now();
    let (outcome, path) = run(&bench, "t", exec).await;
    assert_eq!(outcome.reason, StopReason::Budget { limit_ms: 1500 });
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
    let events = transcript(&path);
    let answer = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "message" && e["message"]["tool_call_id"] == id)
            .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(answer("quick"), "2");
    assert!(answer("slow").contains("time budget"), "{}", answer("slow"));
}

/// Not a test: the loop's own cost per step (model request over loopback, one `noop` call,
/// transcript lines). `cargo test -p warden-agent --release --test agent_loop -- --ignored
/// --nocapture loop_overhead`
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement, not a test"]
async fn loop_overhead() {
    let bench = Bench::standard();
    let steps = 200;
    let mut script: Vec<_> = (0..steps)
        .map(|i| calls(&[(&format!("c{i}"), "noop", "")]))
        .collect();
    script.push(answer("done"));
    let server = Scripted::start(script);
    let limits = Limits {
        max_steps: steps + 1,
        ..Limits::default()
    };
    // The first run compiles the components; measure the second.
    let warm = Scripted::start(vec![answer("warm")]);
    let exec = execution(&warm.base_url(), Limits::default(), ReviewSource::Nobody);
    run(&bench, "warm up", exec).await;
    let exec = execution(&server.base_url(), limits, ReviewSource::Nobody);
    let began = std::time::Instant::now();
    let (outcome, _) = run(&bench, "loop", exec).await;
    let took = began.elapsed();
    assert_eq!(outcome.reason, StopReason::Answered);
    // The client's side of a step: from the reply written to the next request's head, so the
    // scripted server's own parsing is left out.
    let (r, replied) = (server.requests(), server.replied());
    let gaps: Vec<Duration> = r[1..]
        .iter()
        .zip(&replied)
        .map(|(next, sent)| next.at - *sent)
        .collect();
    let mean = |d: &[Duration]| d.iter().sum::<Duration>() / d.len().max(1) as u32;
    println!(
        "{} steps in {took:?} ({:?} per step with the server's share); the loop's own share \
         per step: steps 1-20 {:?}, steps 181-200 {:?} (the conversation grows each step)",
        steps + 1,
        took / (steps + 1),
        mean(&gaps[..20]),
        mean(&gaps[180..]),
    );
}
