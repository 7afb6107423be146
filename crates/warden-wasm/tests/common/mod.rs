//! Shared by the integration tests: fixtures built from source once, toolboxes in temp dirs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use warden_core::{Dispatcher, Protected, ToolCall, ToolMessage, Toolbox, ToolboxError};
use warden_net::{Egress, Resolver};
use warden_wasm::{Artifacts, WasmBackend};

pub(crate) use warden_test_support::guests::{root, wasm};

/// A Python or JavaScript component from `scripts/build-polyglot`, built on first use; `None`
/// (the test skips) when the toolchains are not installed, except under `CI=true`.
pub(crate) fn polyglot(name: &str) -> Option<PathBuf> {
    static BUILT: OnceLock<bool> = OnceLock::new();
    let built = *BUILT.get_or_init(|| {
        if std::env::var_os("WARDEN_POLYGLOT_BUILT").is_some() {
            return true;
        }
        let status = Command::new(root().join("scripts/build-polyglot"))
            .current_dir(root())
            .status()
            .expect("scripts/build-polyglot runs");
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        match status.code() {
            Some(0) => true,
            Some(3) if !in_ci => {
                eprintln!("skipped: componentize-py / componentize-js are not installed");
                false
            }
            _ => panic!("scripts/build-polyglot failed ({status})"),
        }
    });
    built.then(|| root().join(format!("target/polyglot/{name}.wasm")))
}

/// A toolbox in a temp dir. The compile cache is shared by all tests of a run, so each
/// fixture compiles once.
pub(crate) struct Bench {
    pub dir: tempfile::TempDir,
    pub toolbox: PathBuf,
    pub artifacts: Artifacts,
    /// How tools' HTTP hosts resolve (tests pin names to loopback: there is no DNS here).
    pub resolver: Resolver,
}

impl Bench {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let toolbox = dir.path().join("policies");
        std::fs::create_dir(&toolbox).unwrap();
        let artifacts = Artifacts {
            store: dir.path().join("store"),
            cache: root().join("target/warden-test-cache"),
        };
        Self {
            dir,
            toolbox,
            artifacts,
            resolver: Resolver::default(),
        }
    }

    /// Writes a policy whose `[executor]` runs the named fixture; `rest` adds tables.
    pub(crate) fn policy(&self, file: &str, fixture: &str, rest: &str) -> PathBuf {
        let path = self.toolbox.join(file);
        let text = format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n{rest}\n",
            wasm(fixture).display().to_string()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes a policy running the component at `path`; `rest` adds tables.
    pub(crate) fn policy_at(&self, file: &str, path: &Path, rest: &str) -> PathBuf {
        let policy = self.toolbox.join(file);
        let text = format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n{rest}\n",
            path.display().to_string()
        );
        std::fs::write(&policy, text).unwrap();
        policy
    }

    /// A folder inside the bench, created.
    pub(crate) fn folder(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub(crate) fn load(&self) -> Result<Toolbox, ToolboxError> {
        let backend =
            WasmBackend::new(self.artifacts.clone()).egress(Egress::new(self.resolver.clone()));
        let protected = [
            Protected::new("the toolbox", self.toolbox.clone()),
            Protected::new("the component store", self.artifacts.store.clone()),
        ];
        Toolbox::load(&self.toolbox, &[&backend], &protected)
    }

    pub(crate) fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(Arc::new(self.load().expect("toolbox loads")))
    }
}

/// Runs one call on a fresh runtime.
pub(crate) async fn call(d: &Dispatcher, tool: &str, args: serde_json::Value) -> ToolMessage {
    d.call(ToolCall::new("t1", tool, &args)).await
}

/// The error kind of a message, as its stable name ("ok" for a success).
pub(crate) fn kind(m: &ToolMessage) -> &'static str {
    m.error.as_ref().map_or("ok", |e| e.kind.as_str())
}
