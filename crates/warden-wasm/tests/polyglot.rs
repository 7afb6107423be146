//! Tools written in Python (componentize-py) and JavaScript (componentize-js) get the same
//! schemas, grants and limits as Rust ones: the examples of guest-sdk/python and guest-sdk/js
//! and their hostile fixtures, built from source by scripts/build-polyglot.

use crate::common::{Bench, call, kind, polyglot};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// A bench with the named component (and its WIT docs) under `rest`, or `None` when the
/// toolchains are missing.
fn bench(name: &str, rest: &str) -> Option<Bench> {
    let path = polyglot(name)?;
    let lang = if name.starts_with("js") || name == "slugify" {
        "js"
    } else {
        "python"
    };
    let wit = crate::common::root().join(format!("guest-sdk/{lang}/{name}/wit"));
    let bench = Bench::new();
    std::fs::write(
        bench.toolbox.join(format!("{name}.toml")),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\nwit = {:?}\n{rest}\n",
            path.display().to_string(),
            wit.display().to_string()
        ),
    )
    .unwrap();
    Some(bench)
}

#[tokio::test]
async fn python_pure_tool_has_its_schema_and_answers() {
    let Some(b) = bench("textstats", "") else {
        return;
    };
    let toolbox = b.load().expect("loads");
    let tool = toolbox.get("stats").expect("the stats tool");
    assert_eq!(
        tool.spec.input_schema["properties"]["text"]["type"],
        "string"
    );
    assert_eq!(tool.spec.input_schema["required"], json!(["text"]));
    assert!(
        tool.spec.description.starts_with("Counts the words"),
        "WIT docs reach the description: {}",
        tool.spec.description
    );
    assert!(
        toolbox.get("exports-init").is_none(),
        "the toolchain's init is no tool"
    );
    let d = b.dispatcher();
    let m = call(
        &d,
        "stats",
        json!({"text": "the cat and the hat\nthe end", "top": 1}),
    )
    .await;
    assert_eq!(kind(&m), "success", "{m:?}");
    let r = &m.artifact.as_ref().unwrap()["result"];
    assert_eq!(r["words"], 7);
    assert_eq!(r["top-words"], json!(["the"]));
}

#[tokio::test]
async fn python_file_tool_stays_in_its_root() {
    let Some(b) = bench("notes", "") else { return };
    let ws = b.folder("ws");
    std::fs::write(b.dir.path().join("secret.txt"), "outside").unwrap();
    b.policy_at(
        "notes.toml",
        &polyglot("notes").unwrap(),
        &format!(
            "[grants]\nfs = [{{ host = {:?}, guest = \"/workspace\", access = \"read-write\" }}]",
            ws.display().to_string()
        ),
    );
    let d = b.dispatcher();
    let add = call(
        &d,
        "add-note",
        json!({"name": "a.txt", "line": "from python"}),
    )
    .await;
    assert_eq!(kind(&add), "success", "{add:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/a.txt")).unwrap(),
        "from python\n"
    );
    let read = call(&d, "read-note", json!({"name": "a.txt"})).await;
    assert_eq!(read.content, "from python\n");
    for escape in ["../../secret.txt", "/etc/passwd", "../../../etc/passwd"] {
        let m = call(&d, "read-note", json!({"name": escape})).await;
        assert_eq!(kind(&m), "tool_error", "{escape}: {m:?}");
        assert!(!m.content.contains("outside") && !m.content.contains("root:"));
    }

    let ro = Bench::new();
    let ws = ro.folder("ws");
    ro.policy_at(
        "notes.toml",
        &polyglot("notes").unwrap(),
        &format!(
            "[grants]\nfs = [{{ host = {:?}, guest = \"/workspace\", access = \"read-only\" }}]",
            ws.display().to_string()
        ),
    );
    let m = call(
        &ro.dispatcher(),
        "add-note",
        json!({"name": "b.txt", "line": "x"}),
    )
    .await;
    assert_eq!(
        kind(&m),
        "tool_error",
        "a read-only root refuses writes: {m:?}"
    );
    assert!(!ws.join("notes").exists());
}

/// An endless loop in the fixture meets a 2 s deadline; its `error_fn("kaboom")` is a trap
/// whose message holds `expected`.
async fn misbehaves(fixture: &str, error_fn: &str, expected: &str) {
    let Some(b) = bench(fixture, "[limits]\ntimeout = \"2s\"") else {
        return;
    };
    let d = b.dispatcher();
    let start = Instant::now();
    let m = call(&d, "spin", json!({})).await;
    assert_eq!(kind(&m), "timeout", "{m:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
    let m = call(&d, error_fn, json!({"message": "kaboom"})).await;
    assert_eq!(kind(&m), "trap", "{m:?}");
    assert!(m.content.contains(expected), "{m:?}");
}

#[tokio::test]
async fn python_loops_time_out_and_exceptions_are_traps_with_their_message() {
    misbehaves("pyhostile", "raise-error", "ValueError: kaboom").await;
}

#[tokio::test]
async fn javascript_pure_tool_has_its_schema_and_answers() {
    let Some(b) = bench("slugify", "") else {
        return;
    };
    let toolbox = b.load().expect("loads");
    let tool = toolbox.get("slugify").expect("the slugify tool");
    assert_eq!(
        tool.spec.input_schema["properties"]["title"]["type"],
        "string"
    );
    assert!(tool.spec.description.starts_with("Lowercases a title"));
    let d = b.dispatcher();
    let m = call(&d, "slugify", json!({"title": "Héllo, Wörld! Ça va?"})).await;
    assert_eq!(m.content, "hello-world-ca-va", "{m:?}");
    let m = call(&d, "slugify", json!({"title": "a b c d", "max-len": 3})).await;
    assert_eq!(m.content, "a-b");
}

#[tokio::test]
async fn javascript_fetch_reaches_only_granted_hosts() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nfrom-js!",
            );
        }
    });
    let grants = format!("[grants]\nnet = [\"127.0.0.1:{port}\"]\n[limits]\ntimeout = \"5s\"");
    let Some(b) = bench("jsfetch", &grants) else {
        return;
    };
    let d = b.dispatcher();
    let ok = call(
        &d,
        "fetch-text",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    )
    .await;
    assert_eq!(ok.content, "200 from-js!", "{ok:?}");
    let other = port.wrapping_add(1);
    let m = call(
        &d,
        "fetch-text",
        json!({"url": format!("http://127.0.0.1:{other}/")}),
    )
    .await;
    assert_eq!(kind(&m), "tool_error", "{m:?}");
    let details = &m.error.as_ref().unwrap().details;
    assert_eq!(details["denied_count"], 1, "{m:?}");
}

#[tokio::test]
async fn javascript_loops_time_out_and_throws_are_traps_with_their_message() {
    misbehaves("jshostile", "throw-error", "kaboom").await;
}
