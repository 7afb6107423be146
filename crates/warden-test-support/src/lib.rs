//! What warden's tests share (not published): the guest components built from source, the
//! scripted OpenAI-compatible server that stands in for a model provider, a backend of its own
//! executor kind whose tools are executors a test hands it, and the socket calls both
//! sandboxes must allow and refuse.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failure here is the failing test's, and should panic it"
)]

pub mod backend;
pub mod guests;
pub mod scripted;
pub mod servers;
pub mod sockets;

pub use backend::TestBackend;
