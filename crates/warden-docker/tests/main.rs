//! The integration tests of warden-docker, in one binary (one link, not one per file): each
//! file beside this one is a module of it but files.rs, a binary of its own (its process's
//! environment puts the engine in copy mode). Cargo.toml sets `autotests = false`, so a file
//! not named here or there is not built.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

#[macro_use]
mod common;

mod credentials;
mod debian;
mod docker;
mod gate;
mod lifecycle;
mod pool;
mod remote;
mod runtime;
mod session;
mod sockets;
mod transactions;
