//! The `warden` binary end to end: add, pin, tools, call, audit, and the compile cache shared
//! between processes.

use crate::common::toolbox::{Env, json, path_str};
use crate::common::{answered_while_stopping, root, wasm};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A host value granted by name: the audit may name it, never show it.
const AUDIT_SECRET: &str = "audit-secret-value-91c2";

/// A temp toolbox and home, with wasm's logs on and the audit's secret in the environment.
fn cli_env() -> Env {
    Env::new()
        .var("RUST_LOG", "warden_wasm=info")
        .var("WARDEN_AUDIT_SECRET", AUDIT_SECRET)
}

#[test]
fn add_writes_a_pinned_policy_and_the_tool_can_be_called() {
    let env = cli_env();
    let wit = root().join("guest-sdk/tools/units/wit");
    env.ok(&["add", path_str(&wasm("units")), "--wit", path_str(&wit)]);
    let policy = std::fs::read_to_string(env.toolbox().join("units.toml")).unwrap();
    let sha = warden_sha(&wasm("units"));
    assert!(policy.contains(&format!("sha256 = \"{sha}\"")), "{policy}");
    assert!(!policy.contains("\nfs ="), "nothing is granted: {policy}");
    assert!(
        env.dir
            .path()
            .join(format!("home/store/{sha}.wasm"))
            .is_file()
    );

    let tools = json(&env.ok(&["tools", "--json"]));
    let convert = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "convert")
        .unwrap();
    assert!(
        convert["description"]
            .as_str()
            .unwrap()
            .starts_with("Convert")
    );
    assert_eq!(convert["input_schema"]["type"], "object");

    let out = env.ok(&[
        "call",
        "convert",
        r#"{"quantity": {"value": 1, "unit": "kilometer"}, "to": "meter"}"#,
    ]);
    let message = json(&out);
    assert_eq!(message["type"], "tool");
    assert_eq!(message["status"], "success");
    assert_eq!(message["content"], "1000.0");

    let out = env.warden(&["call", "convert", "{not json", "--format", "openai"]);
    assert_eq!(out.status.code(), Some(1));
    let message = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(message["role"], "tool");
    assert_eq!(message["error"]["kind"], "malformed_arguments");

    let again = env.warden(&["add", path_str(&wasm("units"))]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
}

#[test]
fn a_wasm_tool_is_called_not_execd() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("units"))]);
    let out = env.warden(&["exec", "convert", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`convert` is a wasm tool"), "{stderr}");
    assert!(stderr.contains("warden call convert"), "{stderr}");
    assert!(stderr.contains("no docker or host tool"), "{stderr}");
}

#[test]
fn add_refuses_what_is_no_tool_and_keeps_nothing_of_it() {
    let env = cli_env();
    let store = env.dir.path().join("home/store");
    let cases: [(&str, &[u8], &str); 3] = [
        ("text.wasm", b"not WebAssembly at all", "magic bytes"),
        // A core module, but no WASI 0.1 command.
        ("module.wasm", b"\0asm\x01\0\0\0", "no `_start`"),
        // A component's header, and nothing a component needs after it.
        ("broken.wasm", b"\0asm\x0d\0\x01\0\xff\xff", "not a valid"),
    ];
    for (name, bytes, says) in cases {
        let file = env.dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let out = env.warden(&["add", path_str(&file)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains(name) && stderr.contains(says),
            "{name}: {stderr}"
        );
        let kept: Vec<_> = std::fs::read_dir(&store).into_iter().flatten().collect();
        assert!(kept.is_empty(), "{name} left {kept:?} in the store");
        assert!(!env.toolbox().join(name.replace(".wasm", ".toml")).exists());
    }
}

/// One broken policy in a toolbox: every other tool is served, the broken one is named once
/// with its file, line and fix by every command, and `--strict` refuses the whole toolbox.
/// `warden call` of one tool loads the other wasm policies' components only until what each
/// serves is known (recorded at a load), and again once a policy or its component changes.
#[test]
fn a_call_loads_only_the_component_that_serves_it_once_the_others_are_known() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("units"))]);
    env.ok(&["add", path_str(&wasm("wordcount"))]);
    let cache = env.dir.path().join("home/cache");
    // The compiled components in the cache, emptied: one comes back where it is loaded.
    let compiled = || {
        let entries = std::fs::read_dir(&cache).unwrap().flatten();
        let found = entries.filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"));
        found.map(|e| e.path()).collect::<Vec<_>>()
    };
    let empty = || {
        compiled()
            .iter()
            .for_each(|p| std::fs::remove_file(p).unwrap())
    };
    let add = ["call", "add", r#"{"a": 1, "b": 2}"#];
    assert_eq!(json(&env.ok(&add))["content"], "3");
    empty();
    assert_eq!(json(&env.ok(&add))["content"], "3");
    assert_eq!(compiled().len(), 1, "wordcount's component was loaded");
    let count = ["call", "wordcount", r#"{"args": ["-w"], "stdin": "a b c"}"#];
    assert_eq!(json(&env.ok(&count))["status"], "success");
    assert_eq!(compiled().len(), 2);
    // A policy changed since is loaded again to learn what it serves.
    empty();
    let policy = env.toolbox().join("wordcount.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, format!("{text}\n# edited\n")).unwrap();
    assert_eq!(json(&env.ok(&add))["content"], "3");
    assert_eq!(compiled().len(), 2, "the edited policy was not loaded");
    // A tool no policy serves: the whole toolbox names them all.
    let out = env.warden(&["call", "nosuch", "{}"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("add, convert, wordcount"), "{text}");
}

#[test]
fn a_broken_policy_is_left_out_and_named_and_strict_refuses_the_toolbox() {
    // warden's own log level (warn), which names each policy left out on stderr.
    let env = Env::new();
    std::fs::write(
        env.toolbox().join("x.toml"),
        "[executor]\nkind = \"host\"\nname = \"x\"\nargv = [\"/bin/true\"]\nbogus = 1\n",
    )
    .unwrap();
    // A wasm tool whose WIT folder is missing: "build it", says the error.
    std::fs::write(
        env.toolbox().join("units.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\nwit = \"../no-such-wit\"\n",
            path_str(&wasm("units"))
        ),
    )
    .unwrap();
    std::fs::write(
        env.toolbox().join("trivial.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            path_str(&wasm("trivial"))
        ),
    )
    .unwrap();
    let out = env.warden(&["tools"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("add ")),
        "the working tool is served: {stdout}"
    );
    let listed = stdout.split("not loaded").nth(1).unwrap_or_default();
    assert_eq!(
        listed.matches("unknown field `bogus`").count(),
        1,
        "{stdout}"
    );
    assert_eq!(listed.matches("x.toml:5:").count(), 1, "{stdout}");
    assert!(listed.contains("no-such-wit"), "{stdout}");
    assert_eq!(stderr.matches("x.toml:5:").count(), 1, "{stderr}");

    let called = env.warden(&["call", "add", r#"{"a": 2, "b": 3}"#]);
    assert!(called.status.success(), "{called:?}");
    assert_eq!(
        json(&String::from_utf8_lossy(&called.stdout))["content"],
        "5"
    );
    let missing = env.warden(&["call", "units_convert", "{}"]);
    let answer = json(&String::from_utf8_lossy(&missing.stdout));
    assert_eq!(answer["error"]["kind"], "unknown_tool", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 of the toolbox's policies did not load"),
        "{message}"
    );
    assert!(
        !message.contains("x.toml"),
        "no path reaches the model: {message}"
    );

    let audit = json(&env.ok(&["audit", "--json"]));
    let not_loaded = audit["not_loaded"].as_array().unwrap();
    assert_eq!(not_loaded.len(), 2, "{audit}");
    assert!(
        not_loaded[1]["policy"]
            .as_str()
            .unwrap()
            .ends_with("x.toml")
    );

    let strict = env.warden(&["--strict", "tools"]);
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert!(!strict.status.success(), "{stderr}");
    assert!(stderr.contains("2 policies do not load"), "{stderr}");
    assert_eq!(stderr.matches("x.toml:5:").count(), 1, "{stderr}");
    assert!(stderr.contains("no-such-wit"), "{stderr}");
}

fn warden_sha(path: &Path) -> String {
    warden_wasm::sha256_file(path).unwrap()
}

#[test]
fn a_rebuilt_component_needs_a_new_pin() {
    let env = cli_env();
    let component = env.dir.path().join("calc.wasm");
    std::fs::copy(wasm("trivial"), &component).unwrap();
    env.ok(&["add", path_str(&component)]);
    std::fs::copy(wasm("units"), &component).unwrap();
    let out = env.warden(&["tools"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("not loaded")
            && listed.contains("calc.toml")
            && listed.contains("warden pin"),
        "{listed}"
    );
    let out = env.warden(&["--strict", "tools"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("calc.toml") && err.contains("warden pin"),
        "{err}"
    );
    env.ok(&["pin", "calc"]);
    let tools = env.ok(&["tools"]);
    assert!(tools.contains("convert"), "{tools}");
}

#[test]
fn a_second_process_loads_compiled_code_instead_of_compiling() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    // `add` compiled it once to check it; every later process must only load it.
    for _ in 0..2 {
        let out = env.warden(&["call", "add", r#"{"a": 2, "b": 40}"#]);
        assert!(out.status.success());
        assert_eq!(json(&String::from_utf8_lossy(&out.stdout))["content"], "42");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            !log.contains("compiling"),
            "a later process compiled again: {log}"
        );
    }
}

#[test]
fn audit_shows_grants_limits_and_flags() {
    let env = cli_env();
    let ws = env.dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(
        env.toolbox().join("hostile.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\nenv = {{ MODE = \"demo\" }}\nenv_from_host = [\"WARDEN_AUDIT_SECRET\"]\nfs = [{{ host = \"../ws\", guest = \"/ws\", access = \"read-write\" }}]\n[limits]\nmemory = \"64MiB\"\n",
            path_str(&wasm("hostile"))
        ),
    )
    .unwrap();
    let audit = json(&env.ok(&["audit", "--json"]));
    let p = &audit["policies"][0];
    assert_eq!(p["executor"]["kind"], "wasm");
    assert_eq!(p["grants"]["env"]["MODE"], "demo");
    assert_eq!(p["grants"]["env_from_host"][0], "WARDEN_AUDIT_SECRET");
    assert_eq!(p["grants"]["fs"][0]["access"], "read-write");
    let spin = p["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "spin")
        .unwrap();
    assert_eq!(
        spin["limits"]["timeout"], "30s",
        "the default timeout is shown"
    );
    assert_eq!(spin["limits"]["memory"], "64MiB");
    let flags: Vec<&str> = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for wanted in [
        "unpinned",
        "read-write root",
        "env from the host: WARDEN_AUDIT_SECRET",
        "no timeout",
    ] {
        assert!(
            flags.iter().any(|f| f.contains(wanted)),
            "{wanted} not flagged: {flags:?}"
        );
    }
    let text = env.ok(&["audit"]);
    assert!(text.contains("WARDEN_AUDIT_SECRET"), "{text}");
    assert!(!text.contains(AUDIT_SECRET) && !audit.to_string().contains(AUDIT_SECRET));
}

#[test]
fn audit_shows_network_grants_and_flags_wide_ones() {
    let env = cli_env();
    std::fs::write(
        env.toolbox().join("netprobe.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\nnet = [\"*\", \"10.0.0.0/8\", \"api.test:443\"]\ndns = true\nnet_credentials = [{{ host = \"api.test\", header = \"Authorization\", from_host = \"WARDEN_AUDIT_SECRET\", prefix = \"Bearer \" }}, {{ host = \"10.1.2.3\", header = \"X-Key\", from_host = \"WARDEN_AUDIT_SECRET\", allow_plain_http = true }}]\ncredential_host_shared = true\n",
            path_str(&wasm("netprobe"))
        ),
    )
    .unwrap();
    let audit = json(&env.ok(&["audit", "--json"]));
    let net = &audit["policies"][0]["grants"]["net"];
    assert_eq!(
        net["hosts"],
        serde_json::json!(["*", "10.0.0.0/8", "api.test:443"])
    );
    assert_eq!(net["dns"], true);
    assert_eq!(net["credentials"][0]["from_host"], "WARDEN_AUDIT_SECRET");
    assert_eq!(net["credentials"][0]["allow_plain_http"], false);
    assert_eq!(net["credentials"][1]["allow_plain_http"], true);
    let flags = audit["policies"][0]["flags"].to_string();
    for wanted in [
        "wide network grant: * (any public host)",
        "wide network grant: 10.0.0.0/8 (a whole address range)",
        "guest DNS lookups on",
        "credential over plain HTTP: the X-Key header for 10.1.2.3",
        "credential host shared (credential_host_shared = true)",
    ] {
        assert!(flags.contains(wanted), "{wanted} not flagged: {flags}");
    }
    assert!(
        !flags.contains("header for api.test"),
        "a credential over TLS is not flagged: {flags}"
    );
    assert!(
        !flags.contains("api.test:443"),
        "a single host is not wide: {flags}"
    );
    let text = env.ok(&["audit"]);
    assert!(
        text.contains("Authorization header for api.test from $WARDEN_AUDIT_SECRET"),
        "{text}"
    );
    assert!(!text.contains(AUDIT_SECRET) && !audit.to_string().contains(AUDIT_SECRET));
}

/// A shell tool's `net` grants show in the audit as a wasm tool's do: the same hosts, the same
/// reach, the same flags on wide grants, the same network line; a shell granted none reaches
/// none. The docker tool joins in where warden runs as root (its gate needs it, so its policy
/// is refused at load otherwise).
#[test]
fn audit_shows_a_shell_tools_hosts_like_a_wasm_tools() {
    let env = cli_env();
    const NET: &str = r#"net = ["*", "10.0.0.0/8", "api.test:443"]"#;
    let shell = |kind: &str, extra: &str, grants: &str| {
        format!(
            "[executor]\nkind = \"{kind}\"\nname = \"{kind}-net\"\nargv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n{extra}\n[grants]\n{grants}\n[limits]\ntimeout = \"10s\"\n"
        )
    };
    let write = |file: &str, text: String| std::fs::write(env.toolbox().join(file), text).unwrap();
    write(
        "a-wasm.toml",
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\n{NET}\n[limits]\ntimeout = \"10s\"\n",
            path_str(&wasm("netprobe"))
        ),
    );
    write("b-host.toml", shell("host", "", NET));
    let mut shells = vec!["host"];
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if root {
        write(
            "c-docker.toml",
            shell("docker", "image = \"warden-sandbox:latest\"", NET),
        );
        shells.push("docker");
    } else {
        eprintln!("not root: the docker tool's gate needs root, so only the host tool is audited");
    }
    write(
        "d-plain.toml",
        shell("host", "", "").replace("host-net", "host-plain"),
    );

    let audit = json(&env.ok(&["audit", "--json"]));
    let policies = audit["policies"].as_array().unwrap();
    let of = |file: &str| {
        policies
            .iter()
            .find(|p| p["policy"].as_str().unwrap().ends_with(file))
            .unwrap_or_else(|| panic!("{file}: {audit}"))
    };
    let wide = |p: &Value| -> Vec<String> {
        p["flags"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f.as_str())
            .filter(|f| f.starts_with("wide network grant"))
            .map(str::to_owned)
            .collect()
    };
    let wasm = of("a-wasm.toml");
    assert_eq!(wasm["network"], "grants");
    assert_eq!(wide(wasm).len(), 2, "{wasm}");
    for (kind, file) in shells.iter().zip(["b-host.toml", "c-docker.toml"]) {
        let p = of(file);
        assert_eq!(p["executor"]["kind"], *kind);
        assert_eq!(p["grants"]["net"], wasm["grants"]["net"], "{kind}: {p}");
        assert_eq!(p["network"], "grants", "{kind}: {p}");
        assert_eq!(wide(p), wide(wasm), "{kind}: {p}");
    }
    assert!(
        of("b-host.toml")["executor"]["in_force_here"]
            .to_string()
            .contains("only way out is warden's gate"),
        "{audit}"
    );
    let plain = of("d-plain.toml");
    assert_eq!(plain["network"], "none", "{plain}");
    assert!(wide(plain).is_empty(), "{plain}");

    let text = env.ok(&["audit"]);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("network "))
        .collect();
    assert_eq!(lines.len(), shells.len() + 2, "{text}");
    let granted = &lines[..=shells.len()];
    assert!(
        granted
            .iter()
            .all(|l| *l == lines[0] && l.contains("api.test:443")),
        "{text}"
    );
    assert!(lines[shells.len() + 1].ends_with("none"), "{text}");
}

#[test]
fn resolve_pins_a_name_for_tools_http() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = std::io::Write::write_all(
                &mut s,
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\npinned",
            );
        }
    });
    let env = cli_env();
    std::fs::write(
        env.toolbox().join("netprobe.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\nnet = [\"svc.test:{port}\", \"127.0.0.1:{port}\"]\n",
            path_str(&wasm("netprobe"))
        ),
    )
    .unwrap();
    let args = format!(r#"{{"method":"GET","url":"http://svc.test:{port}/","headers":[]}}"#);
    let out = env.ok(&["call", "http", &args, "--resolve", "svc.test:127.0.0.1"]);
    assert_eq!(json(&out)["artifact"]["result"]["body"], "pinned", "{out}");
    // Without the pin there is no DNS here: the lookup fails, and nothing is denied.
    let out = env.warden(&["call", "http", &args]);
    assert_eq!(out.status.code(), Some(1));
    let bad = env.warden(&["tools", "--resolve", "svc.test"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a malformed --resolve is a usage error"
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NAME:ADDRESS"));
}

#[test]
fn run_answers_a_model_turn_in_order_in_either_format() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    let turn = r#"{"role": "assistant", "content": null, "tool_calls": [
        {"id": "x1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}},
        {"id": "x2", "type": "function", "function": {"name": "ad", "arguments": "{}"}},
        {"id": "x3", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 5"}},
        {"id": "x4", "type": "function", "function": {"name": "noop", "arguments": ""}}
    ]}"#;
    let file = env.dir.path().join("turn.json");
    std::fs::write(&file, turn).unwrap();
    let out = env.warden(&["run", path_str(&file), "--format", "openai"]);
    assert_eq!(out.status.code(), Some(1), "some calls failed");
    let messages = json(&String::from_utf8_lossy(&out.stdout));
    let ids: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["x1", "x2", "x3", "x4"]);
    assert_eq!(messages[0]["content"], "3");
    assert_eq!(messages[0]["role"], "tool");
    assert_eq!(messages[1]["error"]["kind"], "unknown_tool");
    assert_eq!(messages[2]["error"]["kind"], "malformed_arguments");
    assert_eq!(messages[3]["content"], "ok");
    // The run's summary on stderr: every answer counted, the failures among them.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("4 calls, 2 errors, CPU"), "{stderr}");

    // A LangChain AIMessage on stdin.
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["run", "-"])
        .env("WARDEN_TOOLBOX", env.toolbox())
        .env("WARDEN_HOME", env.dir.path().join("home"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"type": "ai", "tool_calls": [{"id": "l1", "name": "add", "args": {"a": 20, "b": 22}}]}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let messages = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(messages[0]["type"], "tool");
    assert_eq!(messages[0]["content"], "42");

    let log = std::fs::read_to_string(env.dir.path().join("home/calls.jsonl")).unwrap();
    let calls: Vec<serde_json::Value> = log
        .lines()
        .map(json)
        .filter(|r| r["event"] == "call")
        .collect();
    assert_eq!(calls.len(), 5, "every call is logged: {log}");
    // Two processes wrote the log: warden's own call ids tell every call apart (each process
    // draws an instance part of its own), and the caller's ids stay beside them.
    let ids: std::collections::BTreeSet<&str> = calls
        .iter()
        .map(|r| r["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 5, "{log}");
    let instances: std::collections::BTreeSet<&str> = ids
        .iter()
        .map(|id| id.rsplit_once('-').unwrap().0)
        .collect();
    assert_eq!(instances.len(), 2, "{log}");
    let callers: std::collections::BTreeSet<&str> = calls
        .iter()
        .map(|r| r["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(callers, ["l1", "x1", "x2", "x3", "x4"].into(), "{log}");
    let l1 = calls.iter().find(|r| r["tool_call_id"] == "l1").unwrap();
    assert_eq!(messages[0]["artifact"]["call_id"], l1["call_id"], "{log}");
}

#[test]
fn a_tool_needing_review_is_rejected_without_a_terminal() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    let policy = env.toolbox().join("trivial.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, format!("{text}\n[review]\nrequired = true\n")).unwrap();
    let out = env.warden(&["call", "add", r#"{"a": 1, "b": 1}"#]);
    assert_eq!(out.status.code(), Some(1));
    let m = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(m["error"]["kind"], "rejected");
}

/// The README's first command: the tour runs end to end on the example tools, each step
/// answering as it says.
#[test]
fn the_demo_takes_its_tour() {
    let env = cli_env();
    let out = env.warden(&["demo"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for words in [
        "<- [ok] 8.04672",                                       // the unit converter
        "written by warden demo",                                // read back from the root
        "Error (timeout)",                                       // the endless loop
        "Hello from a host the policy grants.",                  // the granted fetch
        "<- [ok] nobody",                                        // the host shell
        "cannot create /var/tmp/planted: Directory nonexistent", // not in its root
        "the demo server is out of reach",
        "== The audit: what each tool may touch",
    ] {
        assert!(
            text.contains(words),
            "`{words}` missing from the demo:\n{text}"
        );
    }

    // It says what it builds, and cargo's own lines show the build at work.
    let stderr = String::from_utf8_lossy(&out.stderr);
    for words in [
        "building the example tools from source: fetch, files, units, wordcount, hostile",
        "Finished `release` profile",
    ] {
        assert!(stderr.contains(words), "`{words}` missing: {stderr}");
    }
    // The sandbox's refusals in words, without WASI's errno (44 is not the host's ENOENT).
    assert!(
        text.contains("/etc/passwd: No such file or directory\n"),
        "{text}"
    );
    assert!(!text.contains("os error"), "{text}");
    // Each network refusal said once: what and why, the address named once.
    let refusals: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("[warden refused"))
        .collect();
    assert_eq!(refusals.len(), 2, "{text}");
    for line in &refusals {
        assert_eq!(line.matches("not grant").count(), 1, "{line}");
    }
    assert_eq!(refusals[1].matches("169.254.169.254").count(), 1, "{text}");
    // The host shell's refusals are its answer's first lines, in the order they happened.
    let outside = text
        .split("== ")
        .find(|step| step.starts_with("Outside its root the host shell"))
        .unwrap_or_else(|| panic!("no step outside the root: {text}"));
    let answer = &outside[outside
        .find("<- [ok]")
        .unwrap_or_else(|| panic!("{outside}"))..];
    assert!(!answer.contains("[stderr]"), "{answer}");
    let at = |words: &str| {
        answer
            .find(words)
            .unwrap_or_else(|| panic!("{words}: {answer}"))
    };
    assert!(at("/var/tmp/planted") < at("the demo server is out of reach"));
    // The example tools the demo built carry no pin: said once, not flagged on each.
    let unpinned: Vec<&str> = text.lines().filter(|l| l.contains("unpinned")).collect();
    assert_eq!(unpinned.len(), 1, "{text}");
    assert!(
        unpinned[0].contains("fetch.toml, files.toml, units.toml, wordcount.toml run"),
        "{text}"
    );
}

/// An installed binary run outside a checkout: the demo says what it needs (a checkout, or
/// --root naming one) instead of building nothing or guessing a path.
#[test]
fn the_demo_outside_a_checkout_says_what_it_needs() {
    let env = cli_env();
    let elsewhere = tempfile::tempdir().unwrap();
    let demo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("demo")
            .args(args)
            .current_dir(elsewhere.path())
            .env("WARDEN_HOME", env.dir.path().join("home"))
            .env_remove("WARDEN_ROOT")
            .output()
            .expect("warden runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains("warden demo needs a checkout of warden's source"),
            "{stderr}"
        );
        stderr
    };
    let stderr = demo(&[]);
    let here = elsewhere.path().display().to_string();
    for words in [
        here.as_str(),
        "run `warden demo` from inside a checkout",
        "--root DIR",
    ] {
        assert!(stderr.contains(words), "`{words}` missing: {stderr}");
    }
    let stderr = demo(&["--root", path_str(elsewhere.path())]);
    assert!(
        stderr.contains(&format!(
            "{here} is not one (it has no guest-sdk/Cargo.toml)"
        )),
        "{stderr}"
    );
}

/// The call log stays within its size and keeps its last files; calls name their policy by
/// digest, described at the head of each file (once per process writing it), not per call.
#[test]
fn the_call_log_rotates_and_stays_compact() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    let batch: Vec<Value> = (0..40)
        .map(|i| serde_json::json!({"id": format!("c{i}"), "name": "add", "arguments": {"a": i, "b": 1}}))
        .collect();
    let file = env.dir.path().join("batch.json");
    std::fs::write(&file, serde_json::to_string(&batch).unwrap()).unwrap();
    let log = env.dir.path().join("home").join("calls.jsonl");
    for _ in 0..3 {
        env.ok(&[
            "--call-log-max-size",
            "4KiB",
            "--call-log-keep",
            "2",
            "run",
            path_str(&file),
        ]);
    }
    let rotated = |n: u32| PathBuf::from(format!("{}.{n}", log.display()));
    assert!(rotated(1).exists() && rotated(2).exists(), "rotated");
    assert!(!rotated(3).exists(), "only two old files are kept");
    // Described once per file by each process that wrote to it, never per call: the current
    // file may hold only the last few calls, so the calls are counted over the three files.
    let (mut all_calls, mut all_policies) = (0, 0);
    for path in [log.clone(), rotated(1), rotated(2)] {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.len() <= 4096,
            "{}: {} bytes",
            path.display(),
            text.len()
        );
        let records: Vec<Value> = text.lines().map(json).collect();
        let calls: Vec<&Value> = records.iter().filter(|r| r["event"] == "call").collect();
        let policies: Vec<&Value> = records.iter().filter(|r| r["event"] == "policy").collect();
        assert!(
            (1..=3).contains(&policies.len()),
            "{}: {records:#?}",
            path.display()
        );
        assert!(!calls.is_empty(), "{}", path.display());
        (all_calls, all_policies) = (all_calls + calls.len(), all_policies + policies.len());
        assert_eq!(records[0]["event"], "policy", "each file can be read alone");
        for call in &calls {
            assert_eq!(call["policy_digest"], policies[0]["policy_digest"]);
            assert!(call.get("grants").is_none(), "{call}");
        }
    }
    assert!(
        all_calls > all_policies * 3,
        "{all_calls} calls, {all_policies} policies"
    );
}

#[test]
fn a_trap_carries_the_guest_backtrace_and_never_warden_s_whatever_rust_backtrace_says() {
    let env = cli_env();
    std::fs::write(
        env.toolbox().join("hostile.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n",
            path_str(&wasm("hostile"))
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["call", "boom", r#"{"message": "kaboom"}"#])
        .env("WARDEN_TOOLBOX", env.toolbox())
        .env("WARDEN_HOME", env.dir.path().join("home"))
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let message = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(message["error"]["kind"], "trap");
    let error = message["error"]["details"]["error"].as_str().unwrap();
    assert!(error.contains("wasm backtrace"), "{error}");
    assert!(
        !error.contains("Stack backtrace"),
        "a host backtrace: {error}"
    );
}

/// `audit --usage` reads the call log against the current policies: a granted host no call
/// reached is named with its line until a call reaches it; a missing log says how to name one.
#[test]
fn audit_usage_names_hosts_no_call_reached() {
    let port = warden_test_support::servers::HttpServer::start().port;
    let env = cli_env();
    let missing = env.warden(&["audit", "--usage"]);
    assert_eq!(missing.status.code(), Some(2));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        said.contains("calls.jsonl") && said.contains("--call-log"),
        "{said}"
    );

    let policy = env.toolbox().join("netprobe.toml");
    std::fs::write(
        &policy,
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\nnet = [\n  \
             \"a.test:{port}\",\n  \"b.test:{port}\",\n  \"127.0.0.1:{port}\",\n]\n",
            path_str(&wasm("netprobe"))
        ),
    )
    .unwrap();
    let call = |host: &str| {
        let args = format!(r#"{{"method":"GET","url":"http://{host}:{port}/","headers":[]}}"#);
        let resolve = format!("{host}:127.0.0.1");
        let out = env.ok(&["call", "http", &args, "--resolve", &resolve]);
        assert_eq!(
            json(&out)["artifact"]["result"]["body"],
            "hello from /",
            "{out}"
        );
    };
    let unused = || {
        let report = json(&env.ok(&["audit", "--usage", "--since", "1h", "--json"]));
        report["unused_grants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let file = g["policy"].as_str().unwrap().to_owned();
                (
                    file,
                    g["line"].as_u64().unwrap(),
                    g["grant"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    call("a.test");
    let policy = policy.canonicalize().unwrap();
    let file = path_str(&policy).to_owned();
    assert_eq!(unused(), vec![(file, 7, format!("b.test:{port}"))]);
    let text = env.ok(&["audit", "--usage"]);
    assert!(
        text.contains(&format!("netprobe.toml:7  net b.test:{port}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("net = [\"a.test:{port}\", \"127.0.0.1:{port}\"]")),
        "{text}"
    );

    call("b.test");
    assert_eq!(unused(), vec![]);
    let report = json(&env.ok(&["audit", "--usage", "--json"]));
    assert_eq!(report["tools"][0]["tool"], "http");
    assert_eq!(report["tools"][0]["calls"], 2);
    assert_eq!(report["tools"][0]["destinations"], 2);
}

/// `warden serve` stopped by SIGTERM right after answering ends cleanly, says how long it
/// drains (`--drain`), and its call log holds a record of every call it answered: records are
/// written off the calls' path, and a signal must not take the last of them along. Started
/// with a low soft limit on open files, it serves with its hard one.
#[test]
fn serve_stopped_by_sigterm_keeps_every_answered_call_in_the_log() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command
        .args(["serve", "--drain", "1s"])
        .env("WARDEN_TOOLBOX", env.toolbox())
        .env("WARDEN_HOME", env.dir.path().join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        command.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur = limit.rlim_max.min(256);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    let mut serve = command.spawn().unwrap();
    let mut input = serve.stdin.take().unwrap();
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}});
    writeln!(input, "{init}").unwrap();
    lines.next().unwrap().unwrap();
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    const CALLS: usize = 200;
    for id in 1..=CALLS {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": id, "b": 1}}});
        writeln!(input, "{call}").unwrap();
    }
    input.flush().unwrap();
    for _ in 0..CALLS {
        let answer = json(&lines.next().unwrap().unwrap());
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", serve.id())).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect();
    assert_eq!(
        open_files[0], open_files[1],
        "soft raised to hard: {limits}"
    );
    // stdin stays open: the signal, not the end of input, stops the server.
    let killed = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = serve.wait().unwrap();
    assert!(status.success(), "stopped cleanly: {status}");
    drop(input);
    let mut stderr = String::new();
    serve
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("have up to 1s to answer"), "{stderr}");
    let log = std::fs::read_to_string(env.dir.path().join("home/calls.jsonl")).unwrap();
    let calls = log
        .lines()
        .map(json)
        .filter(|r| r["event"] == "call" && r["outcome"] == "success")
        .count();
    assert_eq!(calls, CALLS, "every answered call is in the log");
}

/// Whether a terminal would act on `c` rather than show it (C0, DEL, C1, bidi controls).
fn obeyed(c: char) -> bool {
    matches!(c, '\0'..='\x09' | '\x0b'..='\x1f' | '\x7f'..='\u{9f}' | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// Tool names a model chose, with escape sequences (erase the row, move up, forge a row of
/// 999 calls, set the window title, a C1 CSI, a bidi override) and a line break, reach the
/// call log as unknown tools' calls. Everything warden prints for people shows them escaped;
/// its JSON keeps them, as inert `\u` escapes.
#[test]
fn model_chosen_names_are_printed_escaped() {
    let env = cli_env();
    let erase = "erase\x1b[2K\x1b[1A\r\x1b[2Kforged                        999";
    let title = "title\x1b]0;pwned\x07\u{9b}2J\u{202e}txt\x7f";
    let split = "split\nforged                        999";
    for name in [erase, title, split] {
        let out = env.warden(&["call", name, "{}"]);
        assert_eq!(out.status.code(), Some(1), "an unknown tool's call");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(!stdout.chars().any(obeyed), "raw controls in {stdout:?}");
        assert_eq!(json(&stdout)["name"], name, "the JSON says the same");
    }

    let usage = env.ok(&["audit", "--usage"]);
    assert!(!usage.chars().any(obeyed), "raw controls in {usage:?}");
    for shown in [
        "erase\\x1b[2K\\x1b[1A\\r\\x1b[2Kforged",
        "title\\x1b]0;pwned\\x07\\u{9b}2J\\u{202e}txt\\x7f",
        "split\\nforged",
    ] {
        let rows: Vec<&str> = usage.lines().filter(|l| l.starts_with(shown)).collect();
        assert_eq!(rows.len(), 1, "one row for {shown}: {usage}");
        assert!(rows[0].contains("unknown_tool 1"), "{}", rows[0]);
    }
    assert!(
        !usage.lines().any(|l| l.starts_with("forged")),
        "no forged row: {usage}"
    );
    let report = json(&env.ok(&["audit", "--usage", "--json"]));
    let names: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tool"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&split) && names.contains(&title),
        "{names:?}"
    );

    // An error that quotes what it was given.
    let log = env.dir.path().join("calls\x1b[2J\n.jsonl");
    let out = env.warden(&["audit", "--usage", "--call-log", path_str(&log)]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("calls\\x1b[2J\\n.jsonl"), "{stderr}");
    assert!(!stderr.chars().any(obeyed), "raw controls in {stderr:?}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

/// A tool's description is its author's, and `warden tools` and `warden audit` print it and
/// the policy's values escaped.
#[test]
fn tool_descriptions_and_policy_values_are_printed_escaped() {
    let env = cli_env();
    std::fs::write(
        env.toolbox().join("t.toml"),
        "[executor]\nkind = \"host\"\nname = \"t\"\nargv = [\"/bin/true\"]\n\
         description = \"fine\\u001b]0;pwned\\u0007\\u009b2J\\u202e\"\n\
         [grants]\nenv = { NOTE = \"a\\u001b[2Kb\\nforged\" }\n",
    )
    .unwrap();
    let tools = env.ok(&["tools"]);
    assert!(!tools.chars().any(obeyed), "raw controls in {tools:?}");
    assert!(
        tools.contains("fine\\x1b]0;pwned\\x07\\u{9b}2J\\u{202e}"),
        "{tools}"
    );
    let listed = json(&env.ok(&["tools", "--json"]));
    assert_eq!(
        listed[0]["description"],
        "fine\x1b]0;pwned\x07\u{9b}2J\u{202e}"
    );
    let audit = env.ok(&["audit"]);
    assert!(!audit.chars().any(obeyed), "raw controls in {audit:?}");
    assert!(audit.contains("NOTE=a\\x1b[2Kb\\nforged"), "{audit}");
}

/// A small tmpfs mounted over a test's folder (as root, as CI runs), unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (the test says SKIPPED) where this is not root, except under CI.
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        if !warden_test_support::is_root() {
            assert!(
                !warden_test_support::under_ci(),
                "CI runs as root, to mount a tmpfs"
            );
            eprintln!("SKIPPED: mounting a tmpfs needs root");
            return None;
        }
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(mounted.success());
        Some(Tmpfs(at.to_owned()))
    }

    /// Fills it up: a file of every byte left, until the disk refuses more.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 4096];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("{e}"),
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A full disk loses nothing silently, and a retry works once there is room: `warden add`
/// fails naming what it could not write and leaves no half-written policy or stored file
/// (once, a 0-byte policy broke every later command and the retry was refused); a call whose
/// record does not fit is answered and the loss said, and the records after it start lines of
/// their own (once, the next record was appended onto a torn one).
#[test]
fn a_full_disk_leaves_nothing_half_written_and_the_next_try_works() {
    // Warden's own log filter: errors are shown.
    let env = Env::new();
    let Some(disk) = Tmpfs::mount(env.dir.path(), "16m") else {
        return;
    };
    std::fs::create_dir(env.toolbox()).unwrap();
    let filler = disk.fill();
    let refused = env.warden(&["add", path_str(&wasm("units"))]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!env.toolbox().join("units.toml").exists(), "{stderr}");
    let store = env.dir.path().join("home/store");
    let left: Vec<_> = std::fs::read_dir(&store)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_file(&filler).unwrap();
    env.ok(&["add", path_str(&wasm("units"))]);

    let convert = r#"{"quantity": {"value": 1, "unit": "kilometer"}, "to": "meter"}"#;
    env.ok(&["call", "convert", convert]);
    // The log's last page is all but full, so the next record is cut where the disk is.
    let calls_log = env.dir.path().join("home/calls.jsonl");
    let size = std::fs::metadata(&calls_log).unwrap().len() as usize;
    let pad = (4096 - (size + 40) % 4096) % 4096 + 4096;
    let line = format!("{{\"event\":\"pad\",\"x\":\"{}\"}}\n", "x".repeat(pad - 24));
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(&calls_log)
        .unwrap();
    std::io::Write::write_all(&mut log, line.as_bytes()).unwrap();
    let filler = disk.fill();
    let out = env.warden(&["call", "convert", convert]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        json(&String::from_utf8_lossy(&out.stdout))["content"],
        "1000.0"
    );
    assert!(stderr.contains("record(s) lost"), "{stderr}");
    std::fs::remove_file(&filler).unwrap();
    env.ok(&["call", "convert", convert]);
    let log = std::fs::read_to_string(&calls_log).unwrap();
    let (records, torn): (Vec<_>, Vec<_>) = log
        .lines()
        .partition(|l| serde_json::from_str::<Value>(l).is_ok());
    assert_eq!(torn.len(), 1, "{log}");
    let calls = records
        .iter()
        .filter(|l| json(l)["event"] == "call")
        .count();
    assert_eq!(calls, 2, "{log}");
    // The last call's record, then the seal its process ended with (docs/ledger.md).
    let events: Vec<Value> = records
        .iter()
        .rev()
        .take(2)
        .map(|l| json(l)["event"].clone())
        .collect();
    assert_eq!(events, ["seal", "call"], "{log}");
}

/// `warden serve` over stdio, its answers read on a thread of their own, its stderr kept.
struct Serving {
    child: std::process::Child,
    input: Option<std::process::ChildStdin>,
    answers: std::sync::mpsc::Receiver<Value>,
    /// Reads its stderr to the end.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Serving {
    /// Started on `env`'s toolbox, with a session initialized.
    fn start(env: &Env) -> Serving {
        use std::io::{BufRead, BufReader, Read};
        use std::process::Stdio;
        let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("serve")
            .env("WARDEN_TOOLBOX", env.toolbox())
            .env("WARDEN_HOME", env.dir.path().join("home"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (send, answers) = std::sync::mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if send.send(json(&line)).is_err() {
                    return;
                }
            }
        });
        let mut from = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = from.read_to_string(&mut text);
            text
        });
        let mut serving = Serving {
            input: child.stdin.take(),
            child,
            answers,
            stderr: Some(stderr),
        };
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}});
        serving.write(&[init]);
        assert_eq!(serving.answer().unwrap()["id"], 0);
        serving
            .write(&[serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})]);
        serving
    }

    fn write(&mut self, messages: &[Value]) {
        use std::io::Write;
        let mut lines = Vec::new();
        for m in messages {
            lines.extend_from_slice(m.to_string().as_bytes());
            lines.push(b'\n');
        }
        let input = self.input.as_mut().unwrap();
        input.write_all(&lines).unwrap();
        input.flush().unwrap();
    }

    /// The next answer; `None` once the server has closed its stdout.
    fn answer(&self) -> Option<Value> {
        match self
            .answers
            .recv_timeout(std::time::Duration::from_secs(60))
        {
            Ok(answer) => Some(answer),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("no answer in a minute"),
        }
    }

    /// What the server wrote on stderr, once it has exited.
    fn stderr(&mut self) -> String {
        self.stderr.take().unwrap().join().unwrap()
    }

    /// Waits for the server to exit, a minute at most.
    fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not stop"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn add_call(id: usize) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": id, "b": 1}}})
}

/// 10,000 `tools/call`s written without waiting for an answer are all answered, and all
/// succeed. (The reader used to run ahead of the calls it answered, each holding a stack of
/// the engine until its leftovers were finished, and refused 8,729 of 10,000 as
/// `unavailable`.)
#[test]
fn serve_answers_10000_pipelined_calls() {
    const CALLS: usize = 10_000;
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    let mut serving = Serving::start(&env);
    let mut input = serving.input.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut burst = Vec::new();
        for id in 1..=CALLS {
            burst.extend_from_slice(add_call(id).to_string().as_bytes());
            burst.push(b'\n');
        }
        input.write_all(&burst).unwrap();
        input
    });
    let mut failed = Vec::new();
    for _ in 0..CALLS {
        let answer = serving.answer().expect("the server is still there");
        if answer["result"]["isError"] != false {
            failed.push(answer);
        }
    }
    drop(writer.join().unwrap());
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(serving.exited().success());
}

/// Over stdio, stdio's direct path answers a plain call with the bytes rmcp writes: the same
/// calls (a result, a scalar wrapped, bad arguments, a tool's error, a trap, an unknown tool)
/// answered with it on and with it off (`WARDEN_MCP_DIRECT=0`) give the same lines, the
/// usage figures aside.
#[test]
fn serve_answers_alike_with_the_direct_path_on_and_off() {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    env.ok(&["add", path_str(&wasm("hostile"))]);
    let calls = [
        serde_json::json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
        serde_json::json!({"name": "add", "arguments": {"a": "one"}}),
        serde_json::json!({"name": "noop"}),
        serde_json::json!({"name": "fail", "arguments": {"message": "no \"luck\" é"}}),
        serde_json::json!({"name": "echo-env", "arguments": {"name": "NOT_SET"}}),
        serde_json::json!({"name": "boom", "arguments": {"message": "down"}}),
        serde_json::json!({"name": "no-such-tool", "arguments": {}}),
    ];
    let mut lines = vec![
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for (id, params) in calls.iter().enumerate() {
        lines.push(serde_json::json!({"jsonrpc": "2.0", "id": id + 1,
            "method": "tools/call", "params": params}));
    }
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let answers = |direct: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("serve")
            .env("WARDEN_TOOLBOX", env.toolbox())
            .env("WARDEN_HOME", env.dir.path().join("home"))
            .env("WARDEN_MCP_DIRECT", direct)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(child.wait().unwrap().success());
        // Answered as each call ends, which need not be in the order asked: by id.
        let mut answers: Vec<(i64, String)> = out
            .lines()
            .map(|line| (json(line)["id"].as_i64().unwrap(), without_usage(line)))
            .collect();
        answers.sort();
        answers
    };
    let (on, off) = (answers("1"), answers("0"));
    assert_eq!(on.len(), calls.len() + 1, "{on:#?}");
    assert_eq!(on, off);
}

/// `line` with the figures of each `"warden/usage"` object taken out.
fn without_usage(line: &str) -> String {
    const USAGE: &str = "\"warden/usage\":{";
    let mut rest = line;
    let mut out = String::new();
    while let Some(at) = rest.find(USAGE) {
        out.push_str(&rest[..at + USAGE.len()]);
        rest = &rest[at + USAGE.len()..];
        rest = &rest[rest.find('}').unwrap_or(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// `warden serve` stopped by SIGTERM with calls in flight (sleeps of 0.2 s, and of ten
/// minutes) answers each, cancelling those still running after the drain's 2 s, logs each
/// once, says on stderr that it drains, and exits cleanly. (It used to exit at once: no
/// answers, no records, nothing on stderr.)
#[test]
fn serve_stopped_by_sigterm_answers_or_cancels_each_call_in_flight() {
    let env = cli_env();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    env.ok(&["add", path_str(&wasm("hostile"))]);
    let mut serving = Serving::start(&env);
    let sleeps: Vec<u64> = [200, 600_000].repeat(4);
    let mut calls: Vec<Value> = sleeps
        .iter()
        .enumerate()
        .map(|(i, ms)| {
            serde_json::json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": ms}}})
        })
        .collect();
    // Read in order behind the sleeps: once it is answered, they have all started.
    let last = sleeps.len() + 1;
    calls.push(add_call(last));
    serving.write(&calls);
    let mut answers = std::collections::HashMap::new();
    loop {
        let answer = serving.answer().expect("an answer");
        let id = answer["id"].as_u64().unwrap() as usize;
        assert!(
            answers.insert(id, answer).is_none(),
            "one answer to call {id}"
        );
        if id == last {
            break;
        }
    }
    let killed = Command::new("kill")
        .args(["-TERM", &serving.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    while let Some(answer) = serving.answer() {
        let id = answer["id"].as_u64().unwrap() as usize;
        assert!(
            answers.insert(id, answer).is_none(),
            "one answer to call {id}"
        );
    }
    assert!(serving.exited().success(), "stopped cleanly");
    assert_eq!(
        answers.len(),
        calls.len(),
        "every call answered: {answers:?}"
    );
    let mut succeeded = 0;
    for (i, ms) in sleeps.iter().enumerate() {
        let result = &answers[&(i + 1)]["result"];
        if answered_while_stopping(*ms, result) {
            succeeded += 1;
        } else {
            let message = result["_meta"]["warden/error"]["message"].as_str().unwrap();
            assert!(message.contains("cancelled"), "{message}");
        }
    }
    let log = std::fs::read_to_string(env.dir.path().join("home/calls.jsonl")).unwrap();
    let records: Vec<Value> = log
        .lines()
        .map(json)
        .filter(|r| r["event"] == "call")
        .collect();
    assert_eq!(
        records.len(),
        calls.len(),
        "one record a call: {records:#?}"
    );
    let sleeps_succeeded = records
        .iter()
        .filter(|r| r["tool"] == "sleep" && r["outcome"] == "success")
        .count();
    assert_eq!(sleeps_succeeded, succeeded, "{records:#?}");
    let stderr = serving.stderr();
    assert!(stderr.contains("SIGTERM: draining"), "{stderr}");
}
