//! Which warden process owns something it leaves on the machine (a container, a call's view,
//! a commit in progress), so that a later warden cleans up after one that is gone and never
//! after a live one: `boot-id:pid:start-time`, since a pid alone is reused, after a reboot too.

use std::fs;

/// This process's owner id.
pub fn this_process() -> String {
    let pid = std::process::id();
    format!(
        "{}:{pid}:{}",
        boot_id(),
        start_time(pid).unwrap_or_default()
    )
}

/// Whether the process an owner id names still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// It runs on this machine, since its last boot.
    Running,
    /// It ran on this machine since its last boot, and is gone.
    Gone,
    /// Another machine's, or another boot's: not for this machine to judge.
    Elsewhere,
}

/// Whether `owner` (an id [`this_process`] made) still runs.
pub fn liveness(owner: &str) -> Liveness {
    let mut parts = owner.splitn(3, ':');
    let (Some(boot), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return Liveness::Elsewhere;
    };
    if boot.is_empty() || boot != boot_id() {
        return Liveness::Elsewhere;
    }
    match pid.parse::<u32>() {
        Ok(pid) if start_time(pid).as_deref() == Some(start) => Liveness::Running,
        _ => Liveness::Gone,
    }
}

/// The name of the `n`th thing the process `owner` ([`this_process`]) leaves in a folder
/// that other processes share (`OWNER-n`, the id's `:` written `_`): [`left_behind`] tells a
/// later warden whether it may remove it.
pub fn file_name(owner: &str, n: u64) -> String {
    format!("{}-{n}", owner.replace(':', "_"))
}

/// Whether `name`, a [`file_name`], was left by a process that no longer runs (or ran on
/// another boot or machine), so that a warden sweeping the folder removes it; a name of
/// another shape is taken for one.
pub fn left_behind(name: &str) -> bool {
    let name = name.replace('_', ":");
    let owner = name.rsplit_once('-').map_or("", |(owner, _)| owner);
    liveness(owner) != Liveness::Running
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_a_restarted_pid_is_gone_and_another_boot_is_elsewhere() {
        let id = this_process();
        assert_eq!(liveness(&id), Liveness::Running);
        let (head, _) = id.rsplit_once(':').expect("three parts");
        assert_eq!(
            liveness(&format!("{head}:1")),
            Liveness::Gone,
            "a restarted pid"
        );
        assert_eq!(liveness("garbage"), Liveness::Elsewhere);
        assert!(!left_behind(&file_name(&id, 7)), "this process's own");
        assert!(left_behind(&file_name(&format!("{head}:1"), 7)));
        assert!(left_behind("garbage"));
        assert_eq!(
            liveness(&format!("other-boot:{}:1", std::process::id())),
            Liveness::Elsewhere
        );
    }
}
