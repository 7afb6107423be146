//! Shared by the binary's end-to-end tests: the repository root and the guest components,
//! built from source on first use.

pub(crate) use warden_test_support::guests::{root, wasm};

pub(crate) mod registry;
pub(crate) mod terminal;
