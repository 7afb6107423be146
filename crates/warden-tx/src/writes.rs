//! What each tool wrote, from the store's records: `warden audit --usage`'s account of the
//! read-write roots, beside what the call log says of the calls.

use crate::changes::ChangeKind;
use crate::record::{CallRecord, State};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Paths a tool's summary names; the rest are counted.
const NAMED: usize = 20;

/// One tool's committed writes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolWrites {
    pub tool: String,
    /// Calls that committed changes.
    pub calls: u64,
    /// Of them, undone since (by `undo` or `rewind`).
    pub undone: u64,
    pub added: u64,
    pub modified: u64,
    pub removed: u64,
    /// The first paths written, root joined with path, each once.
    pub paths: Vec<PathBuf>,
    /// Distinct paths written, all of them.
    pub distinct_paths: u64,
}

/// Each tool's writes in `records` committed at or after `since_ns` (nanoseconds since the
/// epoch), by tool name.
pub(crate) fn by_tool(records: &[CallRecord], since_ns: u128) -> Vec<ToolWrites> {
    let mut tools: BTreeMap<&str, (ToolWrites, BTreeSet<PathBuf>)> = BTreeMap::new();
    for record in records.iter().filter(|r| r.committed_ns >= since_ns) {
        if record.state == State::Committing {
            continue;
        }
        let (writes, paths) = tools.entry(&record.tool).or_default();
        writes.calls += 1;
        writes.undone += u64::from(record.state == State::Undone);
        for step in &record.steps {
            match step.change.kind() {
                ChangeKind::Added => writes.added += 1,
                ChangeKind::Modified => writes.modified += 1,
                ChangeKind::Removed => writes.removed += 1,
            }
            if let Some(root) = record.roots.get(step.change.root) {
                paths.insert(root.join(&step.change.path));
            }
        }
    }
    tools
        .into_iter()
        .map(|(tool, (mut writes, paths))| {
            writes.tool = tool.to_owned();
            writes.distinct_paths = paths.len() as u64;
            writes.paths = paths.into_iter().take(NAMED).collect();
            writes
        })
        .collect()
}
