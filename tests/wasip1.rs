//! WASI 0.1 command modules through the `warden` binary: `warden add` of the Go example tool
//! (guest-sdk/go, built from source by scripts/build-polyglot) and of modules written here in
//! the text format, then `warden call`, `warden run`, `warden audit` and `warden pin`.

use crate::common::toolbox::{Env, json, path_str};
use crate::common::{polyglot, root};

use std::path::PathBuf;

/// A WASI 0.1 command written as text, as a binary module in `env`'s temp folder.
fn text_module(env: &Env, name: &str, text: &str) -> PathBuf {
    let path = env.dir.path().join(format!("{name}.wasm"));
    std::fs::write(&path, wat::parse_str(text).unwrap()).unwrap();
    path
}

/// A command that writes `text` (no quotes or backslashes) to stdout and exits with `code`.
fn command(text: &str, code: u32) -> String {
    format!(
        r#"(module
             (import "wasi_snapshot_preview1" "fd_write"
               (func $fd_write (param i32 i32 i32 i32) (result i32)))
             (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
             (memory (export "memory") 1)
             (data (i32.const 16) "{text}")
             (func (export "_start")
               (i32.store (i32.const 0) (i32.const 16))
               (i32.store (i32.const 4) (i32.const {len}))
               (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
               (call $proc_exit (i32.const {code}))))"#,
        len = text.len()
    )
}

#[test]
fn the_go_tool_is_added_pinned_and_answers_through_call_and_run() {
    let (Some(wordcount), Some(hostile)) = (polyglot("gowordcount"), polyglot("gohostile")) else {
        return;
    };
    let env = Env::new();
    let added = env.ok(&["add", path_str(&wordcount)]);
    assert!(added.contains("tool gowordcount"), "{added}");
    // The store keeps the module as its author built it, pinned by its own sha256.
    let sha = warden_wasm::sha256_file(&wordcount).unwrap();
    let policy = std::fs::read_to_string(env.toolbox().join("gowordcount.toml")).unwrap();
    assert!(policy.contains(&format!("sha256 = \"{sha}\"")), "{policy}");
    let stored = env.dir.path().join(format!("home/store/{sha}.wasm"));
    assert_eq!(
        std::fs::read(stored).unwrap(),
        std::fs::read(&wordcount).unwrap()
    );

    let out = env.ok(&[
        "call",
        "gowordcount",
        r#"{"args": ["-w"], "stdin": "one two three"}"#,
    ]);
    let message = json(&out);
    assert_eq!(message["status"], "success", "{message}");
    assert_eq!(message["content"], "3\n");

    env.ok(&["add", path_str(&hostile)]);
    let out = env.warden(&["call", "gohostile", r#"{"args": ["exit", "42"]}"#]);
    assert_eq!(out.status.code(), Some(1), "a failed call");
    let message = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(message["error"]["kind"], "exit_status", "{message}");
    assert_eq!(message["error"]["details"]["exit_code"], 42, "{message}");

    let turn = r#"{"role": "assistant", "content": null, "tool_calls": [
        {"id": "g1", "type": "function", "function": {"name": "gowordcount", "arguments": "{\"stdin\": \"a b\\nc\\n\"}"}},
        {"id": "g2", "type": "function", "function": {"name": "gowordcount", "arguments": "{\"args\": 5}"}},
        {"id": "g3", "type": "function", "function": {"name": "gowordcount", "arguments": "{\"args\": [\"--bogus\"]}"}},
        {"id": "g4", "type": "function", "function": {"name": "gowordcount", "arguments": "{\"args\": [\"-c\"], \"stdin\": \"abcd\"}"}}
    ]}"#;
    let file = env.dir.path().join("turn.json");
    std::fs::write(&file, turn).unwrap();
    let out = env.warden(&["run", path_str(&file)]);
    assert_eq!(out.status.code(), Some(1), "some calls failed");
    let messages = json(&String::from_utf8_lossy(&out.stdout));
    let ids: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["g1", "g2", "g3", "g4"]);
    assert_eq!(messages[0]["content"], "2 3 6\n");
    assert_eq!(messages[1]["error"]["kind"], "invalid_arguments");
    assert_eq!(messages[2]["error"]["kind"], "exit_status");
    assert_eq!(messages[2]["error"]["details"]["exit_code"], 2);
    assert_eq!(messages[3]["content"], "4\n");

    let audit = env.ok(&["audit"]);
    assert!(
        audit.contains("a WASI 0.1 module run through the preview-1 adapter"),
        "{audit}"
    );
    let log = std::fs::read_to_string(env.dir.path().join("home/calls.jsonl")).unwrap();
    let calls = log.lines().filter(|l| json(l)["event"] == "call").count();
    assert_eq!(calls, 6, "every call is logged: {log}");

    // The example policy of policies/go runs the same tool.
    let example = root().join("policies/go");
    let out = env.ok(&[
        "--toolbox",
        path_str(&example),
        "call",
        "gowordcount",
        r#"{"args": ["-l"], "stdin": "a\nb\n"}"#,
    ]);
    assert_eq!(json(&out)["content"], "2\n");
}

#[test]
fn add_refuses_a_module_importing_an_unknown_function_naming_it_and_keeps_nothing() {
    let env = Env::new();
    let module = text_module(
        &env,
        "spawner",
        r#"(module
             (import "wasi" "thread-spawn" (func (param i32) (result i32)))
             (memory (export "memory") 1)
             (func (export "_start")))"#,
    );
    let out = env.warden(&["add", path_str(&module)]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spawner.wasm"), "{stderr}");
    assert!(stderr.contains("`wasi::thread-spawn`"), "{stderr}");
    let kept: Vec<_> = std::fs::read_dir(env.dir.path().join("home/store"))
        .into_iter()
        .flatten()
        .collect();
    assert!(kept.is_empty(), "the refused module was kept: {kept:?}");
    assert!(!env.toolbox().join("spawner.toml").exists());
}

#[test]
fn net_grants_on_a_module_are_refused_at_load_naming_the_line() {
    let env = Env::new();
    let module = text_module(&env, "hello", &command("hello", 0));
    env.ok(&["add", path_str(&module)]);
    let policy = env.toolbox().join("hello.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(
        &policy,
        text.replace("[grants]\n", "[grants]\nnet = [\"api.github.com:443\"]\n"),
    )
    .unwrap();
    let line = std::fs::read_to_string(&policy)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("net ="))
        .unwrap()
        + 1;
    let out = env.warden(&["--strict", "tools"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("hello.toml:{line}")), "{stderr}");
    assert!(stderr.contains("WASI 0.1 has no sockets"), "{stderr}");
}

#[test]
fn a_rebuilt_module_needs_a_new_pin_and_its_exit_code_reaches_the_caller() {
    let env = Env::new();
    let module = env.dir.path().join("greet.wasm");
    std::fs::copy(text_module(&env, "first", &command("hello", 0)), &module).unwrap();
    env.ok(&["add", path_str(&module)]);
    assert_eq!(json(&env.ok(&["call", "greet", "{}"]))["content"], "hello");

    std::fs::copy(text_module(&env, "second", &command("bye", 3)), &module).unwrap();
    let out = env.warden(&["--strict", "tools"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("greet.toml") && err.contains("warden pin"),
        "{err}"
    );
    env.ok(&["pin", "greet"]);
    let out = env.warden(&["call", "greet", "{}"]);
    let message = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(message["error"]["details"]["exit_code"], 3, "{message}");
    assert_eq!(message["error"]["details"]["stdout"], "bye", "{message}");

    let audit = json(&env.ok(&["audit", "--json"]));
    let executor = &audit["policies"][0]["executor"];
    assert_eq!(executor["form"], "wasi-0.1-module", "{executor}");
    assert_eq!(
        executor["sha256"],
        warden_wasm::sha256_file(&module).unwrap().as_str()
    );
}
