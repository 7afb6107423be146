//! A host tool built from policy text, run through the real helper.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{
    Backend, Denials, Executor, Invocation, Limits, Meter, Output, Policy, SessionId, ToolError,
    Usage,
};
use warden_host::{Helper, HostBackend};

pub(crate) fn backend() -> HostBackend {
    HostBackend::new(Helper {
        program: PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper")),
        args: Vec::new(),
    })
}

/// A folder for one test: the policy goes in it; `open` makes it reachable by nobody.
pub(crate) struct Place {
    pub dir: tempfile::TempDir,
}

impl Place {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        chmod(dir.path(), 0o755);
        Self { dir }
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A subfolder with `mode`, owned by `uid` when given.
    pub(crate) fn folder(&self, rel: &str, mode: u32, uid: Option<u32>) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(&p).expect("mkdir");
        chmod(&p, mode);
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&p, Some(uid), Some(uid)).expect("chown");
        }
        p
    }

    /// Loads the policy text as `tool.toml` in this place.
    pub(crate) fn tool(&self, text: &str) -> (Arc<dyn Executor>, Limits) {
        self.tool_on(text, backend())
    }

    /// Loads the policy text with `backend` (one that resolves test names, say).
    pub(crate) fn tool_on(&self, text: &str, backend: HostBackend) -> (Arc<dyn Executor>, Limits) {
        let path = self.path("tool.toml");
        std::fs::write(&path, text).expect("write policy");
        let policy = Arc::new(Policy::load(&path, &[&backend]).unwrap_or_else(|e| panic!("{e}")));
        let limits = policy.limits.resolve();
        let mut loaded = backend.load(&policy).unwrap_or_else(|e| panic!("{e}"));
        (loaded.tools.remove(0).executor, limits)
    }
}

pub(crate) fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub(crate) async fn call(
    tool: &Arc<dyn Executor>,
    limits: &Limits,
    args: Value,
) -> Result<Output, ToolError> {
    call_in(tool, limits, SessionId::fresh(), args).await
}

/// One call in `session`.
pub(crate) async fn call_in(
    tool: &Arc<dyn Executor>,
    limits: &Limits,
    session: SessionId,
    args: Value,
) -> Result<Output, ToolError> {
    call_denied(tool, limits, session, args).await.0
}

/// One call in `session`, and the destinations its sandbox was refused.
pub(crate) async fn call_denied(
    tool: &Arc<dyn Executor>,
    limits: &Limits,
    session: SessionId,
    args: Value,
) -> (Result<Output, ToolError>, Vec<String>) {
    let (result, denied, _) = call_metered(tool, limits, session, args).await;
    (result, denied)
}

/// One call in `session`, the destinations its sandbox was refused, and what it used.
pub(crate) async fn call_metered(
    tool: &Arc<dyn Executor>,
    limits: &Limits,
    session: SessionId,
    args: Value,
) -> (Result<Output, ToolError>, Vec<String>, Usage) {
    let denials = Denials::default();
    let usage = Meter::default();
    let result = tool
        .execute(Invocation {
            call_id: "call-1".into(),
            arguments: args,
            limits: *limits,
            deadline: std::time::Instant::now() + limits.timeout,
            denials: denials.clone(),
            session,
            usage: usage.clone(),
            output: None,
            caller_env: Default::default(),
            image: None,
            hold: None,
        })
        .await;
    let denied = denials.snapshot().kept;
    let destinations = denied.into_iter().map(|d| d.destination).collect();
    (result, destinations, usage.get())
}

/// Processes owned by `uid`.
pub(crate) fn processes_of(uid: u32) -> usize {
    pids_of(uid).len()
}

/// The pids of the processes owned by `uid`, in order.
pub(crate) fn pids_of(uid: u32) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

/// The names (`comm`) of the processes owned by `uid`.
pub(crate) fn commands_of(uid: u32) -> Vec<String> {
    pids_of(uid)
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
        .map(|comm| comm.trim_end().to_owned())
        .collect()
}

/// Processes owned by `uid` once those being killed are gone: a killed process stays in
/// `/proc` until the kernel has torn it down, longer on a busy machine (at most 5 s here).
pub(crate) fn processes_left(uid: u32) -> usize {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = processes_of(uid);
        if left == 0 || std::time::Instant::now() >= until {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A shell tool policy with `extra` lines under [executor] and `grants` under [grants].
/// The timeout is 20s unless `limits` writes one.
pub(crate) fn shell(extra: &str, grants: &str, limits: &str) -> String {
    let timeout = if limits.contains("timeout") {
        ""
    } else {
        "timeout = \"20s\""
    };
    format!(
        "[executor]\nkind = \"host\"\nname = \"shell\"\nargv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n{extra}\n\
         [grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n{grants}\n[limits]\n{timeout}\n{limits}\n"
    )
}

/// The text the model reads, success or not.
pub(crate) fn text(r: &Result<Output, ToolError>) -> String {
    match r {
        Ok(o) => o.content.clone(),
        Err(e) => format!("{}: {}", e.kind, e.message),
    }
}
