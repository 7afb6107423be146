//! A session shell's state as a snapshot keeps it: its working directory and exported
//! variables. The shell prints them (`env -0` by absolute path, the directory passed in a
//! variable of its own, through `base64`); warden parses what it printed and writes the
//! replay itself, every value quoted, so what a session prints can set variables and a
//! directory, never run code.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use warden_core::quoted;

/// The variable the state's command passes the working directory in.
const CWD: &str = "__WARDEN_CWD";

/// Variables a snapshot never keeps: the shell's own bookkeeping.
const SHELL_OWN: [&str; 5] = ["PWD", "OLDPWD", "SHLVL", "_", CWD];

/// The command, run in the session's shell, that prints its state; `command` and absolute
/// paths, so session functions named `env`, `base64` or `test` are not what runs.
pub const PRINT: &str = "for __warden_e in /usr/bin/env /bin/env; do \
    if command test -x \"$__warden_e\"; then \
    __WARDEN_CWD=$PWD \"$__warden_e\" -0 | \
    (for b in /usr/bin/base64 /bin/base64; do command test -x \"$b\" && exec \"$b\"; done); \
    break; fi; done; command unset __warden_e";

/// The working directory and exported variables of a session's shell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShellState {
    pub cwd: String,
    pub env: BTreeMap<String, String>,
}

impl ShellState {
    /// The state [`PRINT`] printed, the names `dropped` says left out; None when it printed
    /// no state (no `env` or `base64` in the sandbox, or something answered in its place).
    pub fn parse(printed: &str, dropped: impl Fn(&str) -> bool) -> Option<ShellState> {
        let bytes = warden_core::decode_lines(printed)?;
        let mut state = ShellState::default();
        for entry in bytes.split(|&b| b == 0).filter(|e| !e.is_empty()) {
            let entry = String::from_utf8_lossy(entry);
            let Some((name, value)) = entry.split_once('=') else {
                continue;
            };
            if name == CWD {
                state.cwd = value.to_owned();
            } else if is_name(name) && !SHELL_OWN.contains(&name) && !dropped(name) {
                state.env.insert(name.to_owned(), value.to_owned());
            }
        }
        (!state.cwd.is_empty()).then_some(state)
    }

    /// Shell text that makes a shell in state `now` this state: the variables it has and this
    /// one lacks unset (except the `kept` ones, which the policy sets), this one's exported,
    /// then its directory (or `/tmp`, where it is gone).
    pub fn replay(&self, now: &ShellState, kept: impl Fn(&str) -> bool) -> String {
        let mut text = String::new();
        for name in now.env.keys() {
            if !self.env.contains_key(name) && !kept(name) {
                text.push_str(&format!("command unset {name}; "));
            }
        }
        for (name, value) in &self.env {
            text.push_str(&format!("command export {name}={}; ", quoted(value)));
        }
        text.push_str(&format!(
            "command cd -- {} 2>/dev/null || command cd /tmp",
            quoted(&self.cwd)
        ));
        text
    }
}

/// A shell variable's name: a letter or `_`, then letters, digits and `_`.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    fn printed(entries: &[&str]) -> String {
        let mut bytes = Vec::new();
        for e in entries {
            bytes.extend_from_slice(e.as_bytes());
            bytes.push(0);
        }
        STANDARD.encode(bytes)
    }

    #[test]
    fn the_state_is_parsed_and_its_replay_quotes_every_value() {
        let out = printed(&[
            "__WARDEN_CWD=/tmp/it's here",
            "A=1",
            "MULTI=a\nb",
            "SECRET=hunter2",
            "bad name=x",
            "PWD=/tmp",
            "TRICK=$(touch /tmp/pwned)'; rm -rf /",
        ]);
        let state = ShellState::parse(&out, |n| n == "SECRET").expect("a state");
        assert_eq!(state.cwd, "/tmp/it's here");
        let names: Vec<&str> = state.env.keys().map(String::as_str).collect();
        assert_eq!(names, ["A", "MULTI", "TRICK"]);
        let now = ShellState {
            cwd: "/".into(),
            env: [
                ("LATER".to_owned(), "x".to_owned()),
                ("PATH".to_owned(), "/bin".to_owned()),
            ]
            .into(),
        };
        let replay = state.replay(&now, |n| n == "PATH");
        assert_eq!(
            replay,
            "command unset LATER; command export A='1'; command export MULTI='a\nb'; \
             command export TRICK='$(touch /tmp/pwned)'\\''; rm -rf /'; \
             command cd -- '/tmp/it'\\''s here' 2>/dev/null || command cd /tmp"
        );
        assert!(ShellState::parse("not base64 at all!", |_| false).is_none());
        assert!(
            ShellState::parse(&printed(&["A=1"]), |_| false).is_none(),
            "no directory"
        );
    }
}
