//! The usage report (`warden audit --usage`): the call log of a window, across its rotated
//! files, turned into per-tool figures, the grants of the current policies that no call
//! used, and the destinations tools kept asking for without a grant.

#![forbid(unsafe_code)]

mod grants;
mod read;

pub use grants::{Suggestion, UnusedGrant};
pub use read::UsageError;

use read::{Seen, ToolSeen};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warden_core::Toolbox;

/// A destination refused this often is listed: a tool that keeps asking for a host it lacks.
const REPEATED: u64 = 2;

/// What the call log says of a window, read against the current policies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    /// The window's start, in milliseconds since the Unix epoch (0: the whole log).
    pub since_ms: u64,
    /// Call records read in the window.
    pub calls: u64,
    /// Lines that are not records (a line cut short by a crash), passed over.
    pub unreadable_lines: u64,
    /// Every tool with calls in the window, by name.
    pub tools: Vec<ToolUsage>,
    /// Grants of the current policies that no call in the window used.
    pub unused_grants: Vec<UnusedGrant>,
    /// A narrower `[grants]` for each policy that has one.
    pub suggestions: Vec<Suggestion>,
    /// Destinations refused to a tool at least twice in the window, most often first.
    pub refused_repeatedly: Vec<RepeatedRefusal>,
    /// What limits the findings: lists cut at their bound, roots that cannot be observed.
    pub notes: Vec<String>,
}

/// One tool's calls in the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolUsage {
    pub tool: String,
    pub calls: u64,
    /// How many of the calls were programs of `warden exec`.
    pub execs: u64,
    /// Failed calls by error kind.
    pub errors: BTreeMap<String, u64>,
    /// Wall time: the median call and the 95th percentile, in milliseconds.
    pub wall_ms_p50: f64,
    pub wall_ms_p95: f64,
    /// CPU of the calls that measured it, summed; written to the microsecond.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "warden_core::serialize_ms"
    )]
    pub cpu_ms: Option<f64>,
    /// The largest peak of any call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    pub net_bytes_out: u64,
    pub net_bytes_in: u64,
    /// Distinct destinations reached.
    pub destinations: usize,
}

/// A destination a tool was refused again and again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepeatedRefusal {
    pub tool: String,
    pub destination: String,
    pub times: u64,
    /// The last reason given.
    pub reason: String,
}

impl UsageReport {
    /// Reads `files` (a log's files oldest first, as [`warden_core::Rotation::files`] lists them),
    /// keeping the records of the last `since` (all of them without it), and reads them
    /// against the policies of `toolbox`.
    pub fn read(
        files: &[PathBuf],
        since: Option<Duration>,
        toolbox: &Toolbox,
    ) -> Result<UsageReport, UsageError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let since_ms = since.map_or(0, |s| now_ms.saturating_sub(s.as_millis() as u64));
        let seen = Seen::read(files, since_ms)?;
        Ok(Self::from_seen(seen, since_ms, toolbox))
    }

    fn from_seen(seen: Seen, since_ms: u64, toolbox: &Toolbox) -> UsageReport {
        let tools = seen
            .tools
            .iter()
            .map(|(name, t)| tool_usage(name, t))
            .collect();
        let mut unused_grants = Vec::new();
        let mut suggestions = Vec::new();
        let mut notes = Vec::new();
        for loaded in toolbox.policies() {
            let policy = &loaded.policy;
            let names: Vec<&str> = toolbox
                .tools()
                .filter(|t| Arc::ptr_eq(&t.policy, policy))
                .map(|t| t.spec.name.as_str())
                .collect();
            let of_policy: Vec<&ToolSeen> =
                names.iter().filter_map(|n| seen.tools.get(*n)).collect();
            if of_policy.iter().any(|t| t.reached_cut) {
                notes.push(format!(
                    "{}: some calls reached more destinations than a record keeps; a host \
                     named unused here may have been reached",
                    policy.path.display()
                ));
            }
            let observed = loaded.capabilities.roots_observed;
            if observed && of_policy.iter().any(|t| t.roots_cut) {
                notes.push(format!(
                    "{}: some calls opened more roots than a record keeps; a root named unused \
                     here may have been opened",
                    policy.path.display()
                ));
            }
            if !observed && !policy.grants.fs.is_empty() {
                notes.push(format!(
                    "{}: its executor ({}) does not report which filesystem roots a call \
                     opened, so none of its roots is named unused",
                    policy.path.display(),
                    policy.kind.value
                ));
            }
            let (unused, suggestion) = grants::review(policy, &of_policy, observed);
            unused_grants.extend(unused);
            suggestions.extend(suggestion);
        }
        let mut refused_repeatedly: Vec<RepeatedRefusal> = seen
            .refused
            .into_iter()
            .filter(|(_, r)| r.times >= REPEATED)
            .map(|((tool, destination), r)| RepeatedRefusal {
                tool,
                destination,
                times: r.times,
                reason: r.reason,
            })
            .collect();
        refused_repeatedly.sort_by_key(|r| std::cmp::Reverse(r.times));
        UsageReport {
            since_ms,
            calls: seen.calls,
            unreadable_lines: seen.unreadable_lines,
            tools,
            unused_grants,
            suggestions,
            refused_repeatedly,
            notes,
        }
    }
}

fn tool_usage(name: &str, t: &ToolSeen) -> ToolUsage {
    let mut wall = t.durations.clone();
    wall.sort_by(f64::total_cmp);
    ToolUsage {
        tool: name.to_owned(),
        calls: wall.len() as u64,
        execs: t.execs,
        errors: t.errors.clone(),
        wall_ms_p50: percentile(&wall, 50),
        wall_ms_p95: percentile(&wall, 95),
        cpu_ms: t.cpu_ms,
        peak_memory_bytes: t.peak_memory_bytes,
        net_bytes_out: t.net_bytes_out,
        net_bytes_in: t.net_bytes_in,
        destinations: t.reached.len(),
    }
}

/// The nearest-rank percentile of sorted values (0 for none).
fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summed_cpu_is_written_to_the_microsecond() {
        // `audit --usage --json` sums what the calls measured.
        let tool = ToolUsage {
            tool: "t".into(),
            calls: 3,
            execs: 0,
            errors: Default::default(),
            wall_ms_p50: 1.0,
            wall_ms_p95: 1.0,
            cpu_ms: Some(0.1 + 0.2 + 3.4011940000000003),
            peak_memory_bytes: None,
            net_bytes_out: 0,
            net_bytes_in: 0,
            destinations: 0,
        };
        let json = serde_json::to_value(&tool).unwrap();
        assert_eq!(json["cpu_ms"].to_string(), "3.701");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50), 50.0);
        assert_eq!(percentile(&v, 95), 95.0);
        assert_eq!(percentile(&[7.0], 95), 7.0);
        assert_eq!(percentile(&[], 50), 0.0);
    }
}
