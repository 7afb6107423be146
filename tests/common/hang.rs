//! A watch on a test's warden process: should the test still run after a bound, it prints
//! where every process of warden's tree waits, and every other process that holds one of
//! warden's stdin, stdout and stderr (each thread's kernel wait channel and, as root, its
//! kernel stack, and each process's descriptors), then kills warden, so that a hang fails
//! with what it waited on instead of at the runner's timeout with nothing.

use std::fmt::Write as _;
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::time::Duration;

/// Watches one process until dropped.
pub(crate) struct Watch {
    done: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// Watches `pid`; after `bound` it is reported and killed.
    pub(crate) fn new(pid: u32, bound: Duration) -> Self {
        let (done, ended) = channel();
        // Read now: a warden that has ended by the time of a hang no longer shows them.
        let streams: Vec<String> = (0..3)
            .filter_map(|fd| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok())
            .map(|t| t.display().to_string())
            .collect();
        let thread = std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = ended.recv_timeout(bound) {
                eprintln!(
                    "warden (pid {pid}) still runs after {bound:?}; its tree:\n{}",
                    tree(pid, &streams)
                );
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        });
        Self {
            done: Some(done),
            thread: Some(thread),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The descriptors' targets of process `pid` (`pipe:[N]`, paths).
fn targets(pid: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|t| t.display().to_string())
        .collect()
}

/// `root`, its descendants and whoever else holds one of `streams`: each process, its
/// threads' wait channels and stacks, and its descriptors.
fn tree(root: u32, streams: &[String]) -> String {
    let me = std::process::id();
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The fields after the command's name, which is in parentheses and may hold any.
            let after = &stat[stat.rfind(')')? + 2..];
            let ppid = after.split(' ').nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![root];
    tree.extend(parents.iter().map(|(pid, _)| *pid).filter(|&pid| {
        pid != me
            && pid != root
            && targets(&pid.to_string())
                .iter()
                .any(|t| streams.contains(t))
    }));
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        let children: Vec<u32> = parents
            .iter()
            .filter(|(c, p)| *p == parent && !tree.contains(c))
            .map(|(c, _)| *c)
            .collect();
        tree.extend(children);
        next += 1;
    }
    let mut out = String::new();
    for pid in tree {
        let read = |what: &str| std::fs::read_to_string(format!("/proc/{pid}/{what}"));
        let cmdline = read("cmdline").unwrap_or_default().replace('\0', " ");
        let state = read("status")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("State:") || l.starts_with("PPid:"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(out, "== {pid} {cmdline} ({state})");
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = task.path();
            let read = |what: &str| std::fs::read_to_string(path.join(what)).unwrap_or_default();
            let _ = writeln!(
                out,
                "  thread {} {} waits in {}\n{}",
                task.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan"),
                read("stack")
            );
        }
        let _ = writeln!(
            out,
            "  descriptors: {}",
            targets(&pid.to_string()).join(", ")
        );
    }
    out
}
