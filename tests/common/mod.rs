//! Shared by the binary's end-to-end tests: the repository root and the guest components
//! (Rust, and the Go, Python and JavaScript ones of scripts/build-polyglot), built from source
//! on first use.

pub(crate) use warden_test_support::guests::{polyglot, root, wasm};

pub(crate) mod hang;
pub(crate) mod hostile;
pub(crate) mod registry;
pub(crate) mod terminal;
pub(crate) mod toolbox;

/// The answer to a `sleep` of `ms` in flight when `warden serve` was told to stop: a success
/// only for the short sleep, else `unavailable` (cancelled at the drain's deadline, or refused
/// had it come after the signal). True for a success.
pub(crate) fn answered_while_stopping(ms: u64, result: &serde_json::Value) -> bool {
    if result["isError"] == false {
        assert_eq!(ms, 200, "a ten-minute sleep cannot have finished: {result}");
        return true;
    }
    assert_eq!(
        result["_meta"]["warden/error"]["kind"], "unavailable",
        "{result}"
    );
    false
}
