//! The integration tests of warden-core, in one binary (one link, not one per file): each
//! file beside this one is a module of it. Cargo.toml sets `autotests = false`, so a file not
//! named here is not built.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

mod dispatch;
mod session;
mod toolbox;
