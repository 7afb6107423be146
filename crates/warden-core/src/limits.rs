//! Limits: what a policy writes, and the safe defaults for what it does not.

use crate::units::{ByteSize, HumanDuration};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Wall-clock time of one call when the policy writes none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Memory of one call's sandbox when the policy writes none.
pub const DEFAULT_MEMORY: u64 = 256 << 20;
/// Bytes of content and of each captured stream when the policy writes none.
pub const DEFAULT_OUTPUT: u64 = 1 << 20;
/// Bytes of one HTTP response body when the policy writes none.
pub const DEFAULT_RESPONSE: u64 = 16 << 20;
/// Calls of one tool in flight at once when the policy writes none.
pub const DEFAULT_CONCURRENCY: u32 = 16;

/// Limits as a policy file writes them: every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    pub timeout: Option<HumanDuration>,
    pub memory: Option<ByteSize>,
    /// WebAssembly instructions (roughly); deterministic CPU bound. Off unless written.
    pub fuel: Option<u64>,
    pub output: Option<ByteSize>,
    /// Bytes of each HTTP response body a tool may read.
    pub response: Option<ByteSize>,
    pub concurrency: Option<u32>,
}

impl LimitsSpec {
    /// `self` with every field that `over` writes replaced by `over`'s.
    pub fn overlay(&self, over: &LimitsSpec) -> LimitsSpec {
        LimitsSpec {
            timeout: over.timeout.or(self.timeout),
            memory: over.memory.or(self.memory),
            fuel: over.fuel.or(self.fuel),
            output: over.output.or(self.output),
            response: over.response.or(self.response),
            concurrency: over.concurrency.or(self.concurrency),
        }
    }

    /// The limits in force: what is written, and the defaults for the rest.
    pub fn resolve(&self) -> Limits {
        Limits {
            timeout: self.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
            memory: self.memory.map_or(DEFAULT_MEMORY, |b| b.0),
            fuel: self.fuel,
            output: self.output.map_or(DEFAULT_OUTPUT, |b| b.0),
            response: self.response.map_or(DEFAULT_RESPONSE, |b| b.0),
            concurrency: self.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
        }
    }

    /// Rejects limits that cannot be honoured.
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout.is_some_and(|t| t.0.is_zero()) {
            return Err("limits.timeout must be more than zero".into());
        }
        if self.memory.is_some_and(|m| m.0 < (1 << 20)) {
            return Err("limits.memory must be at least 1MiB".into());
        }
        if self.concurrency == Some(0) {
            return Err("limits.concurrency must be at least 1".into());
        }
        if self.fuel == Some(0) {
            return Err(
                "limits.fuel must be more than zero (leave it out for no fuel limit)".into(),
            );
        }
        Ok(())
    }
}

/// The limits in force for one tool: never absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
    /// Bytes of linear memory (wasm) or address space (processes).
    pub memory: u64,
    pub fuel: Option<u64>,
    /// Bytes of content, and of each captured stream.
    pub output: u64,
    /// Bytes of each HTTP response body.
    pub response: u64,
    pub concurrency: u32,
}

impl Default for Limits {
    fn default() -> Self {
        LimitsSpec::default().resolve()
    }
}

impl Limits {
    /// The limits as JSON, for the audit and call details.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "timeout": HumanDuration(self.timeout).to_string(),
            "memory": ByteSize(self.memory).to_string(),
            "fuel": self.fuel,
            "output": ByteSize(self.output).to_string(),
            "response": ByteSize(self.response).to_string(),
            "concurrency": self.concurrency,
        })
    }
}

/// Keeps at most `limit` bytes of `text` (on a character boundary) and says how much was cut.
pub fn cap_text(text: &str, limit: u64) -> String {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = text[..end].to_owned();
    out.push_str(&truncation_marker((text.len() - end) as u64));
    out
}

/// The visible marker that ends truncated output.
pub fn truncation_marker(dropped: u64) -> String {
    format!("\n[warden: output truncated, {dropped} more bytes not shown]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_always_apply() {
        let l = LimitsSpec::default().resolve();
        assert_eq!(l.timeout, DEFAULT_TIMEOUT);
        assert_eq!(l.memory, DEFAULT_MEMORY);
        assert_eq!(l.output, DEFAULT_OUTPUT);
        assert_eq!(l.fuel, None);
    }

    #[test]
    fn overlay_replaces_only_written_fields() {
        let base: LimitsSpec = toml::from_str("timeout = \"5s\"\nmemory = \"32MiB\"").unwrap();
        let over: LimitsSpec = toml::from_str("timeout = \"1s\"").unwrap();
        let l = base.overlay(&over).resolve();
        assert_eq!(l.timeout, Duration::from_secs(1));
        assert_eq!(l.memory, 32 << 20);
    }

    #[test]
    fn capping_keeps_a_marker_and_char_boundaries() {
        assert_eq!(cap_text("short", 10), "short");
        let capped = cap_text("ééééé", 3);
        assert!(capped.starts_with('é'));
        assert!(capped.contains("output truncated, 8 more bytes"));
    }
}
