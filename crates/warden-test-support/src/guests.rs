//! The guest components every crate's tests call, built from source once per test process
//! (or not at all when scripts/test built them first: cargo's lock on target/ would only make
//! us wait): the Rust ones of guest-sdk, and the Python, JavaScript and Go ones of
//! `scripts/build-polyglot`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root: the nearest folder above this crate that holds guest-sdk/.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|p| p.join("guest-sdk").is_dir())
        .expect("the repository root is above every crate")
        .to_path_buf()
}

/// The folder of the built guest components, building them on first use.
pub fn wasm_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = root();
            if std::env::var_os("WARDEN_GUESTS_BUILT").is_none() {
                let status =
                    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                        .args(["build", "--release", "--quiet"])
                        .current_dir(root.join("guest-sdk"))
                        .status()
                        .expect("cargo runs");
                assert!(status.success(), "building guest-sdk failed");
            }
            root.join("target/wasm32-wasip2/release")
        })
        .clone()
}

/// A component built from the guest-sdk.
pub fn wasm(name: &str) -> PathBuf {
    wasm_dir().join(format!("{name}.wasm"))
}

/// A Python, JavaScript or Go tool from `scripts/build-polyglot`, built on first use; `None`
/// (the test skips) when the toolchains are not installed, except under `CI=true`.
pub fn polyglot(name: &str) -> Option<PathBuf> {
    static BUILT: OnceLock<bool> = OnceLock::new();
    let built = *BUILT.get_or_init(|| {
        if std::env::var_os("WARDEN_POLYGLOT_BUILT").is_some() {
            return true;
        }
        let status = Command::new(root().join("scripts/build-polyglot"))
            .current_dir(root())
            .status()
            .expect("scripts/build-polyglot runs");
        match status.code() {
            Some(0) => true,
            Some(3) if !crate::under_ci() => {
                eprintln!("skipped: componentize-py / componentize-js / go are not installed");
                false
            }
            _ => panic!("scripts/build-polyglot failed ({status})"),
        }
    });
    built.then(|| root().join(format!("target/polyglot/{name}.wasm")))
}
