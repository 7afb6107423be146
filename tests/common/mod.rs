//! Shared by the binary's end-to-end tests: the repository root and the guest components
//! (Rust, and the Go, Python and JavaScript ones of scripts/build-polyglot), built from source
//! on first use.

pub(crate) use warden_test_support::guests::{polyglot, root, wasm};

pub(crate) mod hang;
pub(crate) mod hostile;
pub(crate) mod registry;
pub(crate) mod terminal;
pub(crate) mod toolbox;
