//! The `[executor]` of `kind = "wasm"`: which component runs, its pin, and where its WIT docs
//! are. Everything else a component may do is in the policy's grants and limits.

use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;
use warden_core::{Located, Policy, PolicyError};

/// A WebAssembly component tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmConfig {
    /// The component file, resolved against the policy's folder (it may not exist if pinned).
    pub component: Located<PathBuf>,
    /// The pinned sha256 (lowercase hex); `None` runs unpinned, flagged by the audit.
    pub sha256: Option<Located<String>>,
    /// A folder of WIT files whose doc comments describe the tools.
    pub wit: Option<Located<PathBuf>>,
    /// The tool name of a command component (`wasi:cli/run`).
    pub name: Option<String>,
    /// The description of a command component.
    pub description: Option<String>,
}

/// The `[executor]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WasmSpec {
    component: Option<Spanned<String>>,
    sha256: Option<Spanned<String>>,
    wit: Option<Spanned<String>>,
    name: Option<String>,
    description: Option<String>,
}

impl WasmConfig {
    /// Parses and checks the policy's `[executor]` table.
    pub fn from_policy(policy: &Policy) -> Result<WasmConfig, PolicyError> {
        let table = &policy.executor;
        let spec: WasmSpec = table.parse()?;
        let component = spec.component.map(|c| table.located(c)).ok_or_else(|| {
            table.error(
                table.kind_line(),
                "a wasm executor needs `component = \"path/to/tool.wasm\"`",
            )
        })?;
        let sha256 = spec.sha256.map(|s| table.located(s));
        if let Some(pin) = &sha256 {
            let hex = pin.value.len() == 64
                && pin
                    .value
                    .chars()
                    .all(|c| matches!(c, '0'..='9' | 'a'..='f'));
            if !hex {
                return Err(table.error(
                    pin.line,
                    "sha256 must be 64 lowercase hex digits (`warden pin` writes it)",
                ));
            }
        }
        let wit = spec.wit.map(|w| {
            let w = table.located(w);
            Located {
                value: table.path(&w.value),
                line: w.line,
            }
        });
        if let Some(w) = &wit
            && !w.value.exists()
        {
            return Err(table.error(
                w.line,
                format!(
                    "the WIT folder {} does not exist: point `wit` at the folder of the tool's \
                     .wit files (it documents the tool's functions), or remove the line",
                    w.value.display()
                ),
            ));
        }
        Ok(WasmConfig {
            component: Located {
                value: table.path(&component.value),
                line: component.line,
            },
            sha256,
            wit,
            name: spec.name,
            description: spec.description,
        })
    }
}
