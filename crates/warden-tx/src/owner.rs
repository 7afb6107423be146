//! Which process made a view or a commit record, so that the next warden removes what a
//! warden that is gone left, and never what a live one (another `warden call` sharing the
//! home) is using: `boot-id:pid:start-time`, since a pid alone is reused.

use std::fs;

/// This process's owner id.
pub(crate) fn this_process() -> String {
    let pid = std::process::id();
    format!(
        "{}:{pid}:{}",
        boot_id(),
        start_time(pid).unwrap_or_default()
    )
}

/// True when `owner` ran on this machine since its last boot and is gone. An owner of
/// another boot is gone too: nothing of it runs.
pub(crate) fn gone(owner: &str) -> bool {
    let mut parts = owner.splitn(3, ':');
    let (Some(boot), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return true;
    };
    if boot != boot_id() {
        return true;
    }
    pid.parse::<u32>()
        .map_or(true, |pid| start_time(pid).as_deref() != Some(start))
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(str::to_owned)
}
