//! The sandbox holds: default deny, filesystem boundaries, and every limit, attacked for real
//! by components built from source (guest-sdk/fixtures/hostile).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

mod common;

use common::{Bench, call, kind};
use serde_json::json;
use std::time::{Duration, Instant};

const SECRET: &str = "warden-test-marker-secret-7f3a";

#[tokio::test]
async fn an_empty_policy_grants_no_env_no_files() {
    // SAFETY: nextest runs each test in its own process; nothing else reads the env here.
    unsafe { std::env::set_var("WARDEN_TEST_SECRET", SECRET) };
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "");
    let d = bench.dispatcher();

    let env = call(&d, "env", json!({})).await;
    assert_eq!(kind(&env), "ok", "{env:?}");
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
    // SAFETY: as above, one process per test.
    unsafe {
        std::env::set_var("WARDEN_TEST_SECRET", SECRET);
        std::env::set_var("WARDEN_TEST_GRANTED", "from-host");
    }
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
    assert_eq!(kind(&wrote), "ok", "{wrote:?}");
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
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let next = call(&d, "burn", json!({"iterations": 1000})).await;
    assert_eq!(kind(&next), "ok", "{next:?}");
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
    assert_eq!(kind(&small), "ok", "{small:?}");
}

#[tokio::test]
async fn a_memory_bomb_is_out_of_memory() {
    let bench = Bench::new();
    bench.policy("hostile.toml", "hostile", "[limits]\nmemory = \"64MiB\"");
    let d = bench.dispatcher();
    let m = call(&d, "alloc", json!({"mib": 1024})).await;
    assert_eq!(kind(&m), "out_of_memory", "{m:?}");
    let fits = call(&d, "alloc", json!({"mib": 16})).await;
    assert_eq!(kind(&fits), "ok", "{fits:?}");
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
    assert_eq!(kind(&m), "ok", "{m:?}");
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
    assert_eq!(kind(&m), "ok", "{}", &m.content[..100]);
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
