//! Stopping a command that ran past its deadline without taking its shell down: the processes
//! the shell started for it — its children that were not there when the command began, and
//! everything below them — are killed, and the shell, whose wait on them ends, prints the
//! command's end as it would have. The working directory, variables and files stay. A command
//! that is the shell's own work (a loop of builtins) has no such process, and a loop that
//! starts a new one each time it loses one does not end: both are left to the caller, which
//! then takes the shell down as before. Background jobs of earlier commands are the shell's
//! children from before, and are kept.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::collections::HashSet;

/// How many times the new processes are looked for and killed: a process being forked while
/// the tree is read is caught by the next round.
const ROUNDS: usize = 3;

/// A shell's children at one moment, as this machine's `/proc` shows them.
#[derive(Debug, Clone, Default)]
pub struct Children(HashSet<i32>);

impl Children {
    /// The children of process `shell` now; `None` when `/proc` does not show it.
    pub fn of(shell: i32) -> Option<Children> {
        children(shell).map(Children)
    }

    /// The one child of process `pid` (a shell under an init of its own), if it has one.
    pub fn only_child(pid: i32) -> Option<i32> {
        let found = children(pid)?;
        let mut found = found.into_iter();
        match (found.next(), found.next()) {
            (Some(child), None) => Some(child),
            _ => None,
        }
    }

    /// Kills every child of `shell` that is not one of these, with all its descendants; true
    /// when there was one to kill.
    pub fn kill_new(&self, shell: i32) -> bool {
        let mut any = false;
        for _ in 0..ROUNDS {
            let Some(now) = children(shell) else {
                break;
            };
            let mut tree: Vec<i32> = now.difference(&self.0).copied().collect();
            if tree.is_empty() {
                break;
            }
            any = true;
            // Parents before children: a killed process forks no more.
            let mut at = 0;
            while at < tree.len() {
                let pid = tree[at];
                if let Some(below) = children(pid) {
                    tree.extend(below);
                }
                at += 1;
            }
            for pid in tree {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        any
    }
}

/// Kills process `shell` and everything below it (a shell beside a session's, its command
/// past its deadline): its processes first, so that it forks no more of them.
pub fn kill_tree(shell: i32) {
    // Never a process group, nor every process.
    if shell <= 1 {
        return;
    }
    Children::default().kill_new(shell);
    let _ = kill(Pid::from_raw(shell), Signal::SIGKILL);
}

/// CPU of process `pid` and of the children it waited for, in milliseconds, as `/proc`
/// shows it; with `namespace`, only while `pid` is in that PID namespace (a pid reused
/// elsewhere is not read).
pub fn cpu_ms(pid: i32, namespace: Option<&std::path::Path>) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    if let Some(namespace) = namespace
        && std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()? != namespace
    {
        return None;
    }
    // Fields 14 to 17: utime, stime, cutime, cstime, in clock ticks. The command name
    // (field 2) may hold spaces and parentheses: count from its end, field 3 first.
    let rest = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|t| t.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)?;
    Some(ticks as f64 * 1e3 / per_second as f64)
}

/// The children of process `pid`, every thread's (`/proc/PID/task/*/children`).
fn children(pid: i32) -> Option<HashSet<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut found = HashSet::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        found.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    /// `pid`'s state letter in `/proc` (`Z` once it is a zombie), `None` once reaped.
    fn state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..].trim_start().chars().next()
    }

    fn children_when(pid: i32, at_least: usize) -> HashSet<i32> {
        loop {
            let now = children(pid).expect("/proc shows the shell");
            if now.len() >= at_least {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn only_the_processes_started_since_are_killed_with_what_they_started() {
        let mut shell = Command::new("/bin/sh")
            .args([
                "-c",
                "sleep 30 & read x; sh -c 'sleep 30; :' & sleep 30 & wait",
            ])
            .stdin(Stdio::piped())
            .spawn()
            .expect("sh runs");
        let pid = shell.id() as i32;
        let before = Children(children_when(pid, 1));
        drop(shell.stdin.take());
        let later = children_when(pid, 3);
        let new: Vec<i32> = later.difference(&before.0).copied().collect();
        // `sh -c` forks its sleep in its own time.
        let grandchildren: Vec<i32> = loop {
            let below: Vec<i32> = new.iter().filter_map(|&p| children(p)).flatten().collect();
            if !below.is_empty() {
                break below;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(before.kill_new(pid));
        for pid in new.iter().chain(&grandchildren) {
            while !matches!(state(*pid), None | Some('Z')) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // The job from before lives on, and the shell still waits for it.
        for &job in &before.0 {
            assert!(matches!(state(job), Some(s) if s != 'Z'), "{job} was kept");
            let _ = kill(Pid::from_raw(job), Signal::SIGKILL);
        }
        shell.wait().expect("the shell ends once its jobs are gone");
        assert!(!Children::default().kill_new(pid), "nothing left to kill");
    }
}
