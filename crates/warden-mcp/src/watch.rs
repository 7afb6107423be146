//! Watching the toolbox folder: a changed, added or removed `*.toml` reloads the toolbox.

use crate::state::Shared;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// What identifies the policy files' state: each file's name, length and modification time.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The folder's fingerprint; `None` when it cannot be read now (out of descriptors, say):
/// a failed look is no change, and reloads nothing.
fn fingerprint(dir: &Path) -> Option<Fingerprint> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut files: Fingerprint = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .filter_map(|p| {
            let meta = std::fs::metadata(&p).ok()?;
            meta.is_file()
                .then(|| (p, meta.len(), meta.modified().ok()))
        })
        .collect();
    files.sort();
    Some(files)
}

/// Polls the folder until the server stops; runs as its own task.
pub(crate) fn spawn(shared: Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let dir = shared.options.watch.clone()?;
    let every = shared.options.poll_interval;
    Some(tokio::spawn(async move {
        let mut seen = fingerprint(&dir);
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let dir2 = dir.clone();
            let Ok(Some(now)) = tokio::task::spawn_blocking(move || fingerprint(&dir2)).await
            else {
                continue;
            };
            if Some(&now) != seen.as_ref() {
                seen = Some(now);
                tracing::info!("the policies in {} changed; reloading", dir.display());
                shared.reload().await;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_added_changed_and_removed_policies() {
        let dir = tempfile::tempdir().unwrap();
        let empty = fingerprint(dir.path()).unwrap();
        assert!(empty.is_empty());
        std::fs::write(dir.path().join("a.toml"), "x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let one = fingerprint(dir.path()).unwrap();
        assert_eq!(one.len(), 1);
        std::fs::write(dir.path().join("a.toml"), "xy").unwrap();
        assert_ne!(fingerprint(dir.path()).unwrap(), one);
        std::fs::remove_file(dir.path().join("a.toml")).unwrap();
        assert_eq!(fingerprint(dir.path()).unwrap(), empty);
        // A folder that cannot be read is no change.
        assert_eq!(fingerprint(&dir.path().join("gone")), None);
    }
}
