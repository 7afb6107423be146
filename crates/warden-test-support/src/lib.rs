//! What the tests of several warden crates share (not published): the guest components built
//! from source, the scripted OpenAI-compatible server that stands in for a model provider, a
//! backend of its own executor kind whose tools are executors a test hands it, the socket calls
//! both sandboxes must allow and refuse, a message's outcome by name. It depends on warden-core
//! alone: what one executor's tests need lives in that executor's `tests/common`, so a change
//! to an executor rebuilds its own tests and its dependents', not every crate's.

#![forbid(unsafe_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failure here is the failing test's, and should panic it"
)]

pub mod backend;
pub mod guests;
mod machine;
pub mod scripted;
pub mod servers;
pub mod sockets;

pub use backend::TestBackend;
pub use machine::{is_root, under_ci};

/// A message's outcome as the call log names it: `"success"`, or its error's kind.
pub fn kind(m: &warden_core::ToolMessage) -> &'static str {
    warden_core::CallOutcome::of(m).as_str()
}

/// Asserts that `e` is a timeout in the one wording every part of warden gives it (the
/// dispatcher's, naming `limit`), with `timeout_ms`; a command's executor adds what became of
/// the command after it.
pub fn assert_timed_out(e: &warden_core::ToolError, limit: std::time::Duration) {
    let expected = warden_core::ToolError::timed_out(limit);
    assert_eq!(e.kind, warden_core::ErrorKind::Timeout, "{}", e.message);
    assert!(e.message.starts_with(&expected.message), "{}", e.message);
    assert_eq!(
        e.details["timeout_ms"], expected.details["timeout_ms"],
        "{}",
        e.message
    );
}
