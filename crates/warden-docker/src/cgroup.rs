//! A running container's CPU and memory counters, read from its cgroup's files on this
//! machine. The engine's stats endpoint has the same figures but answers at its collector's
//! next tick (up to a second on Docker 20.10, `one-shot` or not), which every call would pay,
//! and it cannot start a new memory peak per session command. So warden finds the container's
//! cgroup through its first process (`/proc/PID/cgroup`, checked to name the container, so a
//! pid of another machine's engine never reads a stranger's counters) and reads:
//!
//! | | CPU | memory peak | new peak per command |
//! |---|---|---|---|
//! | cgroup v1 | `cpuacct.usage` | `memory.max_usage_in_bytes` | written to, as root |
//! | cgroup v2 | `cpu.stat` `usage_usec` | `memory.peak` (Linux 5.19) | no |
//!
//! Page cache and tmpfs files count in the memory figures, as the memory limit counts them.
//! For an engine elsewhere ([`crate::Place::Remote`], loopback tcp included) they are not
//! looked for, and where the files cannot be found, the figures are left out: no figures
//! rather than a stranger's.

use std::path::{Path, PathBuf};

/// Where one container's counters are.
#[derive(Debug, Clone)]
pub(crate) struct Cgroup {
    cpu: Cpu,
    peak: Option<PathBuf>,
}

#[derive(Debug, Clone)]
enum Cpu {
    /// cgroup v1's `cpuacct.usage`: nanoseconds.
    Nanos(PathBuf),
    /// cgroup v2's `cpu.stat`: a `usage_usec` line.
    Stat(PathBuf),
}

impl Cgroup {
    /// The cgroup of container `id`, whose first process is `pid` as this machine sees it.
    pub(crate) fn of(pid: i64, id: &str) -> Option<Cgroup> {
        let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mounts = Mount::all(&mountinfo);
        // `hierarchy:controllers:path`; v2's line has no controllers.
        let dir = |controller: Option<&str>| {
            membership.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                if !path.contains(id) {
                    return None;
                }
                let mount = match controller {
                    Some(c) if controllers.split(',').any(|x| x == c) => mounts
                        .iter()
                        .find(|m| m.controllers.iter().any(|x| x == c))?,
                    None if controllers.is_empty() => mounts.iter().find(|m| m.unified)?,
                    _ => return None,
                };
                mount.dir(path)
            })
        };
        if let (Some(cpu), Some(memory)) = (dir(Some("cpuacct")), dir(Some("memory"))) {
            return Some(Cgroup {
                cpu: Cpu::Nanos(cpu.join("cpuacct.usage")),
                peak: Some(memory.join("memory.max_usage_in_bytes")),
            });
        }
        let unified = dir(None)?;
        let peak = unified.join("memory.peak");
        Some(Cgroup {
            cpu: Cpu::Stat(unified.join("cpu.stat")),
            peak: peak.exists().then_some(peak),
        })
    }

    /// CPU used in the container so far, in milliseconds.
    pub(crate) fn cpu_ms(&self) -> Option<f64> {
        match &self.cpu {
            Cpu::Nanos(file) => number(file).map(|ns| ns as f64 / 1e6),
            Cpu::Stat(file) => std::fs::read_to_string(file)
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|us| us.trim().parse::<u64>().ok())
                .map(|us| us as f64 / 1e3),
        }
    }

    /// The high-water mark of its memory: since it started, or since [`Cgroup::new_peak`].
    pub(crate) fn peak(&self) -> Option<u64> {
        number(self.peak.as_ref()?)
    }

    /// Starts a new high-water mark from the memory in use now; false when this cgroup
    /// cannot (v2, or not root).
    pub(crate) fn new_peak(&self) -> bool {
        match (&self.cpu, &self.peak) {
            (Cpu::Nanos(_), Some(file)) => std::fs::write(file, "0").is_ok(),
            _ => false,
        }
    }
}

fn number(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// A cgroup filesystem mounted on this machine.
struct Mount {
    /// The cgroup its root shows (`/` unless mounted from inside a namespace).
    root: String,
    point: PathBuf,
    /// v1: the controllers it holds; empty for v2.
    controllers: Vec<String>,
    unified: bool,
}

impl Mount {
    /// The cgroup mounts of `/proc/self/mountinfo`: `id parent dev root point opts … -
    /// fstype source superopts`.
    fn all(mountinfo: &str) -> Vec<Mount> {
        mountinfo
            .lines()
            .filter_map(|line| {
                let (head, tail) = line.split_once(" - ")?;
                let head: Vec<&str> = head.split(' ').collect();
                let mut tail = tail.split(' ');
                let (fstype, _, superopts) = (tail.next()?, tail.next()?, tail.next()?);
                let (root, point) = (head.get(3)?, head.get(4)?);
                let controllers = match fstype {
                    "cgroup" => superopts.split(',').map(str::to_owned).collect(),
                    "cgroup2" => Vec::new(),
                    _ => return None,
                };
                Some(Mount {
                    root: (*root).to_owned(),
                    point: PathBuf::from(point),
                    controllers,
                    unified: fstype == "cgroup2",
                })
            })
            .collect()
    }

    /// Where cgroup `path` shows under this mount.
    fn dir(&self, path: &str) -> Option<PathBuf> {
        let below = path.strip_prefix(self.root.trim_end_matches('/'))?;
        Some(self.point.join(below.trim_start_matches('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_of_both_versions_are_found_and_map_paths() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                    32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                    35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                    40 31 0:37 /inner /mnt/unified rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let mounts = Mount::all(info);
        assert_eq!(mounts.len(), 3);
        assert!(mounts[0].controllers.iter().any(|c| c == "cpuacct"));
        assert_eq!(
            mounts[1].dir("/docker/abc"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/docker/abc"))
        );
        assert!(mounts[2].unified);
        assert_eq!(
            mounts[2].dir("/inner/system.slice/docker-abc.scope"),
            Some(PathBuf::from("/mnt/unified/system.slice/docker-abc.scope"))
        );
        assert_eq!(mounts[2].dir("/elsewhere"), None);
    }
}
