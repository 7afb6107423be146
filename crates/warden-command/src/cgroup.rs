//! A sandbox's CPU and memory counters, read from its cgroup's files on this machine.
//!
//! A container's cgroup is the engine's: its stats endpoint has the same figures but answers
//! at its collector's next tick (up to a second on Docker 20.10, `one-shot` or not), which
//! every call would pay, and it cannot start a new memory peak per session command. So warden
//! finds the container's cgroup through its first process (`/proc/PID/cgroup`, checked to name
//! the container, so a pid of another machine's engine never reads a stranger's counters,
//! [`Cgroup::of`]). A host session's cgroup is warden's own ([`Owned`]): where warden may
//! make one (cgroup v1's memory and cpuacct hierarchies, as root), a `warden/PID-N` folder in
//! each that the session's processes join, removed with the session. Either way it reads:
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

use crate::session::Counters;
use std::path::{Path, PathBuf};

/// Where one container's counters are.
#[derive(Debug, Clone)]
pub struct Cgroup {
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
    pub fn of(pid: i64, id: &str) -> Option<Cgroup> {
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

    /// The folder of every cgroup process `pid` is in, one a hierarchy (cgroup v1's each,
    /// v2's), as this machine mounts it: where another process joins it (`cgroup.procs`).
    /// `None` when one of them is not mounted here.
    pub fn folders_of(pid: i32) -> Option<Vec<PathBuf>> {
        let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mounts = Mount::all(&mountinfo);
        membership
            .lines()
            .map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                let mount = if controllers.is_empty() {
                    mounts.iter().find(|m| m.unified)?
                } else {
                    mounts.iter().find(|m| {
                        controllers
                            .split(',')
                            .all(|c| m.controllers.iter().any(|x| x == c))
                    })?
                };
                mount.dir(path)
            })
            .collect()
    }

    /// CPU used in the container so far, in milliseconds.
    pub fn cpu_ms(&self) -> Option<f64> {
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
    pub fn peak(&self) -> Option<u64> {
        number(self.peak.as_ref()?)
    }

    /// Its folder in cgroup v1's memory hierarchy (none on v2).
    pub fn memory_v1(&self) -> Option<&Path> {
        match (&self.cpu, &self.peak) {
            (Cpu::Nanos(_), Some(peak)) => peak.parent(),
            _ => None,
        }
    }

    /// Starts a new high-water mark from the memory in use now; false when this cgroup
    /// cannot (v2, or not root).
    pub fn new_peak(&self) -> bool {
        match (&self.cpu, &self.peak) {
            (Cpu::Nanos(_), Some(file)) => std::fs::write(file, "0").is_ok(),
            _ => false,
        }
    }
}

/// A session's readings of its sandbox's cgroup, one before and one after each command.
#[derive(Debug, Default)]
pub struct Readings {
    /// The last reading started a new memory peak: the next one's peak is honest.
    peak_started: bool,
}

impl Readings {
    /// The cgroup's CPU; its memory peak only where each reading can start a new one (cgroup
    /// v1, as root): a sandbox's peak cannot otherwise be told apart from an earlier
    /// command's.
    pub fn read(&mut self, cgroup: &Cgroup) -> Counters {
        let cpu_ms = cgroup.cpu_ms();
        let peak_memory_bytes = cgroup.peak().filter(|_| self.peak_started);
        self.peak_started = cgroup.new_peak();
        Counters {
            cpu_ms,
            peak_memory_bytes,
        }
    }
}

/// A cgroup warden made for one sandbox and joined by its processes: a `warden/PID-N` folder
/// in cgroup v1's memory and cpuacct hierarchies, removed when dropped (once its processes
/// are gone). Folders a warden that is no longer running left behind are removed as this
/// process makes its first.
pub struct Owned {
    counters: Cgroup,
    /// The folders, one per hierarchy (one when a hierarchy holds both controllers).
    dirs: Vec<PathBuf>,
}

/// The folder under each hierarchy that holds warden's cgroups.
const OWN: &str = "warden";

/// How long a dropped cgroup's folders are tried again while its processes die.
const REMOVAL_TRIES: u32 = 50;
const REMOVAL_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Owned {
    /// A new cgroup of this process's, where it may make one (cgroup v1 with memory and
    /// cpuacct, and the right to write there: root); `None` elsewhere.
    pub fn create() -> Option<Owned> {
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let (memory, cpuacct) = own_folders()?;
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}-{n}", std::process::id());
        let mut dirs = vec![memory.join(&name)];
        if cpuacct != memory {
            dirs.push(cpuacct.join(&name));
        }
        let owned = Owned {
            counters: Cgroup {
                cpu: Cpu::Nanos(cpuacct.join(&name).join("cpuacct.usage")),
                peak: Some(memory.join(&name).join("memory.max_usage_in_bytes")),
            },
            dirs,
        };
        // Made one by one: a failure drops what was made.
        for dir in &owned.dirs {
            if let Err(e) = std::fs::create_dir_all(dir) {
                tracing::debug!("no cgroup of warden's own at {}: {e}", dir.display());
                return None;
            }
        }
        Some(owned)
    }

    /// Moves process `pid` into it (its later children are born there); false when it could
    /// not be moved into every hierarchy.
    pub fn join(&self, pid: i32) -> bool {
        self.dirs
            .iter()
            .all(|dir| std::fs::write(dir.join("cgroup.procs"), pid.to_string()).is_ok())
    }

    /// Its counters.
    pub fn counters(&self) -> &Cgroup {
        &self.counters
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.retain(|dir| std::fs::remove_dir(dir).is_err());
        if dirs.is_empty() {
            return;
        }
        // Its processes are still dying: the folders go once they are gone.
        std::thread::spawn(move || {
            for _ in 0..REMOVAL_TRIES {
                std::thread::sleep(REMOVAL_EVERY);
                dirs.retain(|dir| std::fs::remove_dir(dir).is_err());
                if dirs.is_empty() {
                    return;
                }
            }
            for dir in dirs {
                tracing::warn!(
                    "cannot remove the cgroup {}: it still has processes",
                    dir.display()
                );
            }
        });
    }
}

/// Where warden's own cgroups go in the memory and cpuacct hierarchies (one folder when one
/// hierarchy holds both), looked for once per process; the leftovers of wardens no longer
/// running are removed then.
fn own_folders() -> Option<&'static (PathBuf, PathBuf)> {
    static FOLDERS: std::sync::OnceLock<Option<(PathBuf, PathBuf)>> = std::sync::OnceLock::new();
    FOLDERS
        .get_or_init(|| {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            let mounts = Mount::all(&mountinfo);
            let point = |controller: &str| {
                mounts
                    .iter()
                    .find(|m| m.root == "/" && m.controllers.iter().any(|c| c == controller))
                    .map(|m| m.point.join(OWN))
            };
            let folders = (point("memory")?, point("cpuacct")?);
            sweep(&folders.0);
            sweep(&folders.1);
            Some(folders)
        })
        .as_ref()
}

/// Removes the cgroups in `parent` that a warden no longer running left behind (a folder
/// with processes in it cannot be removed, and is kept).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .map(|(pid, _)| pid);
        if owner.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
            let _ = std::fs::remove_dir(entry.path());
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
