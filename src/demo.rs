//! `warden demo`: builds the example tools from source and takes a short scripted tour.
//!
//! The tour needs a checkout of warden's source (the tools' sources in `guest-sdk/`, their
//! policies in `policies/`), found at run time: `--root DIR` / `WARDEN_ROOT`, or the current
//! folder or the nearest one above it. An installed binary carries no path of the tree it was
//! built from.

use crate::context;
use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use warden::Warden;
use warden_core::{Dispatcher, Policy, ToolCall, ToolMessage, Toolbox};
use warden_net::Resolver;

/// What the demo needs of a checkout: the example tools' sources and their policies.
const NEEDS: [&str; 2] = ["guest-sdk/Cargo.toml", "policies"];

/// The guest packages the tour calls: the shipped toolbox's tools and the hostile fixture (the
/// endless loop). Not the other fixtures, which only the tests need: a first run builds less.
const TOOLS: [&str; 5] = ["fetch", "files", "units", "wordcount", "hostile"];

fn is_checkout(dir: &Path) -> bool {
    NEEDS.iter().all(|p| dir.join(p).exists())
}

/// The checkout of warden the demo builds and runs: `given` (`--root`), or the current folder
/// or the nearest one above it that holds the demo's files. An absolute path (the guest build
/// runs in a folder of its own).
pub(crate) fn find_root(given: Option<&Path>) -> Result<PathBuf> {
    const NEED: &str = "warden demo needs a checkout of warden's source: it builds the example \
                        tools in its guest-sdk/ and runs them under its policies/";
    if let Some(dir) = given {
        if let Some(missing) = NEEDS.iter().find(|p| !dir.join(p).exists()) {
            bail!(
                "{NEED}, and {} is not one (it has no {missing}): pass --root (or WARDEN_ROOT) \
                 the folder of a checkout",
                dir.display()
            );
        }
        return std::fs::canonicalize(dir).with_context(|| format!("reading {}", dir.display()));
    }
    let cwd = std::env::current_dir().context("reading the current folder")?;
    cwd.ancestors()
        .find(|dir| is_checkout(dir))
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            anyhow!(
                "{NEED}. There is none in {} or above it: run `warden demo` from inside a \
                 checkout, or pass --root DIR (or set WARDEN_ROOT=DIR)",
                cwd.display()
            )
        })
}

/// The fetch tool again, granted the demo's own server on loopback (which the shipped policy
/// does not grant), under a name that `--resolve`-style overrides pin to it.
fn local_fetch(port: u16) -> String {
    format!(
        r#"
prefix = "local-"
[executor]
kind = "wasm"
component = "../target/wasm32-wasip2/release/fetch.wasm"
[grants]
net = ["docs.example.test:{port}", "127.0.0.1:{port}"]
[limits]
timeout = "5s"
"#
    )
}

/// A misbehaving tool for the tour, with a short deadline so the timeout shows quickly.
const HOSTILE: &str = r#"
[executor]
kind = "wasm"
component = "../target/wasm32-wasip2/release/hostile.wasm"
[limits]
timeout = "1s"
memory = "64MiB"
"#;

/// The example tools built from source in `root`, by the paths of their components.
pub(crate) fn build_examples(root: &Path) -> Result<Vec<PathBuf>> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running rustup (is Rust installed with rustup?)")?;
    if !String::from_utf8_lossy(&installed.stdout).contains("wasm32-wasip2") {
        eprintln!("adding the wasm32-wasip2 target…");
        let ok = Command::new("rustup")
            .args(["target", "add", "wasm32-wasip2"])
            .status()?
            .success();
        if !ok {
            bail!("`rustup target add wasm32-wasip2` failed");
        }
    }
    eprintln!(
        "building the example tools from source: {} (cargo build --release in {})…",
        TOOLS.join(", "),
        root.join("guest-sdk").display()
    );
    // Into the checkout's own target/ whatever CARGO_TARGET_DIR says: the policies name the
    // components there (../target/wasm32-wasip2/release). Not quiet: a first build takes
    // a while, and cargo's own lines show it working.
    let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--target-dir"])
        .arg(root.join("target"))
        .args(TOOLS.iter().flat_map(|t| ["-p", t]))
        .current_dir(root.join("guest-sdk"))
        .status()
        .context("running cargo")?
        .success();
    if !ok {
        bail!("building guest-sdk failed");
    }
    let release = root.join("target/wasm32-wasip2/release");
    Ok(TOOLS
        .iter()
        .map(|t| release.join(format!("{t}.wasm")))
        .collect())
}

/// `warden demo`: the example tools built from `root`'s source, a tour of calls that shows
/// what their sandboxes allow and refuse, then the audit of the toolbox.
pub(crate) fn demo(ctx: &Warden, root: Option<&Path>) -> Result<ExitCode> {
    let root = find_root(root)?;
    let built = build_examples(&root)?;
    let policies = root.join("policies");
    let port = serve_page()?;
    let ctx = tour_context(ctx, &policies)?;
    let dispatcher = tour_dispatcher(&ctx, &policies, port)?;
    let runtime = context::runtime()?;
    for (i, (title, tool, args)) in steps(port).iter().enumerate() {
        let call = ToolCall::new(format!("call-{}", i + 1), *tool, args);
        outln!("== {title}");
        outln!("-> {}({})", call.name, call.arguments);
        let message = runtime.block_on(dispatcher.call(call));
        show(&message);
    }
    outln!("== The audit: what each tool may touch\n");
    crate::audit::audit(&ctx, false, &built)
}

/// `ctx` with the checkout's `policies` as its toolbox, and the demo server's name pinned to
/// loopback.
fn tour_context(ctx: &Warden, policies: &Path) -> Result<Warden> {
    Ok(Warden {
        toolbox: policies.to_owned(),
        egress: ctx
            .egress
            .clone()
            .with_resolver(Resolver::with_overrides(["docs.example.test:127.0.0.1"])?),
        artifacts: ctx.artifacts.clone(),
        call_log: ctx.call_log.clone(),
        call_log_rotation: ctx.call_log_rotation,
        seals: ctx.seals.clone(),
        runs: ctx.runs.clone(),
        transactions: ctx.transactions.clone(),
        snapshots: ctx.snapshots.clone(),
        trust: ctx.trust.clone(),
        docker: ctx.docker.clone(),
        host: ctx.host.clone(),
        on_compile: ctx.on_compile.clone(),
        workload: ctx.workload,
        loading: ctx.loading,
    })
}

/// The tour's dispatcher: the shipped toolbox, the hostile tool and the fetch tool granted the
/// demo server on `port`.
fn tour_dispatcher(ctx: &Warden, policies: &Path, port: u16) -> Result<Dispatcher> {
    let mut toolbox: Toolbox = ctx.load()?;
    let backend = ctx.wasm();
    let hostile = Policy::parse(&policies.join("demo-hostile.toml"), HOSTILE, &[&backend])?;
    toolbox.add_policy(Arc::new(hostile), &[&backend])?;
    let fetch = Policy::parse(
        &policies.join("demo-fetch.toml"),
        &local_fetch(port),
        &[&backend],
    )?;
    toolbox.add_policy(Arc::new(fetch), &[&backend])?;
    Ok(Dispatcher::new(Arc::new(toolbox)))
}

/// The tour: each step's title, tool and arguments; the demo server listens on `port`.
fn steps(port: u16) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "A pure tool: a record and an enum in, a number out",
            "convert",
            json!({"quantity": {"value": 5, "unit": "mile"}, "to": "kilometer"}),
        ),
        (
            "A filesystem tool, confined to /workspace",
            "list-dir",
            json!({"path": "."}),
        ),
        (
            "Writing inside the granted root",
            "write-file",
            json!({"path": "notes/demo.txt", "contents": "written by warden demo\n"}),
        ),
        (
            "Reading it back",
            "read-file",
            json!({"path": "notes/demo.txt"}),
        ),
        (
            "Reading outside the root is refused by the sandbox",
            "read-file",
            json!({"path": "/etc/passwd"}),
        ),
        (
            "So is climbing out with ..",
            "read-file",
            json!({"path": "../../../etc/passwd"}),
        ),
        (
            "A command component: args and stdin in, stdout out",
            "wordcount",
            json!({"args": ["-w"], "stdin": "the quick brown fox"}),
        ),
        (
            "Arguments that do not fit the schema",
            "convert",
            json!({"quantity": {"value": "five", "unit": "yard"}}),
        ),
        ("An endless loop meets its 1 s deadline", "spin", json!({})),
        (
            "A network tool reaches a host its policy grants",
            "local-fetch",
            json!({"url": format!("http://docs.example.test:{port}/hello")}),
        ),
        (
            "The same tool, another port on the same machine: denied before any connection",
            "local-fetch",
            json!({"url": format!("http://127.0.0.1:{}/", port.wrapping_add(1))}),
        ),
        (
            "The shipped fetch policy: the cloud metadata address is not a granted host",
            "fetch",
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
        ),
        (
            "A shell command as a confined host process: nobody, no network, one root",
            "host-shell",
            json!({"command": "id -un; ls; head -1 README.txt"}),
        ),
        (
            "Outside its root the host shell reads and writes nothing, and reaches no one",
            "host-shell",
            // Its stderr into its stdout: each refusal where it happened, in the answer's
            // first lines rather than under `[stderr]` after them.
            json!({"command": format!(
                "exec 2>&1; cat /etc/hostname; echo x > /var/tmp/planted; \
                 bash -c 'echo > /dev/tcp/127.0.0.1/{port}' || echo the demo server is out of reach"
            )}),
        ),
    ]
}

/// A one-page web server on 127.0.0.1 for the fetch steps; it lives as long as the demo.
fn serve_page() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("starting the demo's web server")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let body = "Hello from a host the policy grants.\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(port)
}

fn show(message: &ToolMessage) {
    let status = match message.status {
        warden_core::Status::Success => "ok",
        warden_core::Status::Error => "error",
    };
    let content: String = message.content.chars().take(400).collect();
    outln!("<- [{status}] {}\n", content.trim_end());
}
