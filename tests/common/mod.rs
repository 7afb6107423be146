//! Shared by the binary's end-to-end tests: the repository root and the guest components,
//! built from source on first use.
#![allow(dead_code)]

#[path = "../support/guests.rs"]
mod guests;

pub use guests::{root, wasm};
