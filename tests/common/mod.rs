//! Shared by the binary's end-to-end tests: the repository root and the guest components
//! (Rust, and the Go, Python and JavaScript ones of scripts/build-polyglot), built from source
//! on first use.

pub(crate) use warden_test_support::guests::{polyglot, root, wasm};

pub(crate) mod hang;
pub(crate) mod hostile;
pub(crate) mod registry;
pub(crate) mod terminal;
pub(crate) mod toolbox;

/// Pids of the processes owned by `uid`.
pub(crate) fn pids_of(uid: u32) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            (e.metadata().ok()?.uid() == uid).then_some(pid)
        })
        .collect()
}

/// How many processes `uid` runs.
pub(crate) fn processes_of(uid: u32) -> usize {
    pids_of(uid).len()
}

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
