//! Shells beside a session's that see its read-write roots through views of their own. A
//! `docker exec` joins the container's mount namespace, where every process sees the
//! session's one view; such a shell instead joins the container from this machine, as the
//! engine's runtime would, and mounts its own view in a mount namespace of its own:
//!
//! - the container's cgroups (its memory and process limits count the shell), and its IPC,
//!   UTS, network, cgroup and mount namespaces, the last copied into one of the shell's own
//!   where each read-write root's guest path shows the shell's view (an overlay of the
//!   folder whose writes land in warden's store);
//! - a PID namespace of its own below the container's, whose `init` ends everything the shell
//!   started when the shell ends, so that its view is final once it is gone; its own `/proc`
//!   (where `/proc/self` is the shell's `$$`, as the session's framing needs), under what the
//!   container's has over its own (the engine's masks and read-only folders);
//! - what the container's first process runs under, read from it: its user, groups, umask
//!   and resource limits (within warden's own where warden may not raise them), its
//!   environment, no capabilities, no new privileges, and its seccomp filters as the kernel
//!   holds them (`PTRACE_SECCOMP_GET_FILTER`), installed last.
//!
//! The processes between warden and the shell wait for their child and end as it did; the
//! ones the container sees show no command line (warden's would otherwise be read there).
//!
//! Offered only where that is all the container has: warden runs as root on the engine's
//! machine, runc runs the container (its processes are this machine's), the container has
//! no capabilities, no security module labels it (AppArmor, SELinux), it has no user
//! namespace of its own, every cgroup hierarchy it is in is mounted here, and no granted
//! root is seen inside a read-write one (or holds one). Elsewhere a session with a view has its commands take turns.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};
use warden_command::cgroup::Cgroup;
use warden_command::session::{Children, Launched, chunks};
use warden_core::{ErrorKind, Invocation, Output, ToolError};
use warden_tx::settle::Settling;
use warden_tx::{Store, View};

/// How long a shell beside the session's may take to end once its input closed before it is
/// killed, with everything it started (its view then dropped).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What a process in the chain between warden and the shell exits with when it cannot go on.
const SETUP_FAILED: i32 = 125;

/// Linux's resource limits, numbered from 0 (`RLIMIT_CPU`) to `RLIMIT_RTTIME`.
const RESOURCES: libc::c_int = 16;

/// `ptrace(2)` requests and events the libc crate does not name for every libc.
const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;
const PTRACE_EVENT_STOP: i32 = 128;

/// The container's namespaces a shell joins before its view is mounted, the mount
/// namespace last: its root becomes the shell's.
const NAMESPACES: [(&str, libc::c_int); 5] = [
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("net", libc::CLONE_NEWNET),
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("mnt", libc::CLONE_NEWNS),
];

/// A session's container as shells beside its own join it.
pub(crate) struct Joining {
    /// The container's first process, on this machine.
    init: i32,
    /// Its PID namespace's inode: a pid reused since is not joined.
    pid_namespace: u64,
    /// Its cgroups' `cgroup.procs`, one a hierarchy.
    procs: Vec<PathBuf>,
    /// The read-write roots: each folder, and where the container sees it.
    roots: Vec<(PathBuf, CString)>,
    /// What the container mounts over parts of its `/proc` (the engine's masks and read-only
    /// folders), in the order they were mounted: carried over the shell's own `/proc`.
    proc_mounts: Vec<CString>,
    store: Arc<Store>,
    tool: String,
    /// The session's shell (`/bin/sh`), as the container names it.
    shell: PathBuf,
    /// Read from the container's first process as the session started.
    confinement: Arc<Confinement>,
}

/// What the container's processes run under.
struct Confinement {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    umask: libc::mode_t,
    limits: Vec<(libc::c_int, libc::rlimit64)>,
    /// The highest capability's number: every one up to it leaves the bounding set.
    last_cap: libc::c_int,
    /// In the order they were installed.
    filters: Vec<Vec<libc::sock_filter>>,
    env: Vec<(OsString, OsString)>,
}

impl Joining {
    /// Shells beside a session's for its container's first process `init`, seeing the
    /// read-write roots `roots` (folder, guest path) through views made in `store`, where
    /// the container allows them (see the module); `mounted` is every path the container
    /// mounts a granted root or its `/tmp` at. `None`: commands take turns, as the log says.
    pub(crate) async fn offered(
        init: i32,
        roots: Vec<(PathBuf, PathBuf)>,
        mounted: Vec<PathBuf>,
        store: Arc<Store>,
        tool: &str,
        shell: &str,
    ) -> Option<Joining> {
        let (named, shell) = (tool.to_owned(), PathBuf::from(shell));
        // `/proc` read, and the container's first process stopped for a moment: off the
        // runtime's threads. A failure leaves the commands to take turns rather than fail.
        let joining = tokio::task::spawn_blocking(move || {
            Joining::checked(init, roots, &mounted, store, named, shell)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|checked| checked);
        joining
            .inspect_err(|why| tracing::info!(tool, "commands of this session take turns: {why}"))
            .ok()
    }

    /// The container of `init` as shells may join it (see [`Joining::offered`]), or why they
    /// may not.
    fn checked(
        init: i32,
        roots: Vec<(PathBuf, PathBuf)>,
        mounted: &[PathBuf],
        store: Arc<Store>,
        tool: String,
        shell: PathBuf,
    ) -> Result<Joining, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("warden is not root".into());
        }
        let inode = |path: String| {
            std::fs::metadata(&path)
                .map(|m| m.ino())
                .map_err(|e| format!("{path}: {e}"))
        };
        if inode(format!("/proc/{init}/ns/user"))? != inode("/proc/self/ns/user".into())? {
            return Err("its container has a user namespace of its own".into());
        }
        if let Ok(label) = std::fs::read_to_string(format!("/proc/{init}/attr/current")) {
            let label = label.trim_end_matches(['\0', '\n']);
            if !label.is_empty() && label != "unconfined" {
                return Err(format!("a security module labels its container ({label})"));
            }
        }
        let status = std::fs::read_to_string(format!("/proc/{init}/status"))
            .map_err(|e| format!("its container's status: {e}"))?;
        for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            if field(&status, caps).is_none_or(|v| !v.trim_start_matches('0').is_empty()) {
                return Err(format!("its container has capabilities ({caps})"));
            }
        }
        for (_, guest) in &roots {
            let nested = mounted
                .iter()
                .any(|m| m != guest && (m.starts_with(guest) || guest.starts_with(m)));
            if nested {
                return Err(format!(
                    "a root is seen inside {} or holds it",
                    guest.display()
                ));
            }
        }
        let procs: Vec<PathBuf> = Cgroup::folders_of(init)
            .ok_or("its container's cgroups are not all mounted on this machine")?
            .into_iter()
            .map(|folder| folder.join("cgroup.procs"))
            .collect();
        if let Some(missing) = procs.iter().find(|p| !p.exists()) {
            return Err(format!("{} is not there", missing.display()));
        }
        let mountinfo = std::fs::read_to_string(format!("/proc/{init}/mountinfo"))
            .map_err(|e| format!("its container's mounts: {e}"))?;
        let proc_mounts = mountinfo
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| point.starts_with("/proc/"))
            .map(|point| CString::new(point).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let confinement = Confinement::of(init, &status)
            .map_err(|e| format!("what its container runs under: {e}"))?;
        let roots = roots
            .into_iter()
            .map(|(host, guest)| {
                let guest = CString::new(guest.as_os_str().as_bytes()).map_err(|e| e.to_string());
                guest.map(|g| (host, g))
            })
            .collect::<Result<_, _>>()?;
        Ok(Joining {
            init,
            pid_namespace: inode(format!("/proc/{init}/ns/pid"))?,
            procs,
            roots,
            proc_mounts,
            store,
            tool,
            shell,
            confinement: Arc::new(confinement),
        })
    }

    /// Starts a shell beside the session's with its own view of the read-write roots.
    pub(crate) async fn start(self: &Arc<Self>) -> Result<Launched<Joined>, ToolError> {
        let hosts: Vec<PathBuf> = self.roots.iter().map(|(host, _)| host.clone()).collect();
        let view = self
            .store
            .view(&hosts)
            .map_err(|e| unavailable(&format!("a view of its own: {e}")))?;
        let mut prepared = self
            .prepared(&view, Arc::clone(&self.confinement))
            .map_err(|e| unavailable(&format!("joining the session's container: {e}")))?;
        let env = prepared.confinement.env.clone();
        let mut command = Command::new(&self.shell);
        command
            .env_clear()
            .envs(env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: `enter` makes system calls only, on what was prepared before the fork: it
        // allocates nothing and takes no lock.
        unsafe { command.pre_exec(move || enter(&mut prepared)) };
        let mut child = command
            .spawn()
            .map_err(|e| unavailable(&format!("joining the session's container: {e}")))?;
        // The spawn answered once the shell had executed: the chain is complete.
        let shell = child
            .id()
            .and_then(|c| i32::try_from(c).ok())
            .and_then(Children::only_child)
            .and_then(Children::only_child)
            .and_then(Children::only_child);
        let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) = (
            shell,
            child.stdin.take(),
            child.stdout.take(),
            child.stderr.take(),
        ) else {
            let _ = child.start_kill();
            return Err(unavailable(
                "a shell beside the session's was not found in its namespace",
            ));
        };
        Ok(Launched {
            sandbox: Joined {
                child,
                pid,
                view,
                tool: self.tool.clone(),
            },
            input: Box::pin(stdin),
            output: chunks(stdout, stderr),
            view: None,
        })
    }

    /// What the shell's chain needs between its fork and its exec, opened now.
    fn prepared(&self, view: &View, confinement: Arc<Confinement>) -> io::Result<Prepared> {
        let ns = |name: &str| File::open(format!("/proc/{}/ns/{name}", self.init));
        let pid = ns("pid")?;
        if pid.metadata()?.ino() != self.pid_namespace {
            return Err(io::Error::other("the session's container is gone"));
        }
        let namespaces = NAMESPACES
            .iter()
            .map(|(name, kind)| Ok((OwnedFd::from(ns(name)?), *kind)))
            .collect::<io::Result<_>>()?;
        let mut views = Vec::new();
        for (n, (host, guest)) in self.roots.iter().enumerate() {
            let layer = view.layer(n);
            let overlay = warden_tx::mount::overlay(host, &layer.upper, &layer.work, false)?;
            views.push((overlay, guest.clone()));
        }
        Ok(Prepared {
            arguments: arguments()?,
            procs: self
                .procs
                .iter()
                .map(|p| {
                    Ok(OwnedFd::from(
                        std::fs::OpenOptions::new().write(true).open(p)?,
                    ))
                })
                .collect::<io::Result<_>>()?,
            namespaces,
            pid: OwnedFd::from(pid),
            proc_mounts: self.proc_mounts.iter().map(|p| (p.clone(), -1)).collect(),
            views,
            confinement,
        })
    }
}

/// The value of `name:` in a `/proc/PID/status`.
fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

impl Confinement {
    /// What process `pid`, whose `/proc/PID/status` is `status`, runs under.
    fn of(pid: i32, status: &str) -> io::Result<Confinement> {
        let bad = |what: &str| io::Error::other(format!("its {what} could not be read"));
        let first = |name: &str| -> io::Result<u32> {
            field(status, name)
                .and_then(|v| v.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(name))
        };
        let groups = field(status, "Groups")
            .ok_or_else(|| bad("groups"))?
            .split_whitespace()
            .map(|g| g.parse().map_err(|_| bad("groups")))
            .collect::<io::Result<_>>()?;
        let umask = field(status, "Umask")
            .and_then(|u| libc::mode_t::from_str_radix(u, 8).ok())
            .ok_or_else(|| bad("umask"))?;
        let limits = limits_of(&std::fs::read_to_string(format!("/proc/{pid}/limits"))?)
            .ok_or_else(|| bad("resource limits"))?;
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")?
            .trim()
            .parse()
            .map_err(|_| bad("highest capability"))?;
        let env = std::fs::read(format!("/proc/{pid}/environ"))?
            .split(|b| *b == 0)
            .filter_map(|pair| {
                let at = pair.iter().position(|b| *b == b'=')?;
                let (name, value) = (pair[..at].to_vec(), pair[at + 1..].to_vec());
                Some((OsString::from_vec(name), OsString::from_vec(value)))
            })
            .collect();
        Ok(Confinement {
            // The effective ones, as the rest are.
            uid: first("Uid")?,
            gid: first("Gid")?,
            groups,
            umask,
            limits,
            last_cap,
            filters: seccomp_filters(pid)?,
            env,
        })
    }
}

/// The resource limits of a `/proc/PID/limits`, in the order of their numbers: a header,
/// then a line each, its soft and hard limits in columns of their own.
fn limits_of(text: &str) -> Option<Vec<(libc::c_int, libc::rlimit64)>> {
    let value = |v: &str| match v.trim() {
        "unlimited" => Some(libc::RLIM64_INFINITY),
        v => v.parse().ok(),
    };
    let limits = text
        .lines()
        .skip(1)
        .take(RESOURCES as usize)
        .zip(0..)
        .map(|(line, resource)| {
            let limit = libc::rlimit64 {
                rlim_cur: value(line.get(26..46)?)?,
                rlim_max: value(line.get(47..67)?)?,
            };
            Some((resource, limit))
        })
        .collect::<Option<Vec<_>>>()?;
    (limits.len() == RESOURCES as usize).then_some(limits)
}

/// The seccomp filters of process `pid`, oldest first: read while it is stopped for a
/// moment, then let go, with the signal it was stopped for, if it was.
fn seccomp_filters(pid: i32) -> io::Result<Vec<Vec<libc::sock_filter>>> {
    let check = |r: libc::c_long| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    let none = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: attaches to `pid` without stopping it.
    check(unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, none, none) })?;
    let mut signal = 0;
    let read = (|| {
        // SAFETY: asks the tracee to stop.
        check(unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, pid, none, none) })?;
        loop {
            let mut status = 0;
            // SAFETY: waits for the tracee, which reports to its tracer.
            let waited = unsafe { libc::waitpid(pid, &raw mut status, libc::__WALL) };
            if waited == pid && libc::WIFSTOPPED(status) {
                if status >> 16 != PTRACE_EVENT_STOP {
                    signal = libc::WSTOPSIG(status);
                }
                break;
            }
            let e = io::Error::last_os_error();
            if waited < 0 && e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let mut filters = Vec::new();
        for index in 0usize.. {
            let at = index as *mut libc::c_void;
            // SAFETY: with no buffer, answers the filter's length.
            let length = unsafe { libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, at, none) };
            if length < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOENT) {
                    break;
                }
                return Err(e);
            }
            let empty = libc::sock_filter {
                code: 0,
                jt: 0,
                jf: 0,
                k: 0,
            };
            let mut filter = vec![empty; usize::try_from(length).unwrap_or(0)];
            // SAFETY: the buffer holds `length` instructions.
            let got = check(unsafe {
                libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, at, filter.as_mut_ptr())
            })?;
            filter.truncate(usize::try_from(got).unwrap_or(0));
            filters.push(filter);
        }
        // The kernel numbers them from the newest.
        filters.reverse();
        Ok(filters)
    })();
    // SAFETY: lets the tracee go on, with the signal it stopped for.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            none,
            signal as usize as *mut libc::c_void,
        )
    };
    let filters = read?;
    if filters.is_empty() {
        return Err(io::Error::other("its container has no seccomp filter"));
    }
    Ok(filters)
}

/// `capset(2)`'s header and data, which the libc crate does not declare.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Where this process's command line lies in its memory (`/proc/self/stat`'s `arg_start`
/// and `arg_end`).
fn arguments() -> io::Result<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // After the name, which may hold anything but ends at the last `)`: fields 3 on.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse().ok());
    match (field(48), field(49)) {
        (Some(start), Some(end)) if start < end => Ok((start, end)),
        _ => Err(io::Error::other(
            "this process's command line was not found",
        )),
    }
}

/// What [`enter`] works with.
struct Prepared {
    /// Warden's command line in memory: the processes between warden and the shell, which
    /// the container's processes see, show none of it.
    arguments: (usize, usize),
    procs: Vec<OwnedFd>,
    namespaces: Vec<(OwnedFd, libc::c_int)>,
    pid: OwnedFd,
    /// The mounts over the container's `/proc`, each with a slot for its copy.
    proc_mounts: Vec<(CString, libc::c_int)>,
    /// Each view's overlay, detached, and where it is mounted.
    views: Vec<(OwnedFd, CString)>,
    confinement: Arc<Confinement>,
}

/// Between the fork and the exec of a shell beside the session's: joins the container (see
/// the module), then forks three times, each parent waiting for its child and ending as it
/// did, so that the shell runs below an `init` of its own in a PID namespace below the
/// container's; confined as the container's processes are. System calls only: nothing is
/// allocated.
fn enter(p: &mut Prepared) -> io::Result<()> {
    let c = Arc::clone(&p.confinement);
    let check = |r: libc::c_long| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: system calls on descriptors and data prepared before the fork; the command line
    // is this process's own memory (a copy of warden's since the fork).
    unsafe {
        let (start, end) = p.arguments;
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
        for procs in &p.procs {
            check(libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) as libc::c_long)?;
        }
        for (namespace, kind) in &p.namespaces {
            check(libc::setns(namespace.as_raw_fd(), *kind).into())?;
        }
        check(libc::unshare(libc::CLONE_NEWNS).into())?;
        let private = libc::MS_REC | libc::MS_PRIVATE;
        check(libc::mount(null, c"/".as_ptr(), null, private, std::ptr::null()).into())?;
        // Copies of what covers parts of the container's `/proc`, for the shell's own.
        for (point, copy) in &mut p.proc_mounts {
            let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC;
            let fd = libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, point.as_ptr(), flags);
            check(fd)?;
            *copy = libc::c_int::try_from(fd).unwrap_or(-1);
        }
        for (overlay, guest) in &p.views {
            warden_tx::mount::move_mount(overlay, guest)?;
        }
        check(libc::chdir(c"/".as_ptr()).into())?;
        check(libc::setns(p.pid.as_raw_fd(), libc::CLONE_NEWPID).into())?;
        // A new PID namespace is made only by a process of the one it goes below, and its
        // first child is its `init`.
        fork_then_wait(false)?;
        check(libc::unshare(libc::CLONE_NEWPID).into())?;
        fork_then_wait(false)?;
        fork_then_wait(true)?;
        // The namespace's own `/proc`, where `/proc/self` is the shell's `$$`, covered as the
        // container's is.
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let proc = c"/proc".as_ptr();
        check(
            libc::mount(
                c"proc".as_ptr(),
                proc,
                c"proc".as_ptr(),
                flags,
                std::ptr::null(),
            )
            .into(),
        )?;
        for (point, copy) in &p.proc_mounts {
            warden_tx::mount::move_mount(std::os::fd::BorrowedFd::borrow_raw(*copy), point)?;
        }
        for (resource, limit) in &c.limits {
            set_limit(*resource, *limit)?;
        }
        libc::umask(c.umask);
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
        for cap in 0..=c.last_cap {
            check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0).into())?;
        }
        let groups = c.groups.as_ptr();
        check(libc::syscall(libc::SYS_setgroups, c.groups.len(), groups))?;
        check(libc::syscall(libc::SYS_setresgid, c.gid, c.gid, c.gid))?;
        check(libc::syscall(libc::SYS_setresuid, c.uid, c.uid, c.uid))?;
        let clear = libc::PR_CAP_AMBIENT_CLEAR_ALL;
        check(libc::prctl(libc::PR_CAP_AMBIENT, clear, 0, 0, 0).into())?;
        // What setresuid left: the inheritable set.
        let mut header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        check(libc::syscall(
            libc::SYS_capset,
            &raw mut header,
            data.as_ptr(),
        ))?;
        for filter in &c.filters {
            let program = libc::sock_fprog {
                len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
                filter: filter.as_ptr().cast_mut(),
            };
            let mode = libc::SECCOMP_SET_MODE_FILTER;
            check(libc::syscall(
                libc::SYS_seccomp,
                mode,
                0,
                &raw const program,
            ))?;
        }
    }
    Ok(())
}

/// Sets this process's limit of `resource` to `limit`; where warden may not raise a hard
/// limit (no `CAP_SYS_RESOURCE`), both stay within its own. System calls only.
fn set_limit(resource: libc::c_int, limit: libc::rlimit64) -> io::Result<()> {
    let none = std::ptr::null_mut::<libc::rlimit64>();
    // SAFETY: sets one limit of this process from `limit`.
    let set = |limit: &libc::rlimit64| unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            std::ptr::from_ref(limit),
            none,
        )
    };
    if set(&limit) == 0 {
        return Ok(());
    }
    let denied = io::Error::last_os_error();
    let mut own = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads one limit of this process into `own`.
    let read = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            resource,
            std::ptr::null::<libc::rlimit64>(),
            &raw mut own,
        )
    };
    if read < 0 || denied.raw_os_error() != Some(libc::EPERM) {
        return Err(denied);
    }
    let max = limit.rlim_max.min(own.rlim_max);
    let within = libc::rlimit64 {
        rlim_cur: limit.rlim_cur.min(max),
        rlim_max: max,
    };
    if set(&within) == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Forks; the child dies with its parent and goes on, the parent closes every descriptor (the
/// shell's stdio and the spawn's own pipe then close with the shell's) and ends as the child
/// did. `reaper`: the parent is its PID namespace's `init`, which reaps every orphan until
/// the child ends, its end then ending the rest.
///
/// # Safety
/// Between a fork and an exec: system calls only.
unsafe fn fork_then_wait(reaper: bool) -> io::Result<()> {
    // SAFETY: the caller's contract.
    unsafe {
        let parent = libc::getpid();
        let child = libc::fork();
        if child < 0 {
            return Err(io::Error::last_os_error());
        }
        if child == 0 {
            // A parent outside the child's PID namespace shows as 0.
            let orphaned = !matches!(libc::getppid(), 0) && libc::getppid() != parent;
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 || orphaned {
                libc::_exit(SETUP_FAILED);
            }
            return Ok(());
        }
        libc::syscall(libc::SYS_close_range, 0, libc::c_uint::MAX, 0);
        let mut status = 0;
        loop {
            let waited = libc::waitpid(if reaper { -1 } else { child }, &raw mut status, 0);
            if waited == child {
                break;
            }
            if waited < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                libc::_exit(SETUP_FAILED);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(128 + libc::WTERMSIG(status));
    }
}

fn unavailable(why: &str) -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        format!("a shell beside the session's could not start: {why}"),
    )
}

/// A shell beside a session's with its own view: warden's child, the head of the chain that
/// ends with the shell. Dropped, it is killed, and the shell with it (its view discarded).
pub(crate) struct Joined {
    child: Child,
    /// The shell's pid on this machine.
    pid: i32,
    view: View,
    tool: String,
}

impl Joined {
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// The shell's exit status (its chain ends as it did).
    pub(crate) async fn exit_status(&mut self) -> Option<i64> {
        let status = tokio::time::timeout(CLOSE_WAIT, self.child.wait())
            .await
            .ok()?
            .ok()?;
        status
            .code()
            .or(status.signal().map(|s| 128 + s))
            .map(i64::from)
    }

    /// Waits for the chain to end (the shell ends at the end of its input), killing it when
    /// it does not; answers whether it ended on its own.
    async fn end(&mut self) -> bool {
        if let Ok(Ok(_)) = tokio::time::timeout(CLOSE_WAIT, self.child.wait()).await {
            return true;
        }
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(CLOSE_WAIT, self.child.wait()).await;
        false
    }

    pub(crate) async fn close(mut self) {
        self.end().await;
    }

    /// Once the chain has ended, everything the shell started is gone with its `init`, and
    /// its view is final: committed or discarded as a call's.
    pub(crate) async fn close_settled(
        mut self,
        inv: &Invocation,
        answered: Result<Output, ToolError>,
    ) -> Result<Output, ToolError> {
        let gone = self.end().await;
        let whose = Settling {
            call: &inv.call_id,
            tool: &self.tool,
            limit: inv.limits.changes,
        };
        warden_tx::settle::settle(Some(self.view), gone, whose, None, answered)
    }
}
