//! A temp toolbox and home that every `warden` command of a test runs against.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The toolbox is `policies/` in `dir`, the home `home/`; the compile cache is the home's.
pub(crate) struct Env {
    pub dir: tempfile::TempDir,
    /// More of the environment each command gets.
    vars: Vec<(&'static str, &'static str)>,
}

impl Env {
    pub(crate) fn new() -> Self {
        let env = Self {
            dir: tempfile::tempdir().unwrap(),
            vars: Vec::new(),
        };
        std::fs::create_dir(env.toolbox()).unwrap();
        env
    }

    /// Every command gets `key=value` too.
    pub(crate) fn var(mut self, key: &'static str, value: &'static str) -> Self {
        self.vars.push((key, value));
        self
    }

    pub(crate) fn toolbox(&self) -> PathBuf {
        self.dir.path().join("policies")
    }

    pub(crate) fn warden(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_warden"))
            .args(args)
            .env("WARDEN_TOOLBOX", self.toolbox())
            .env("WARDEN_HOME", self.dir.path().join("home"))
            .env_remove("WARDEN_CACHE")
            .envs(self.vars.iter().copied())
            .output()
            .expect("warden runs")
    }

    /// The stdout of a command that must succeed.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.warden(args);
        assert!(
            out.status.success(),
            "warden {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

pub(crate) fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

pub(crate) fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}
