//! WASI 0.1 command modules are command tools held like components: Go's (guest-sdk/go, built
//! from source by scripts/build-polyglot) beside the Rust `wordcount` component, and small
//! modules written here in the text format, which need no toolchain.

use crate::common::{Bench, SECRET, call, host_vars, kind, polyglot};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use warden_core::{ToolMessage, Toolbox};
use warden_wasm::{Artifacts, WasmBackend};

/// Writes a WASI 0.1 command written as text into `bench`'s folder, as a binary module.
fn module(bench: &Bench, name: &str, text: &str) -> PathBuf {
    let path = bench.dir.path().join(format!("{name}.wasm"));
    std::fs::write(&path, wat::parse_str(text).unwrap()).unwrap();
    path
}

/// Writes `message` to stderr, then exits with `code`: everything a command's failure shows.
fn failing(message: &str, code: i32) -> String {
    format!(
        r#"(module
             (import "wasi_snapshot_preview1" "fd_write"
               (func $fd_write (param i32 i32 i32 i32) (result i32)))
             (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
             (memory (export "memory") 1)
             (data (i32.const 16) "{message}")
             (func (export "_start")
               (i32.store (i32.const 0) (i32.const 16))
               (i32.store (i32.const 4) (i32.const {len}))
               (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
               (call $proc_exit (i32.const {code}))))"#,
        len = message.len()
    )
}

/// A command that prints `hello` and returns from `_start`.
const HELLO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

fn error_detail<'a>(m: &'a ToolMessage, key: &str) -> &'a Value {
    &m.error.as_ref().expect("an error").details[key]
}

#[tokio::test]
async fn a_module_answers_on_stdout_and_its_exit_code_survives() {
    let bench = Bench::new();
    bench.policy_at("hello.toml", &module(&bench, "hello", HELLO), "");
    let failing = failing("no such thing\\n", 7);
    bench.policy_at("seven.toml", &module(&bench, "seven", &failing), "");
    let d = bench.dispatcher();

    let m = call(&d, "hello", json!({})).await;
    assert_eq!(kind(&m), "success", "{m:?}");
    assert_eq!(m.content, "hello\n");

    let m = call(&d, "seven", json!({"args": ["x"], "stdin": "ignored"})).await;
    assert_eq!(kind(&m), "exit_status", "{m:?}");
    assert_eq!(error_detail(&m, "exit_code"), 7, "{m:?}");
    assert!(
        m.content.contains("status 7: no such thing"),
        "{}",
        m.content
    );
}

#[tokio::test]
async fn a_module_importing_what_warden_lacks_is_refused_naming_the_import() {
    let bench = Bench::new();
    let text = r#"(module
      (import "wasi_snapshot_preview1" "fd_write"
        (func (param i32 i32 i32 i32) (result i32)))
      (import "env" "host_log" (func (param i32 i32)))
      (memory (export "memory") 1)
      (func (export "_start")))"#;
    bench.policy_at("logger.toml", &module(&bench, "logger", text), "");
    let err = bench.load().err().expect("the load fails").to_string();
    assert!(err.contains("logger.toml"), "{err}");
    assert!(err.contains("`env::host_log`"), "{err}");
    assert!(err.contains("which warden does not provide"), "{err}");
}

#[tokio::test]
async fn a_module_without_start_is_no_command_tool() {
    let bench = Bench::new();
    let text = r#"(module (memory (export "memory") 1) (func (export "add")))"#;
    bench.policy_at("library.toml", &module(&bench, "library", text), "");
    let err = bench.load().err().expect("the load fails").to_string();
    assert!(err.contains("no `_start`"), "{err}");
}

#[tokio::test]
async fn network_grants_are_refused_for_a_module_at_their_line() {
    for (grant, line) in [("net = [\"api.example.org:443\"]", 5), ("dns = true", 5)] {
        let bench = Bench::new();
        bench.policy_at(
            "hello.toml",
            &module(&bench, "hello", HELLO),
            &format!("[grants]\n{grant}\n"),
        );
        let err = bench.load().err().expect("the load fails").to_string();
        assert!(
            err.contains(&format!("hello.toml:{line}")),
            "{grant}: {err}"
        );
        assert!(err.contains("WASI 0.1 has no sockets"), "{grant}: {err}");
    }
}

#[tokio::test]
async fn a_module_is_wrapped_and_compiled_once_then_loaded_from_the_cache() {
    let bench = Bench::new();
    bench.policy_at("hello.toml", &module(&bench, "hello", HELLO), "");
    let artifacts = Artifacts {
        store: bench.dir.path().join("store"),
        cache: bench.dir.path().join("cache"),
    };
    let compiles = Arc::new(AtomicUsize::new(0));
    let load = || {
        let counter = compiles.clone();
        let backend = WasmBackend::new(artifacts.clone()).on_compile(Arc::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        Toolbox::load(&bench.toolbox, &[&backend], &[]).expect("loads")
    };
    load();
    let toolbox = load();
    assert_eq!(compiles.load(Ordering::SeqCst), 1, "compiled once");
    let d = warden_core::Dispatcher::new(Arc::new(toolbox));
    let m = call(&d, "hello", json!({})).await;
    assert_eq!(m.content, "hello\n", "{m:?}");
}

/// A bench with the Go fixtures, `gohostile` under `rest`; `None` when Go is not installed.
fn go(rest: &str) -> Option<Bench> {
    let hostile = polyglot("gohostile")?;
    let bench = Bench::new();
    bench.policy_at("gohostile.toml", &hostile, rest);
    bench.policy_at("gowordcount.toml", &polyglot("gowordcount")?, "");
    Some(bench)
}

#[tokio::test]
async fn go_wordcount_counts_like_the_rust_component() {
    let Some(bench) = go("") else { return };
    bench.policy("wordcount.toml", "wordcount", "");
    let d = bench.dispatcher();
    let text = "the cat sat\non the mat\n\n  and  the hat ";
    for args in [json!([]), json!(["-w"]), json!(["-l", "-c"])] {
        let input = json!({"args": args, "stdin": text});
        let go = call(&d, "gowordcount", input.clone()).await;
        let rust = call(&d, "wordcount", input).await;
        assert_eq!(kind(&go), "success", "{go:?}");
        assert_eq!(go.content, rust.content, "{args}");
    }
    let go = call(&d, "gowordcount", json!({"args": ["-w"], "stdin": text})).await;
    assert_eq!(go.content, "9\n");

    let bad = call(&d, "gowordcount", json!({"args": ["--nope"]})).await;
    assert_eq!(kind(&bad), "exit_status", "{bad:?}");
    assert_eq!(error_detail(&bad, "exit_code"), 2);
    assert!(
        bad.content.contains("unknown flag --nope"),
        "{}",
        bad.content
    );
    let missing = call(&d, "gowordcount", json!({"args": ["--file", "/x"]})).await;
    assert_eq!(error_detail(&missing, "exit_code"), 1, "{missing:?}");
    let invalid = call(&d, "gowordcount", json!({"args": "-w"})).await;
    assert_eq!(kind(&invalid), "invalid_arguments", "{invalid:?}");
}

#[tokio::test]
async fn go_exit_codes_survive() {
    let Some(bench) = go("") else { return };
    let d = bench.dispatcher();
    for code in [1, 3, 42, 125, 255] {
        let m = call(&d, "gohostile", json!({"args": ["exit", code.to_string()]})).await;
        assert_eq!(kind(&m), "exit_status", "{m:?}");
        assert_eq!(error_detail(&m, "exit_code"), code, "{m:?}");
    }
    let m = call(&d, "gohostile", json!({"args": ["exit", "0"]})).await;
    assert_eq!(kind(&m), "success", "{m:?}");
}

#[tokio::test]
async fn a_go_loop_meets_its_deadline_and_the_host_goes_on() {
    let Some(bench) = go("[limits]\ntimeout = \"1s\"") else {
        return;
    };
    let d = bench.dispatcher();
    let start = Instant::now();
    let m = call(&d, "gohostile", json!({"args": ["spin"]})).await;
    assert_eq!(kind(&m), "timeout", "{m:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let next = call(&d, "gowordcount", json!({"stdin": "a b"})).await;
    assert_eq!(next.content, "0 2 3\n", "{next:?}");
}

#[tokio::test]
async fn a_go_allocation_without_bound_meets_its_memory_limit() {
    let Some(bench) = go("[limits]\nmemory = \"64MiB\"") else {
        return;
    };
    let d = bench.dispatcher();
    let m = call(&d, "gohostile", json!({"args": ["alloc"]})).await;
    // Go's runtime checks a refused `memory.grow` and exits 2 where others trap: the limit
    // is still why, and said so.
    assert_eq!(kind(&m), "out_of_memory", "{m:?}");
    assert!(m.content.contains("64 MiB"), "{}", m.content);
    assert_eq!(error_detail(&m, "exit_code"), 2, "{m:?}");
    let peak = error_detail(&m, "usage")["peak_memory_bytes"]
        .as_u64()
        .unwrap();
    assert!(peak <= 64 << 20, "peak {peak}");
}

#[tokio::test]
async fn a_go_tool_reads_and_writes_only_inside_its_roots() {
    let dir = tempfile::tempdir().unwrap();
    let (ro, rw, outside) = (
        dir.path().join("ro"),
        dir.path().join("rw"),
        dir.path().join("outside"),
    );
    for d in [&ro, &rw, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(ro.join("hello.txt"), "hi").unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ro.join("link")).unwrap();
    let Some(bench) = go(&format!(
        "[grants]\nfs = [\n {{ host = {:?}, guest = \"/ro\", access = \"read-only\" }},\n \
         {{ host = {:?}, guest = \"/rw\", access = \"read-write\" }},\n]",
        ro.display().to_string(),
        rw.display().to_string()
    )) else {
        return;
    };
    let d = bench.logging_dispatcher();
    let read = |path: &str| {
        let d = &d;
        let path = path.to_owned();
        async move { call(d, "gohostile", json!({"args": ["read", path]})).await }
    };
    let ok = read("/ro/hello.txt").await;
    assert_eq!(ok.content, "hi", "{ok:?}");
    let secret = outside.join("secret.txt").display().to_string();
    for escape in [
        "/etc/passwd",
        "/ro/../outside/secret.txt",
        "/rw/../../outside/secret.txt",
        "/ro/link",
        &secret,
    ] {
        let m = read(escape).await;
        assert_eq!(kind(&m), "exit_status", "{escape} escaped: {m:?}");
        assert!(
            !format!("{m:?}").contains(SECRET),
            "{escape} leaked the secret"
        );
    }

    let wrote = call(
        &d,
        "gohostile",
        json!({"args": ["write", "/rw/new.txt", "data"]}),
    )
    .await;
    assert_eq!(kind(&wrote), "success", "{wrote:?}");
    assert_eq!(std::fs::read_to_string(rw.join("new.txt")).unwrap(), "data");
    let refused = call(
        &d,
        "gohostile",
        json!({"args": ["write", "/ro/hello.txt", "x"]}),
    )
    .await;
    assert_eq!(kind(&refused), "exit_status", "{refused:?}");
    assert_eq!(std::fs::read_to_string(ro.join("hello.txt")).unwrap(), "hi");

    // The call log names the roots the calls opened, as for any component.
    let log = std::fs::read_to_string(bench.call_log()).unwrap_or_default();
    assert!(log.contains(r#""roots_opened":["/ro"]"#), "{log}");
}

#[tokio::test]
async fn a_go_tool_sees_exactly_the_granted_env() {
    host_vars();
    let Some(bench) =
        go("[grants]\nenv = { GREETING = \"hello\" }\nenv_from_host = [\"WARDEN_TEST_GRANTED\"]")
    else {
        return;
    };
    let d = bench.dispatcher();
    let env = |name: &'static str| {
        let d = &d;
        async move { call(d, "gohostile", json!({"args": ["env", name]})).await }
    };
    assert_eq!(env("GREETING").await.content, "hello\n");
    // The guest saw the host's value; the model sees it redacted.
    assert_eq!(
        env("WARDEN_TEST_GRANTED").await.content,
        "[redacted:WARDEN_TEST_GRANTED]\n"
    );
    let secret = env("WARDEN_TEST_SECRET").await;
    assert_eq!(kind(&secret), "exit_status", "{secret:?}");
    assert!(!format!("{secret:?}").contains(SECRET));
}

#[tokio::test]
async fn a_go_tool_meets_its_fuel_and_output_limits() {
    let Some(bench) = go("[limits]\nfuel = 50_000_000\noutput = \"64KiB\"") else {
        return;
    };
    let d = bench.dispatcher();
    let m = call(&d, "gohostile", json!({"args": ["spin"]})).await;
    assert_eq!(kind(&m), "out_of_fuel", "{m:?}");
    let m = call(&d, "gohostile", json!({"args": ["flood", "1000000"]})).await;
    assert!(
        m.content.len() < 70 * 1024,
        "kept {} bytes",
        m.content.len()
    );
    assert!(
        m.content.contains("more bytes not shown"),
        "{}",
        &m.content[m.content.len().saturating_sub(200)..]
    );
}
