//! warden's own id of each call it answers, beside the caller's `tool_call_id`: callers reuse
//! theirs (`call-1` in every batch file, a model's ids across runs), so records of two runs or
//! two replicas sharing one log could not be told apart by the caller's id alone.

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The next call id of this process: its [`instance`], `-`, and a count from 1.
pub fn next() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(1);
    format!("{}-{}", instance(), COUNT.fetch_add(1, Ordering::Relaxed))
}

/// This process's part of every call id it makes: 12 hex digits drawn at its first call.
/// Drawn from the keys the standard library seeds from the system's randomness for hash maps,
/// mixed with the process id and the time, so two processes (two runs, two replicas) do not
/// draw the same one short of chance (one in 2^48).
pub(crate) fn instance() -> &'static str {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let drawn = RandomState::new().hash_one((std::process::id(), nanos));
        format!("{:012x}", drawn & 0xffff_ffff_ffff)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_count_up_under_one_instance() {
        let (a, b) = (next(), next());
        assert_ne!(a, b);
        for id in [&a, &b] {
            let (instance_part, count) = id.rsplit_once('-').expect("instance-count");
            assert_eq!(instance_part, instance());
            assert_eq!(instance_part.len(), 12);
            assert!(count.parse::<u64>().is_ok(), "{id}");
        }
    }
}
