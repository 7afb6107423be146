//! Limits and process containment: fork bombs, CPU loops, leftovers, signals, timeouts.

use crate::common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use warden_core::ErrorKind;
use warden_test_support::assert_timed_out;

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(format!(
                    "{}: {cmdline}",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
    }
    found
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_cleaned_up() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell(
        "processes = 32\nuser = \"65533:65533\"",
        "",
        "timeout = \"3s\"",
    ));
    let started = Instant::now();
    let r = call(
        &tool,
        &limits,
        json!({"command": "b() { b | b & }; b; sleep 30"}),
    )
    .await;
    let e = r.expect_err("a fork bomb does not succeed");
    assert!(
        matches!(e.kind, ErrorKind::Timeout | ErrorKind::ExitStatus),
        "{}: {}",
        e.kind,
        e.message
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // The process limit held: the shell was refused forks.
    assert!(e.message.contains("Cannot fork"), "{}", e.message);
    // Every process of the bomb died with the call.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(processes_left(65533), 0, "bomb processes survived the call");
    // The machine still forks: the next call works.
    let (tool, limits) = place.tool(&shell("", "", ""));
    let ok = call(&tool, &limits, json!({"command": "echo alive"})).await;
    assert!(text(&ok).contains("alive"), "{}", text(&ok));
}

#[tokio::test]
async fn a_call_at_its_process_limit_leaves_a_concurrent_call_of_the_same_user_alone() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell(
        "processes = 16\nuser = \"65532:65532\"",
        "",
        "timeout = \"4s\"",
    ));
    // Holds every process it may have until its deadline.
    let hog = "python3 -c 'import os, time\n\
               for i in range(100):\n    \
                   try:\n        \
                       if os.fork() == 0: time.sleep(30); os._exit(0)\n    \
                   except OSError: pass\n\
               time.sleep(30)'";
    let bomb = call(&tool, &limits, json!({ "command": hog }));
    let neighbour = async {
        // Start once the hog holds its processes.
        tokio::time::sleep(Duration::from_millis(700)).await;
        call(
            &tool,
            &limits,
            json!({"command": "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2 & done; wait; echo all forked"}),
        )
        .await
    };
    let (bomb, neighbour) = tokio::join!(bomb, neighbour);
    assert!(bomb.is_err(), "{}", text(&bomb));
    // The kernel counts processes per user namespace: each call has its own.
    assert!(
        text(&neighbour).contains("all forked"),
        "{}",
        text(&neighbour)
    );
}

#[tokio::test]
async fn a_cpu_loop_is_killed_at_its_cpu_limit() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("cpu_time = \"1s\"", "", "timeout = \"30s\""));
    let started = Instant::now();
    let r = call(&tool, &limits, json!({"command": "while :; do :; done"})).await;
    let e = r.expect_err("the loop is killed");
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    assert!(e.message.contains("CPU time limit of 1s"), "{}", e.message);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_backgrounded_process_dies_with_the_command() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    let started = Instant::now();
    let r = call(
        &tool,
        &limits,
        json!({"command": "sleep 3171 & nohup sleep 3172 >/dev/null 2>&1 & setsid sleep 3173 & echo started"}),
    )
    .await;
    assert!(text(&r).contains("started"), "{}", text(&r));
    // The answer does not wait for the leftovers (they held no output)...
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // ...and none of them outlives the call.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in ["sleep 3171", "sleep 3172", "sleep 3173"] {
        assert!(
            processes_with(n).is_empty(),
            "{n} survived: {:?}",
            processes_with(n)
        );
    }
}

#[tokio::test]
async fn a_timeout_kills_the_tree_and_spares_the_caller() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", "timeout = \"1s\""));
    let started = Instant::now();
    let r = call(
        &tool,
        &limits,
        json!({"command": "echo before; sleep 4181 & sleep 4182; echo never"}),
    )
    .await;
    let e = r.expect_err("times out");
    assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
    assert_timed_out(&e, Duration::from_millis(1000));
    assert!(
        e.message.contains("before"),
        "partial output kept: {}",
        e.message
    );
    assert!(!e.message.contains("never"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        processes_with("sleep 418").is_empty(),
        "{:?}",
        processes_with("sleep 418")
    );
}

#[tokio::test]
async fn a_cancelled_call_leaves_nothing_running() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    // The caller gives up (a dropped future, as when an agent is interrupted).
    let r = tokio::time::timeout(
        Duration::from_millis(500),
        call(
            &tool,
            &limits,
            json!({"command": "sleep 5191 & sleep 5192"}),
        ),
    )
    .await;
    assert!(r.is_err(), "the call should still be running: {r:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        processes_with("sleep 519").is_empty(),
        "{:?}",
        processes_with("sleep 519")
    );
}

#[tokio::test]
async fn kill_minus_one_reaches_nothing_outside() {
    // A bystander running as the same user as the command, outside its sandbox.
    let mut bystander = std::process::Command::new("sleep");
    std::os::unix::process::CommandExt::uid(&mut bystander, 65534);
    let mut bystander = bystander.arg("4391").spawn().expect("spawn bystander");
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", ""));
    let r = call(
        &tool,
        &limits,
        json!({"command": "kill -9 -1; kill -9 0; kill -9 1; echo still here"}),
    )
    .await;
    let t = text(&r);
    std::thread::sleep(Duration::from_millis(100));
    let alive = bystander.try_wait().expect("wait").is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(
        alive,
        "the command killed a process outside its sandbox: {t}"
    );
}

#[tokio::test]
async fn the_environment_is_the_grants_and_nothing_else() {
    let place = Place::new();
    let (tool, limits) = place.tool(
        "[executor]\nkind = \"host\"\nname = \"env\"\nargv = [\"/usr/bin/env\"]\n\
         [grants]\nenv = { GREETING = \"hello\" }\nenv_from_host = [\"CARGO_PKG_NAME\"]\n",
    );
    // CARGO_PKG_NAME is in this test's environment (cargo sets it); HOME, PATH and the rest
    // are too, and none of them may leak.
    let out = call(&tool, &limits, json!({})).await.expect("env runs");
    let mut lines: Vec<&str> = out
        .content
        .lines()
        .filter(|l| !l.starts_with('['))
        .collect();
    lines.sort();
    assert_eq!(lines, ["CARGO_PKG_NAME=warden-host", "GREETING=hello"]);
}

#[tokio::test]
async fn a_stdout_flood_is_capped_and_the_call_ends() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", "output = \"64KiB\"\ntimeout = \"20s\""));
    let started = Instant::now();
    let r = call(
        &tool,
        &limits,
        json!({"command": "head -c 50000000 /dev/zero | tr '\\\\0' y; echo done >&2"}),
    )
    .await;
    let out = r.expect("the flood itself succeeds");
    let shell = &out.details["shell"];
    let stdout = shell["stdout"].as_str().unwrap_or_default();
    assert!(stdout.len() < 70_000, "{} bytes kept", stdout.len());
    assert_eq!(shell["truncated"], true);
    let dropped = shell["dropped_bytes"]["stdout"]
        .as_u64()
        .unwrap_or_default();
    assert_eq!(
        dropped + stdout.len() as u64,
        50_000_000,
        "every byte is counted"
    );
    assert!(out.content.contains("output truncated"), "no marker");
    assert_eq!(shell["stderr"], "done\n");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_memory_bomb_meets_its_address_space_limit() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("", "", "memory = \"128MiB\""));
    let r = call(
        &tool,
        &limits,
        json!({"command": "python3 -c 'b = bytearray(1 << 30); print(len(b))'"}),
    )
    .await;
    let e = r.expect_err("1 GiB does not fit in 128 MiB");
    assert_eq!(e.kind, ErrorKind::ExitStatus, "{}", e.message);
    assert!(e.message.contains("MemoryError"), "{}", e.message);
    // The same command with room succeeds: the limit, not python, refused it.
    let (roomy, limits) = place.tool(&shell("", "", "memory = \"2GiB\""));
    let r = call(
        &roomy,
        &limits,
        json!({"command": "python3 -c 'b = bytearray(1 << 30); print(len(b))'"}),
    )
    .await;
    assert!(text(&r).contains("1073741824"), "{}", text(&r));
}
