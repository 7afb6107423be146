//! The seccomp profile of every container: the engine's default profile, as Docker ships it
//! for a container without capabilities, with its sockets allowed by list. Docker's default
//! lets a container create any socket but vsock (and older engines, vsock too): vsock lives
//! outside network namespaces (on a VM it reaches the hypervisor's services), and raw, packet,
//! netlink, MPTCP and the rarer families are kernel surface no sandboxed program needs. Here a
//! container may create unix sockets and socketpairs (its files are its own mounts, and its
//! abstract sockets its own network namespace's) and TCP and UDP sockets over IPv4 and IPv6;
//! nothing else.
//!
//! Netlink is refused too: glibc's `getaddrinfo` without it assumes both IPv4 and IPv6 are
//! configured, which changes only the order of a dual-stack name's addresses. A refused
//! family fails with EAFNOSUPPORT, what a kernel without it answers, so programs that probe
//! one (vsock, AF_ALG) fall back; a refused type or protocol of IPv4 or IPv6 fails with
//! EACCES: the family is there, the policy keeps it out.
//!
//! Left out of the default: what it allows only with a capability (warden drops them all),
//! `socketcall`, and the architectures where it is the way to the socket calls, or whose
//! socket types are numbered differently (MIPS).

use nix::libc;
use serde_json::{Value, json};
use std::sync::LazyLock;

/// Allowed without conditions: the default profile's list (Docker 28's), less the socket calls.
const ALLOWED: &str = "_llseek _newselect accept accept4 access adjtimex alarm bind brk cachestat capget capset \
     chdir chmod chown chown32 clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 \
     clock_gettime clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range \
     connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl \
     epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve \
     execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate \
     fanotify_mark fchdir fchmod fchmodat fchmodat2 fchown fchown32 fchownat fcntl fcntl64 \
     fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 \
     fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_requeue futex_time64 \
     futex_wait futex_waitv futex_wake futimesat get_robust_list get_thread_area getcpu \
     getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups \
     getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom \
     getresgid getresgid32 getresuid getresuid32 getrlimit getrusage getsid getsockname \
     getsockopt gettid gettimeofday getuid getuid32 getxattr getxattrat inotify_add_watch \
     inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents \
     io_pgetevents io_pgetevents_time64 io_setup io_submit ioctl ioprio_get ioprio_set ipc \
     kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32 \
     lgetxattr link linkat listen listmount listxattr listxattrat llistxattr lremovexattr \
     lseek lsetxattr lstat lstat64 madvise map_shadow_stack membarrier memfd_create \
     memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mmap2 \
     mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64 \
     mq_timedsend mq_timedsend_time64 mq_unlink mremap mseal msgctl msgget msgrcv msgsnd \
     msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat open openat \
     openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect \
     poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 \
     pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv \
     recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr removexattrat \
     rename renameat renameat2 restart_syscall riscv_hwprobe rmdir rseq rt_sigaction \
     rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait \
     rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_get_priority_max sched_get_priority_min \
     sched_getaffinity sched_getattr sched_getparam sched_getscheduler sched_rr_get_interval \
     sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam \
     sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop \
     semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto set_robust_list \
     set_thread_area set_tid_address setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 \
     setgroups setgroups32 setitimer setpgid setpriority setregid setregid32 setresgid \
     setresgid32 setresuid setresuid32 setreuid setreuid32 setrlimit setsid setsockopt setuid \
     setuid32 setxattr setxattrat shmat shmctl shmdt shmget shutdown sigaltstack signalfd \
     signalfd4 sigprocmask sigreturn splice stat stat64 statfs statfs64 statmount statx \
     symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create \
     timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime \
     timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime \
     timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat \
     uretprobe utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid \
     write writev";

/// The architectures whose system calls the profile covers, each with those its programs may
/// also run as. Not 32-bit x86, s390 or ppc64, where the socket calls go through
/// `socketcall` too, whose arguments are in memory no filter reads (the engine refuses the
/// socket rules there): their programs do not run, as in the host's sandbox.
const ARCHITECTURES: [(&str, &[&str]); 4] = [
    ("SCMP_ARCH_X86_64", &["SCMP_ARCH_X32"]),
    ("SCMP_ARCH_AARCH64", &["SCMP_ARCH_ARM"]),
    ("SCMP_ARCH_RISCV64", &[]),
    ("SCMP_ARCH_LOONGARCH64", &[]),
];

/// Allowed on some architectures only, as in the default profile.
const BY_ARCHITECTURE: [(&[&str], &[&str]); 4] = [
    (
        &[
            "arm_fadvise64_64",
            "arm_sync_file_range",
            "sync_file_range2",
            "breakpoint",
            "cacheflush",
            "set_tls",
        ],
        &["arm", "arm64"],
    ),
    (&["arch_prctl"], &["amd64", "x32"]),
    (&["modify_ldt"], &["amd64", "x32"]),
    (&["riscv_flush_icache"], &["riscv64"]),
];

/// The `personality` values the default profile allows: the default, `PER_LINUX32`,
/// `UNAME26`, both, and the query.
const PERSONALITIES: [u64; 5] = [0, 8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// The flags of `clone` that create a namespace, which the default refuses.
const CLONE_NAMESPACES: u64 = 0x7e02_0000;

/// The type flags `socket` and `socketpair` take beside the type.
const SOCK_FLAGS: u64 = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;

/// A type with its flags cleared, compared as the kernel's 32-bit int.
const TYPE_MASK: u64 = !SOCK_FLAGS & 0xffff_ffff;

/// The profile, as the engine takes it in `SecurityOpt` (`seccomp=` and the JSON).
pub(crate) static SECURITY_OPT: LazyLock<String> =
    LazyLock::new(|| format!("seccomp={}", profile()));

/// One comparison of argument `index`.
fn arg(index: u8, op: &str, value: u64) -> Value {
    json!({ "index": index, "op": op, "value": value })
}

fn eq(index: u8, value: u64) -> Value {
    arg(index, "SCMP_CMP_EQ", value)
}

fn gt(index: u8, value: u64) -> Value {
    arg(index, "SCMP_CMP_GT", value)
}

/// `(argument & mask) == value`.
fn masked(index: u8, mask: u64, value: u64) -> Value {
    json!({ "index": index, "op": "SCMP_CMP_MASKED_EQ", "value": mask, "valueTwo": value })
}

fn allow(name: &str, args: Vec<Value>) -> Value {
    json!({ "names": [name], "action": "SCMP_ACT_ALLOW", "args": args })
}

fn refuse(name: &str, errno: i32, args: Vec<Value>) -> Value {
    json!({ "names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": errno, "args": args })
}

/// The rules of `socket` and `socketpair`. The engine's runtime turns conditions on one
/// argument into alternatives, so every rule holds at most one per argument, and the
/// rules refusing a call are written apart from those allowing it: each call matches one
/// rule at most, whatever order the filter tries them in.
fn sockets() -> Vec<Value> {
    let (unix, inet, inet6) = (
        libc::AF_UNIX as u64,
        libc::AF_INET as u64,
        libc::AF_INET6 as u64,
    );
    let mut rules = vec![
        allow("socket", vec![eq(0, unix)]),
        allow("socketpair", vec![eq(0, unix)]),
        // socketpair is a unix call only.
        refuse("socketpair", libc::EAFNOSUPPORT, vec![eq(0, 0)]),
        refuse("socketpair", libc::EAFNOSUPPORT, vec![gt(0, unix)]),
    ];
    // socket's other families: below AF_UNIX, between AF_INET and AF_INET6, and above.
    for other in (0..unix).chain(inet + 1..inet6) {
        rules.push(refuse("socket", libc::EAFNOSUPPORT, vec![eq(0, other)]));
    }
    rules.push(refuse("socket", libc::EAFNOSUPPORT, vec![gt(0, inet6)]));
    let (stream, dgram) = (libc::SOCK_STREAM as u64, libc::SOCK_DGRAM as u64);
    let (tcp, udp) = (libc::IPPROTO_TCP as u64, libc::IPPROTO_UDP as u64);
    for family in [inet, inet6] {
        let kind = |kind| masked(1, TYPE_MASK, kind);
        for (k, protocol) in [(stream, 0), (stream, tcp), (dgram, 0), (dgram, udp)] {
            rules.push(allow(
                "socket",
                vec![eq(0, family), kind(k), eq(2, protocol)],
            ));
        }
        // The other types (raw, SCTP's seqpacket, DCCP, ...).
        for other in [
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_DCCP,
            // SOCK_PACKET, which libc calls deprecated.
            10,
        ] {
            rules.push(refuse(
                "socket",
                libc::EACCES,
                vec![eq(0, family), kind(other as u64)],
            ));
        }
        // The other protocols of a stream (1-5, above 6: MPTCP, SCTP, ...) and of a datagram
        // (1-16, above 17: ICMP, UDP-Lite, ...), as ranges one comparison each can hold.
        let other_protocols = [
            (
                stream,
                [eq(2, 1), masked(2, !1, 2), masked(2, !1, 4), gt(2, tcp)].to_vec(),
            ),
            (
                dgram,
                [
                    eq(2, 1),
                    masked(2, !1, 2),
                    masked(2, !3, 4),
                    masked(2, !7, 8),
                    eq(2, 16),
                    gt(2, udp),
                ]
                .to_vec(),
            ),
        ];
        for (k, protocols) in other_protocols {
            for protocol in protocols {
                rules.push(refuse(
                    "socket",
                    libc::EACCES,
                    vec![eq(0, family), kind(k), protocol],
                ));
            }
        }
    }
    rules
}

/// The whole profile.
fn profile() -> Value {
    let mut syscalls = vec![
        json!({ "names": ALLOWED.split_whitespace().collect::<Vec<_>>(), "action": "SCMP_ACT_ALLOW" }),
        // Before 4.8 ptrace could be used to step around seccomp.
        json!({
            "names": ["process_vm_readv", "process_vm_writev", "ptrace"],
            "action": "SCMP_ACT_ALLOW",
            "includes": { "minKernel": "4.8" },
        }),
    ];
    syscalls.extend(PERSONALITIES.map(|p| allow("personality", vec![eq(0, p)])));
    syscalls.extend(BY_ARCHITECTURE.iter().map(|(names, arches)| {
        json!({ "names": names, "action": "SCMP_ACT_ALLOW", "includes": { "arches": arches } })
    }));
    // clone without a namespace, and clone3 with ENOSYS: its flags are in memory, and libc
    // falls back to clone.
    syscalls.extend([
        allow("clone", vec![masked(0, CLONE_NAMESPACES, 0)]),
        refuse("clone3", libc::ENOSYS, vec![]),
    ]);
    syscalls.extend(sockets());
    let arch_map: Vec<Value> = ARCHITECTURES
        .iter()
        .map(|(arch, sub)| json!({ "architecture": arch, "subArchitectures": sub }))
        .collect();
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": libc::EPERM,
        "archMap": arch_map,
        "syscalls": syscalls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compares_an_argument_once_at_most() {
        // The engine's runtime would turn two comparisons of one argument into alternatives.
        let profile = profile();
        for rule in profile["syscalls"].as_array().unwrap() {
            let mut seen = std::collections::BTreeSet::new();
            for arg in rule["args"].as_array().into_iter().flatten() {
                assert!(seen.insert(arg["index"].as_u64()), "{rule}");
            }
        }
    }

    #[test]
    fn the_socket_calls_are_allowed_only_with_conditions() {
        let profile = profile();
        let rules = profile["syscalls"].as_array().unwrap();
        for name in ["socket", "socketpair", "socketcall", "io_uring_setup"] {
            let unconditional = rules.iter().any(|r| {
                r["action"] == "SCMP_ACT_ALLOW"
                    && r["args"].as_array().is_none_or(std::vec::Vec::is_empty)
                    && r["names"].as_array().unwrap().iter().any(|n| n == name)
            });
            assert!(!unconditional, "{name}");
        }
    }
}
