//! What the machine running the tests offers: whether it is CI (where a missing capability
//! fails a test rather than skipping it) and whether the tests run as root.

/// True under `CI=true`: a test that cannot run here fails rather than saying it was skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// True when this process runs as root.
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}
