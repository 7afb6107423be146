//! The integration tests of warden, in one binary (one link, not one per file): each
//! file beside this one is a module of it. Cargo.toml sets `autotests = false`, so a file not
//! named here is not built.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

mod common;

mod agent;
mod cli;
mod docs;
mod exec;
mod host;
mod http;
mod ledger;
mod oci;
mod session_tx;
mod shell;
mod wasip1;
mod wasm_tx;
