//! Shared by the binary's end-to-end tests: the repository root and the guest components,
//! built from source on first use.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A component built from the guest-sdk.
pub fn wasm(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        // scripts/test builds them first; cargo's lock on target/ would only make us wait.
        if std::env::var_os("WARDEN_GUESTS_BUILT").is_some() {
            return;
        }
        let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--quiet"])
            .current_dir(root().join("guest-sdk"))
            .status()
            .expect("cargo runs")
            .success();
        assert!(ok, "building guest-sdk failed");
    });
    root().join(format!("target/wasm32-wasip2/release/{name}.wasm"))
}
