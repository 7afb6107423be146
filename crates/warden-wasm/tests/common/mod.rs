//! Shared by the integration tests: fixtures built from source once, toolboxes in temp dirs
//! (the bench), the host variables the tests grant.

use std::sync::Once;
use warden_core::{Dispatcher, ToolCall, ToolMessage};

pub(crate) use warden_test_support::guests::{polyglot, root, wasm};
// The agent's tests include it too (by path), and use parts these do not.
#[allow(dead_code, reason = "shared with the agent's tests")]
mod bench;

pub(crate) use bench::Bench;
pub(crate) use warden_test_support::kind;

/// A host variable no policy grants: a sandbox that shows it leaked it.
pub(crate) const SECRET: &str = "warden-test-marker-secret-7f3a";
/// The host variables the tests read through grants, each with a value that never changes;
/// [`host_vars`] sets them.
const HOST_VARS: [(&str, &str); 4] = [
    ("WARDEN_TEST_SECRET", SECRET),
    ("WARDEN_TEST_GRANTED", "from-host"),
    ("WARDEN_TEST_TOKEN", crate::batch::TOKEN),
    ("WARDEN_TEST_API_TOKEN", crate::network::TOKEN),
];

/// Sets [`HOST_VARS`], once per process: `cargo test` runs the tests as threads of one
/// process, where a `set_var` races any other thread reading the environment, so it happens
/// once rather than in each test that needs them.
pub(crate) fn host_vars() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        for (name, value) in HOST_VARS {
            // SAFETY: each is set once, to a value that never changes; nothing in the tests
            // writes the environment at the same time (the one variable a test changes is
            // its own), and nothing reads these names before a test has set them.
            unsafe { std::env::set_var(name, value) };
        }
    });
}

/// Runs one call on a fresh runtime.
pub(crate) async fn call(d: &Dispatcher, tool: &str, args: serde_json::Value) -> ToolMessage {
    d.call(ToolCall::new("t1", tool, &args)).await
}
