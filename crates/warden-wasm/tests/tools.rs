//! Tools as a model sees them: names, schemas and descriptions from real components, argument
//! errors with paths, results and errors, commands, and bad components and policies.

use crate::common::{Bench, call, kind, root, wasm};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use warden_core::{ToolCall, Toolbox};
use warden_wasm::WasmBackend;

#[tokio::test]
async fn exports_become_tools_with_schemas_and_docs() {
    let bench = Bench::new();
    let wit = root().join("guest-sdk/tools/units/wit");
    bench.policy(
        "units.toml",
        "units",
        &format!("wit = {:?}", wit.display().to_string()),
    );
    bench.policy("kitchen.toml", "kitchen", "");
    let toolbox = bench.load().unwrap();
    let mut names = toolbox.names();
    names.sort();
    assert!(
        names.contains(&"convert") && names.contains(&"add"),
        "{names:?}"
    );
    assert!(
        names.contains(&"types-echo"),
        "interface functions are <interface>-<fn>: {names:?}"
    );

    let convert = &toolbox.get("convert").unwrap().spec;
    assert!(
        convert.description.starts_with("Convert"),
        "{}",
        convert.description
    );
    let s = &convert.input_schema;
    assert_eq!(s["required"], json!(["quantity", "to"]));
    assert!(
        s["properties"]["to"]["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{s}"
    );
    assert_eq!(
        s["properties"]["to"]["enum"],
        json!(["meter", "kilometer", "foot", "inch", "mile"])
    );
    assert_eq!(
        s["properties"]["quantity"]["properties"]["value"]["type"],
        "number"
    );
    assert_eq!(convert.output_schema.as_ref().unwrap()["type"], "number");

    let maybe = &toolbox.get("types-maybe").unwrap().spec;
    assert_eq!(
        maybe.input_schema["required"],
        json!(["a"]),
        "an option is optional"
    );
    assert_eq!(
        maybe.input_schema["properties"]["a"]["maximum"],
        json!(u64::MAX)
    );
    assert!(
        maybe.description.contains("maybe"),
        "a generated description: {}",
        maybe.description
    );
}

#[tokio::test]
async fn values_round_trip_through_every_type() {
    let bench = Bench::new();
    bench.policy("kitchen.toml", "kitchen", "");
    let d = bench.dispatcher();
    let everything = json!({
        "a": 255, "b": -32768, "c": 4294967295u64, "d": i64::MIN, "e": 1.5, "f": -2.25,
        "g": true, "h": "é", "i": "text", "j": ["x", "y"], "k": [7, "seven"], "l": 3,
        "m": "blue", "n": ["read", "exec"], "o": {"rect": [2.0, 3.0]}
    });
    let m = call(&d, "types-echo", json!({"value": everything})).await;
    assert_eq!(kind(&m), "success", "{m:?}");
    assert_eq!(m.artifact.unwrap()["result"], everything);

    let m = call(&d, "types-maybe", json!({"a": 5})).await;
    assert_eq!(m.content, "5:none");
    let m = call(&d, "types-maybe", json!({"a": 5, "b": "x"})).await;
    assert_eq!(m.content, "5:x");
    let m = call(&d, "types-check", json!({"ok": true})).await;
    assert_eq!(m.content, "42");
    let m = call(&d, "types-check", json!({"ok": false})).await;
    assert_eq!(
        kind(&m),
        "tool_error",
        "a result's err is an error, not a success"
    );
    assert!(m.content.contains("not ok"), "{}", m.content);
    let m = call(&d, "types-nested", json!({"x": ["red", null]})).await;
    assert_eq!(
        m.artifact.unwrap()["result"],
        json!([{"ok": "red"}, {"err": "none"}])
    );
}

#[tokio::test]
async fn bad_arguments_are_answered_with_every_path() {
    let bench = Bench::new();
    bench.policy("units.toml", "units", "");
    bench.policy("kitchen.toml", "kitchen", "");
    let d = bench.dispatcher();

    let m = d
        .call(ToolCall {
            id: "1".into(),
            name: "add".into(),
            arguments: "{\"a\": 1,".into(),
        })
        .await;
    assert_eq!(kind(&m), "malformed_arguments", "{m:?}");

    let m = call(
        &d,
        "convert",
        json!({"quantity": {"value": "five", "unit": "yard", "extra": 1}}),
    )
    .await;
    assert_eq!(kind(&m), "invalid_arguments", "{m:?}");
    for path in [
        "/quantity/value",
        "/quantity/unit",
        "/quantity/extra",
        "/to",
    ] {
        assert!(
            m.content.contains(path),
            "{path} missing from: {}",
            m.content
        );
    }
    let m = call(&d, "add", json!({"a": 1, "b": 2, "c": 3})).await;
    assert!(m.content.contains("/c"), "{}", m.content);
    let m = call(
        &d,
        "types-limits",
        json!({"a": 128, "b": -1, "c": 1.5, "d": "1"}),
    )
    .await;
    for path in ["/a", "/b", "/c", "/d"] {
        assert!(
            m.content.contains(path),
            "{path} missing from: {}",
            m.content
        );
    }
    let m = call(&d, "add", json!([1, 2])).await;
    assert_eq!(kind(&m), "invalid_arguments", "{m:?}");
    let m = call(&d, "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(m.content, "5", "good calls still work: {m:?}");
}

#[tokio::test]
async fn a_command_component_is_a_tool() {
    let bench = Bench::new();
    bench.policy("wordcount.toml", "wordcount", "name = \"wc\"");
    let d = bench.dispatcher();
    let m = call(&d, "wc", json!({"stdin": "one two\nthree\n"})).await;
    assert_eq!(kind(&m), "success", "{m:?}");
    let counts: Vec<&str> = m.content.split_whitespace().collect();
    assert_eq!(counts, ["2", "3", "14"]);
    let m = call(&d, "wc", json!({"args": ["-w"], "stdin": "a b c"})).await;
    assert_eq!(m.content.trim(), "3");
    let m = call(&d, "wc", json!({"args": ["--bogus"]})).await;
    assert_eq!(kind(&m), "exit_status", "{m:?}");
    let e = m.error.unwrap();
    // WASI 0.2's `exit` carries only success or failure: any non-zero code arrives as 1.
    assert_eq!(e.details["exit_code"], 1);
    assert!(e.message.contains("unknown flag"), "{}", e.message);
    let m = call(&d, "wc", json!({"args": "-w"})).await;
    assert_eq!(kind(&m), "invalid_arguments");
}

#[tokio::test]
async fn unknown_tools_name_the_valid_ones() {
    let bench = Bench::new();
    bench.policy("units.toml", "units", "");
    let d = bench.dispatcher();
    let m = call(&d, "convrt", json!({})).await;
    assert_eq!(kind(&m), "unknown_tool");
    assert!(
        m.content.contains("Did you mean `convert`"),
        "{}",
        m.content
    );
    assert!(m.content.contains("add, convert"), "{}", m.content);
}

#[test]
fn broken_components_and_policies_are_load_errors_naming_the_file() {
    let bench = Bench::new();
    let corrupt = bench.dir.path().join("corrupt.wasm");
    std::fs::write(&corrupt, b"\0asm\x0d\0\x01\0garbage").unwrap();
    std::fs::write(
        bench.toolbox.join("corrupt.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            corrupt.display().to_string()
        ),
    )
    .unwrap();
    let err = bench.load().err().unwrap().to_string();
    assert!(
        err.contains("corrupt.toml") && err.contains("not a valid WebAssembly component"),
        "{err}"
    );
    std::fs::remove_file(bench.toolbox.join("corrupt.toml")).unwrap();

    std::fs::write(
        bench.toolbox.join("missing.toml"),
        "[executor]\nkind = \"wasm\"\ncomponent = \"nowhere.wasm\"\n",
    )
    .unwrap();
    let err = bench.load().err().unwrap().to_string();
    assert!(
        err.contains("missing.toml:3") && err.contains("does not exist"),
        "{err}"
    );
    std::fs::remove_file(bench.toolbox.join("missing.toml")).unwrap();

    bench.policy(
        "typo.toml",
        "units",
        "[limits]\ntimeout = \"1s\"\nmemroy = \"1MiB\"",
    );
    let err = bench.load().err().unwrap().to_string();
    assert!(
        err.contains("typo.toml:6") && err.contains("unknown field `memroy`"),
        "{err}"
    );
    std::fs::remove_file(bench.toolbox.join("typo.toml")).unwrap();

    bench.policy("a.toml", "units", "");
    bench.policy("b.toml", "units", "");
    let err = bench.load().err().unwrap().to_string();
    assert!(
        err.contains("a.toml") && err.contains("b.toml") && err.contains("two tools are named"),
        "{err}"
    );
}

#[test]
fn pins_are_checked_and_compiled_code_is_reused() {
    let bench = Bench::new();
    let copy = bench.dir.path().join("units.wasm");
    std::fs::copy(wasm("units"), &copy).unwrap();
    let sha = warden_wasm::sha256_file(&copy).unwrap();
    let policy = bench.toolbox.join("units.toml");
    std::fs::write(
        &policy,
        format!("[executor]\nkind = \"wasm\"\ncomponent = \"../units.wasm\"\nsha256 = \"{sha}\"\n"),
    )
    .unwrap();
    let mut artifacts = bench.artifacts.clone();
    artifacts.cache = bench.dir.path().join("cache");
    let compiles = Arc::new(AtomicUsize::new(0));
    let load = || {
        let counter = compiles.clone();
        let backend = WasmBackend::new(artifacts.clone()).on_compile(Arc::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        Toolbox::load(&bench.toolbox, &[&backend], &[])
    };
    load().unwrap();
    load().unwrap();
    assert_eq!(
        compiles.load(Ordering::SeqCst),
        1,
        "the second load compiled again"
    );

    // A pinned component that is gone still runs from the store.
    std::fs::remove_file(&copy).unwrap();
    load().unwrap();
    // A changed component refuses to run.
    std::fs::copy(wasm("trivial"), &copy).unwrap();
    let err = load().err().unwrap().to_string();
    assert!(
        err.contains("units.toml:4") && err.contains("warden pin"),
        "{err}"
    );
}
