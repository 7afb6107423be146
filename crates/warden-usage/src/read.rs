//! Reading the call log back: the records of a window, across its rotated files, gathered
//! per tool. Only the fields the usage report needs are read, so a record that gains fields
//! stays readable, and a line cut short (a crash mid-write) is counted and passed over.

use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use warden_core::{Denials, Reached, Usage};

/// The call log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// Neither the log nor any rotated file of it exists.
    #[error("there is no call log at {}", .0.display())]
    Missing(PathBuf),
    #[error("cannot read the call log {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// One line of the log, as far as the report reads it.
#[derive(Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Line {
    Call(CallLine),
    Denied(DeniedLine),
    /// `policy` records and whatever a later warden writes: the report reads the current
    /// policies, not the logged ones.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct CallLine {
    ts_ms: u64,
    tool: String,
    outcome: String,
    duration_ms: f64,
    #[serde(default)]
    attempts: u32,
    #[serde(default)]
    usage: Usage,
    #[serde(default)]
    reached: Vec<Reached>,
    #[serde(default)]
    roots_opened: Vec<String>,
    /// A program of `warden exec`, not a call.
    #[serde(default)]
    exec: bool,
}

#[derive(Deserialize)]
struct DeniedLine {
    ts_ms: u64,
    tool: String,
    destination: String,
    reason: String,
}

/// What the log says of one tool in the window.
#[derive(Debug, Default)]
pub(crate) struct ToolSeen {
    /// Wall time of each call, in milliseconds.
    pub durations: Vec<f64>,
    /// How many of them were programs of `warden exec`.
    pub execs: u64,
    /// Failed calls by error kind.
    pub errors: BTreeMap<String, u64>,
    /// CPU summed over the calls that measured it.
    pub cpu_ms: Option<f64>,
    pub peak_memory_bytes: Option<u64>,
    pub net_bytes_out: u64,
    pub net_bytes_in: u64,
    /// Some call got as far as its sandbox (and so its environment).
    pub ran: bool,
    pub reached: HashSet<Reached>,
    /// Some call's list of destinations was cut at its bound.
    pub reached_cut: bool,
    /// Filesystem roots opened, by the path the tool sees.
    pub roots_opened: HashSet<String>,
    /// Some call's list of roots was cut at its bound.
    pub roots_cut: bool,
}

/// A destination refused to one tool: how often, and the last reason given.
#[derive(Debug, Default)]
pub(crate) struct RefusalSeen {
    pub times: u64,
    pub reason: String,
}

/// The log's records in the window.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub tools: BTreeMap<String, ToolSeen>,
    /// By tool, then destination.
    pub refused: BTreeMap<(String, String), RefusalSeen>,
    pub calls: u64,
    pub unreadable_lines: u64,
}

impl Seen {
    /// Reads `files` (oldest first; missing ones are passed over), keeping records written
    /// at or after `from_ms`.
    pub(crate) fn read(files: &[PathBuf], from_ms: u64) -> Result<Seen, UsageError> {
        let present: Vec<&PathBuf> = files.iter().filter(|f| f.exists()).collect();
        if present.is_empty() {
            let path = files.last().cloned().unwrap_or_default();
            return Err(UsageError::Missing(path));
        }
        let mut seen = Seen::default();
        for file in present {
            seen.read_file(file, from_ms)?;
        }
        Ok(seen)
    }

    fn read_file(&mut self, file: &Path, from_ms: u64) -> Result<(), UsageError> {
        let err = |source| UsageError::Read {
            path: file.to_owned(),
            error: source,
        };
        let reader = std::io::BufReader::new(std::fs::File::open(file).map_err(err)?);
        for line in reader.lines() {
            let line = line.map_err(err)?;
            match serde_json::from_str::<Line>(&line) {
                Ok(Line::Call(call)) if call.ts_ms >= from_ms => self.call(call),
                Ok(Line::Denied(d)) if d.ts_ms >= from_ms => {
                    let seen = self.refused.entry((d.tool, d.destination)).or_default();
                    seen.times += 1;
                    seen.reason = d.reason;
                }
                Ok(_) => {}
                Err(_) if line.trim().is_empty() => {}
                Err(_) => self.unreadable_lines += 1,
            }
        }
        Ok(())
    }

    fn call(&mut self, call: CallLine) {
        self.calls += 1;
        let tool = self.tools.entry(call.tool).or_default();
        tool.durations.push(call.duration_ms);
        tool.execs += u64::from(call.exec);
        if call.outcome != "success" {
            *tool.errors.entry(call.outcome).or_default() += 1;
        }
        let u = call.usage;
        if let Some(cpu) = u.cpu_ms {
            tool.cpu_ms = Some(tool.cpu_ms.unwrap_or(0.0) + cpu);
        }
        tool.peak_memory_bytes = tool.peak_memory_bytes.max(u.peak_memory_bytes);
        tool.net_bytes_out += u.net_bytes_out.unwrap_or(0);
        tool.net_bytes_in += u.net_bytes_in.unwrap_or(0);
        tool.ran |= call.attempts > 0;
        tool.reached_cut |= call.reached.len() >= Denials::KEPT;
        tool.reached.extend(call.reached);
        tool.roots_cut |= call.roots_opened.len() >= Denials::KEPT;
        tool.roots_opened.extend(call.roots_opened);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_of_an_older_warden_reads_with_its_root_count() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.jsonl");
        // `roots_opened_count` was the name of what is now `root_uses`.
        let old = r#"{"event":"call","ts_ms":1,"tool":"read-file","call_id":"c","outcome":"success","duration_ms":1.5,"attempts":1,"fuel":null,"roots_opened":["/workspace"],"roots_opened_count":5}"#;
        let new = old.replace("roots_opened_count", "root_uses");
        std::fs::write(&log, format!("{old}\n{new}\n")).unwrap();
        let seen = Seen::read(&[log], 0).unwrap();
        assert_eq!((seen.calls, seen.unreadable_lines), (2, 0));
        let opened = &seen.tools["read-file"].roots_opened;
        assert_eq!(opened.iter().collect::<Vec<_>>(), ["/workspace"]);
    }
}
