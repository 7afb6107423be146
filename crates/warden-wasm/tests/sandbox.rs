//! The sandbox holds: default deny, filesystem boundaries, and every limit, attacked for real
//! by components built from source (guest-sdk/fixtures/hostile).

use crate::common::{Bench, SECRET, call, host_vars, kind};
use serde_json::json;
use std::time::{Duration, Instant};
use warden_core::ToolMessage;
use warden_core::after_answer::answering;

#[tokio::test]
async fn an_empty_policy_grants_no_env_no_files() {
    host_vars();
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "");
    let d = bench.dispatcher();

    let env = call(&d, "env", json!({})).await;
    assert_eq!(kind(&env), "success", "{env:?}");
    assert_eq!(
        env.content, "[]",
        "the guest saw variables: {}",
        env.content
    );
    let one = call(&d, "echo-env", json!({"name": "WARDEN_TEST_SECRET"})).await;
    assert!(!one.content.contains(SECRET));

    for path in ["/etc/passwd", "/", "etc/passwd", "../etc/passwd", "."] {
        let read = call(&d, "read", json!({"path": path})).await;
        assert_eq!(kind(&read), "tool_error", "read {path}: {read:?}");
        let list = call(&d, "list", json!({"path": path})).await;
        assert_eq!(kind(&list), "tool_error", "list {path}: {list:?}");
    }
}

#[tokio::test]
async fn env_grants_are_exactly_what_is_written() {
    host_vars();
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[grants]\nenv = { GREETING = \"hello\" }\nenv_from_host = [\"WARDEN_TEST_GRANTED\"]",
    );
    let d = bench.dispatcher();
    let env = call(&d, "env", json!({})).await;
    let got: Vec<(String, String)> =
        serde_json::from_value(env.artifact.unwrap()["result"].clone()).unwrap();
    let mut got = got;
    got.sort();
    assert_eq!(
        got,
        vec![
            ("GREETING".to_owned(), "hello".to_owned()),
            // The guest saw the host's value; the model sees it redacted.
            (
                "WARDEN_TEST_GRANTED".to_owned(),
                "[redacted:WARDEN_TEST_GRANTED]".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn a_filesystem_grant_is_a_boundary() {
    let bench = Bench::new();
    let ro = bench.folder("ro");
    let rw = bench.folder("rw");
    let outside = bench.folder("outside");
    std::fs::write(ro.join("hello.txt"), "hi").unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ro.join("link-file")).unwrap();
    std::os::unix::fs::symlink(&outside, rw.join("link-dir")).unwrap();
    std::os::unix::fs::symlink("../outside/secret.txt", rw.join("relative-link")).unwrap();
    bench.policy(
        "hostile.toml",
        "hostile",
        &format!(
            "[grants]\nfs = [\n {{ host = {:?}, guest = \"/ro\", access = \"read-only\" }},\n {{ host = {:?}, guest = \"/rw\", access = \"read-write\" }},\n]",
            ro.display().to_string(),
            rw.display().to_string()
        ),
    );
    let d = bench.dispatcher();

    let ok = call(&d, "read", json!({"path": "/ro/hello.txt"})).await;
    assert_eq!(ok.content, "hi", "{ok:?}");
    let wrote = call(
        &d,
        "write",
        json!({"path": "/rw/new.txt", "contents": "data"}),
    )
    .await;
    assert_eq!(kind(&wrote), "success", "{wrote:?}");
    assert_eq!(std::fs::read_to_string(rw.join("new.txt")).unwrap(), "data");

    let refused_write = call(
        &d,
        "write",
        json!({"path": "/ro/hello.txt", "contents": "x"}),
    )
    .await;
    assert_eq!(kind(&refused_write), "tool_error", "{refused_write:?}");
    let refused_new = call(&d, "write", json!({"path": "/ro/new.txt", "contents": "x"})).await;
    assert_eq!(kind(&refused_new), "tool_error", "{refused_new:?}");
    assert_eq!(std::fs::read_to_string(ro.join("hello.txt")).unwrap(), "hi");
    assert!(!ro.join("new.txt").exists());

    for escape in [
        "/ro/../outside/secret.txt",
        "/rw/../../outside/secret.txt",
        "/ro/link-file",
        "/rw/link-dir/secret.txt",
        "/rw/relative-link",
        &outside.join("secret.txt").display().to_string(),
    ] {
        let m = call(&d, "read", json!({"path": escape})).await;
        assert_eq!(kind(&m), "tool_error", "{escape} escaped: {m:?}");
        assert!(!m.content.contains(SECRET), "{escape} leaked the secret");
    }
    let m = call(
        &d,
        "write",
        json!({"path": "/rw/link-dir/planted.txt", "contents": "x"}),
    )
    .await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    assert!(!outside.join("planted.txt").exists());
}

#[tokio::test]
async fn a_grant_that_reaches_the_toolbox_is_refused_at_load() {
    let bench = Bench::new();
    bench.policy(
        "greedy.toml",
        "hostile",
        &format!(
            "[grants]\nfs = [{{ host = {:?}, guest = \"/all\", access = \"read-write\" }}]",
            bench.dir.path().display().to_string()
        ),
    );
    let err = bench.load().err().expect("the load fails").to_string();
    assert!(err.contains("greedy.toml"), "{err}");
    assert!(err.contains("overlaps the toolbox"), "{err}");
}

#[tokio::test]
async fn an_endless_loop_times_out_and_the_host_goes_on() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "[limits]\ntimeout = \"1s\"");
    let d = bench.dispatcher();
    let start = Instant::now();
    let m = call(&d, "spin", json!({})).await;
    assert_eq!(kind(&m), "timeout", "{m:?}");
    let e = m.error.as_ref().expect("an error");
    assert_eq!(
        e.message,
        "the tool did not finish within its time limit of 1s and was stopped; try smaller input \
         or a cheaper request"
    );
    assert_eq!(e.details["timeout_ms"], 1000, "{m:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let next = call(&d, "burn", json!({"iterations": 1000})).await;
    assert_eq!(kind(&next), "success", "{next:?}");
}

#[tokio::test]
async fn a_sleeping_guest_is_stopped_at_its_deadline() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "[limits]\ntimeout = \"1s\"");
    let d = bench.dispatcher();
    let start = Instant::now();
    let m = call(&d, "sleep", json!({"ms": 600_000})).await;
    assert_eq!(kind(&m), "timeout", "{m:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn fuel_runs_out() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "[limits]\nfuel = 1_000_000");
    let d = bench.dispatcher();
    let m = call(&d, "burn", json!({"iterations": 1_000_000_000_000u64})).await;
    assert_eq!(kind(&m), "out_of_fuel", "{m:?}");
    let small = call(&d, "burn", json!({"iterations": 100})).await;
    assert_eq!(kind(&small), "success", "{small:?}");
}

#[tokio::test]
async fn a_memory_bomb_is_out_of_memory() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "[limits]\nmemory = \"64MiB\"");
    let d = bench.dispatcher();
    let m = call(&d, "alloc", json!({"mib": 1024})).await;
    assert_eq!(kind(&m), "out_of_memory", "{m:?}");
    let fits = call(&d, "alloc", json!({"mib": 16})).await;
    assert_eq!(kind(&fits), "success", "{fits:?}");
}

#[tokio::test]
async fn deep_recursion_is_a_stack_overflow_trap() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "");
    let d = bench.dispatcher();
    let m = call(&d, "recurse", json!({"depth": 100_000_000u64})).await;
    assert_eq!(kind(&m), "trap", "{m:?}");
    assert!(m.content.contains("stack overflow"), "{}", m.content);
}

#[tokio::test]
async fn a_stdout_flood_is_capped_with_a_marker() {
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[limits]\noutput = \"64KiB\"\ntimeout = \"60s\"",
    );
    let d = bench.dispatcher();
    let m = call(&d, "flood", json!({"bytes": 100_000_000u64})).await;
    assert_eq!(kind(&m), "success", "{m:?}");
    assert_eq!(
        m.content, "100000000",
        "the guest was not allowed to finish writing"
    );
    let stdout = m.artifact.as_ref().unwrap()["stdout"].as_str().unwrap();
    assert!(stdout.len() < 70 * 1024, "kept {} bytes", stdout.len());
    assert!(
        stdout.contains("[warden: output truncated, 99934464 more bytes not shown]"),
        "{}",
        &stdout[stdout.len() - 100..]
    );
}

#[tokio::test]
async fn a_panic_is_a_trap_with_its_message() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "");
    let d = bench.dispatcher();
    let m = call(&d, "boom", json!({"message": "the flux capacitor broke"})).await;
    assert_eq!(kind(&m), "trap", "{m:?}");
    assert!(
        m.content.contains("the flux capacitor broke"),
        "{}",
        m.content
    );
    assert!(m.content.contains("panicked at"), "{}", m.content);
}

#[tokio::test]
async fn a_huge_result_is_capped_everywhere() {
    let bench = Bench::new();
    let ro = bench.folder("ro");
    std::fs::write(ro.join("big.txt"), "y".repeat(3 << 20)).unwrap();
    bench.policy(
        "hostile.toml",
        "hostile",
        &format!(
            "[grants]\nfs = [{{ host = {:?}, guest = \"/ro\", access = \"read-only\" }}]\n[limits]\noutput = \"64KiB\"",
            ro.display().to_string()
        ),
    );
    let d = bench.dispatcher();
    let m = call(&d, "read", json!({"path": "/ro/big.txt"})).await;
    assert_eq!(kind(&m), "success", "{}", &m.content[..100]);
    assert!(
        m.content.len() < 70 * 1024,
        "content kept {} bytes",
        m.content.len()
    );
    assert!(m.content.ends_with(&format!(
        "[warden: output truncated, {} more bytes not shown]",
        (3 << 20) - (64 << 10)
    )));
    let artifact = m.artifact.unwrap();
    assert!(
        artifact.get("result").is_none(),
        "the artifact carried the whole result"
    );
    assert_eq!(artifact["truncated"], true);
}

/// Runs one call as a caller with time after its answers does (the MCP stdio path): what the
/// call left for then, the preparing of its function's next sandbox, runs before this returns.
async fn answered(d: &warden_core::Dispatcher, tool: &str, args: serde_json::Value) -> ToolMessage {
    let (message, later) = answering(call(d, tool, args)).await;
    later.finish().await;
    message
}

/// A sandbox made ahead of its call serves that call as one made on its path would: a fresh
/// instance, stopped at the call's own deadline, not at one counted from its making.
#[tokio::test]
async fn a_sandbox_made_ahead_is_fresh_and_timed_from_its_call() {
    let bench = Bench::new();
    bench.policy(
        "hostile.toml",
        "hostile",
        "[limits]\ntimeout = \"1s\"\nmemory = \"64MiB\"",
    );
    let d = bench.dispatcher();
    let peak =
        |m: &ToolMessage| m.artifact.as_ref().unwrap()["usage"]["peak_memory_bytes"].as_u64();

    let big = answered(&d, "alloc", json!({"mib": 16})).await;
    assert_eq!(kind(&big), "success", "{big:?}");
    assert!(peak(&big) >= Some(16 << 20), "{big:?}");
    let small = answered(&d, "alloc", json!({"mib": 0})).await;
    assert_eq!(kind(&small), "success", "{small:?}");
    assert!(
        peak(&small) < Some(16 << 20),
        "the instance was not fresh: {small:?}"
    );
    assert!(
        small.artifact.as_ref().unwrap()["usage"]["cpu_ms"].as_f64() > Some(0.0),
        "{small:?}"
    );

    let first = answered(&d, "sleep", json!({"ms": 1})).await;
    assert_eq!(kind(&first), "success", "{first:?}");
    // Longer than the timeout: a deadline counted from the sandbox's making has passed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late = answered(&d, "sleep", json!({"ms": 50})).await;
    assert_eq!(kind(&late), "success", "{late:?}");
    let stopped = answered(&d, "sleep", json!({"ms": 600_000})).await;
    assert_eq!(kind(&stopped), "timeout", "{stopped:?}");
}

/// What a function's grants read when its sandbox is made (host variables, granted folders) is
/// read for each call, so no sandbox of such a function is made ahead: a changed variable or
/// a replaced folder is what the next call sees, and a stale secret never leaks unredacted.
#[tokio::test]
async fn grants_read_at_call_time_are_read_for_each_call() {
    // SAFETY: this test alone reads WARDEN_TEST_ROTATED; under `cargo test` other threads may
    // read the environment meanwhile, a race taken for the one variable whose change is tested.
    unsafe { std::env::set_var("WARDEN_TEST_ROTATED", "first-secret-value") };
    let bench = Bench::new();
    let data = bench.folder("data");
    std::fs::write(data.join("old.txt"), "").unwrap();
    bench.policy(
        "hostile.toml",
        "hostile",
        &format!(
            "[grants]\nenv_from_host = [\"WARDEN_TEST_ROTATED\"]\nfs = [ {{ host = {:?}, guest = \"/data\", access = \"read-only\" }} ]",
            data.display().to_string()
        ),
    );
    let d = bench.dispatcher();
    let name = json!({"name": "WARDEN_TEST_ROTATED"});

    let before = answered(&d, "echo-env", name.clone()).await;
    assert_eq!(
        before.content, "[redacted:WARDEN_TEST_ROTATED]",
        "{before:?}"
    );
    let listed = answered(&d, "list", json!({"path": "/data"})).await;
    assert_eq!(listed.content, r#"["old.txt"]"#, "{listed:?}");

    // SAFETY: as above.
    unsafe { std::env::set_var("WARDEN_TEST_ROTATED", "second-secret-value") };
    std::fs::rename(&data, bench.dir.path().join("data-old")).unwrap();
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("new.txt"), "").unwrap();

    let after = answered(&d, "echo-env", name).await;
    assert_eq!(after.content, "[redacted:WARDEN_TEST_ROTATED]", "{after:?}");
    let relisted = answered(&d, "list", json!({"path": "/data"})).await;
    assert_eq!(relisted.content, r#"["new.txt"]"#, "{relisted:?}");
}
