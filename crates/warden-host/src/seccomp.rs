//! Seccomp filters for what Landlock and the namespaces leave open:
//! - sockets, allowed by list: TCP and UDP over IPv4 and IPv6, and unix `socketpair`.
//!   Unix sockets are refused because a pathname socket is reachable whatever the Landlock
//!   domain up to ABI 7, and no namespace hides it (`socketpair` stays, so programs keep their
//!   private pipes); vsock lives outside network namespaces (on a VM it reaches the
//!   hypervisor's services); MPTCP, raw and SCTP sockets pass beside Landlock's TCP rules; and
//!   every other family is kernel surface no sandboxed program needs. Netlink is refused too:
//!   glibc's `getaddrinfo` without it assumes both IPv4 and IPv6 are configured, which is what
//!   it concludes from a namespace holding only loopback too (it does not count loopback's
//!   addresses). A refused family fails with
//!   EAFNOSUPPORT, what a kernel without it answers, so programs that probe one (vsock,
//!   AF_ALG) fall back; a refused protocol of IPv4 or IPv6, and a unix socket, fail with
//!   EACCES, as Landlock refuses a port: the family is there, the policy keeps it out;
//! - io_uring: its operations, sockets among them, pass beside per-syscall filters;
//! - new namespaces and `setns`: a user namespace needs no privilege, gives the privilege to
//!   create every other kind, and opens the kernel surface most privilege escalations start
//!   from. `unshare` and `clone` are refused when their flags ask for any namespace; threads,
//!   `fork`, `vfork`, and `unshare` of what the process already shares (its descriptor table,
//!   its working directory: a private copy, nothing new to reach) stay. `clone3` keeps its
//!   flags in memory a filter cannot read, so it fails with ENOSYS, on which libc falls back
//!   to `clone` (as in Docker's and bubblewrap's profiles).
//!
//! The filters go on the command's own process just before it executes: the helper and init,
//! which create the namespaces the command runs in, are never under them.

use crate::failure::Failure;
use crate::plan::Protections;
use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// x32 system calls reach the same kernel entry points with this bit set. (32-bit x86 ones
/// fail the filter's architecture check, which kills the process.)
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// The flags of `clone` that create a namespace. `CLONE_NEWTIME` shares its bit with the exit
/// signal in `clone`'s flags (the kernel reads it as such), so only `unshare` and `clone3` can
/// ask for a time namespace.
const CLONE_NAMESPACES: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

fn failed(e: impl std::fmt::Display) -> Failure {
    Failure::setup(format!("seccomp: {e}"))
}

/// Argument 0 has `bit` set. The flags of `unshare` and `clone` are argument 0 on x86_64,
/// aarch64 and riscv64 (every architecture seccompiler targets); `clone` reads only their
/// lower 32 bits and `unshare` refuses any bit above them, so the lower half is enough.
fn first_arg_has(bit: libc::c_int) -> Result<SeccompRule, Failure> {
    let bit = bit as u64;
    let condition =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(bit), bit)
            .map_err(failed)?;
    SeccompRule::new(vec![condition]).map_err(failed)
}

/// The type flags `socket` and `socketpair` take beside the type.
const SOCK_FLAGS: u64 = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;

/// The socket types allowed over IPv4 and IPv6, with the protocols each may name (0 is the
/// type's default: TCP or UDP).
const IP_SOCKETS: [(libc::c_int, [libc::c_int; 2]); 2] = [
    (libc::SOCK_STREAM, [0, libc::IPPROTO_TCP]),
    (libc::SOCK_DGRAM, [0, libc::IPPROTO_UDP]),
];

/// Argument `index` compared, as the 32-bit int the kernel reads, with `value`.
fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, Failure> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(failed)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, Failure> {
    SeccompRule::new(conditions).map_err(failed)
}

/// `socket` and `socketpair` of a family that is not allowed (EAFNOSUPPORT): `socket` keeps
/// IPv4, IPv6 and unix (refused with EACCES), `socketpair` unix alone.
fn refused_families() -> Result<BTreeMap<i64, Vec<SeccompRule>>, Failure> {
    let not = |family: libc::c_int| arg(0, SeccompCmpOp::Ne, family as u64);
    let socket = rule(vec![
        not(libc::AF_INET)?,
        not(libc::AF_INET6)?,
        not(libc::AF_UNIX)?,
    ])?;
    let socketpair = rule(vec![not(libc::AF_UNIX)?])?;
    Ok(BTreeMap::from([
        (libc::SYS_socket, vec![socket]),
        (libc::SYS_socketpair, vec![socketpair]),
    ]))
}

/// `socket` calls of an allowed family that are refused (EACCES): a unix socket, and over
/// IPv4 and IPv6 any type but a stream or a datagram, or a protocol but their own.
fn refused_protocols() -> Result<Vec<SeccompRule>, Failure> {
    let mut rules = vec![rule(vec![arg(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?])?];
    for family in [libc::AF_INET, libc::AF_INET6] {
        let family = || arg(0, SeccompCmpOp::Eq, family as u64);
        // Any other type: each allowed one is ruled out with each combination of its flags.
        let mut other_type = vec![family()?];
        for (kind, _) in IP_SOCKETS {
            for flags in [
                0,
                libc::SOCK_NONBLOCK,
                libc::SOCK_CLOEXEC,
                SOCK_FLAGS as i32,
            ] {
                other_type.push(arg(1, SeccompCmpOp::Ne, (kind | flags) as u64)?);
            }
        }
        rules.push(rule(other_type)?);
        for (kind, protocols) in IP_SOCKETS {
            let mut other_protocol = vec![
                family()?,
                arg(1, SeccompCmpOp::MaskedEq(!SOCK_FLAGS), kind as u64)?,
            ];
            for protocol in protocols {
                other_protocol.push(arg(2, SeccompCmpOp::Ne, protocol as u64)?);
            }
            rules.push(rule(other_protocol)?);
        }
    }
    Ok(rules)
}

/// A filter that lets everything pass but `rules`, which fail with `errno`; on x86_64 the
/// rules hold for the x32 entry points too.
fn program(mut rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, Failure> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(failed)?;
    if arch == TargetArch::x86_64 {
        let x32: Vec<_> = rules
            .iter()
            .map(|(nr, r)| (nr | X32_SYSCALL_BIT, r.clone()))
            .collect();
        rules.extend(x32);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(failed)?;
    BpfProgram::try_from(filter).map_err(failed)
}

/// The filters: what fails with EPERM (`io_uring_setup`, `setns`, and `unshare` and `clone`
/// asking for a namespace), `clone3`, which fails with ENOSYS, and the sockets refused with
/// EAFNOSUPPORT and with EACCES. A filter has one answer for what it matches, hence four;
/// what each matches is apart from the others'.
fn programs() -> Result<[BpfProgram; 4], Failure> {
    let clone = CLONE_NAMESPACES
        .into_iter()
        .map(first_arg_has)
        .collect::<Result<Vec<_>, _>>()?;
    let mut unshare = clone.clone();
    unshare.push(first_arg_has(libc::CLONE_NEWTIME)?);
    let refused = BTreeMap::from([
        (libc::SYS_io_uring_setup, vec![]),
        (libc::SYS_setns, vec![]),
        (libc::SYS_unshare, unshare),
        (libc::SYS_clone, clone),
    ]);
    let unknown = BTreeMap::from([(libc::SYS_clone3, vec![])]);
    let protocols = BTreeMap::from([(libc::SYS_socket, refused_protocols()?)]);
    Ok([
        program(refused, libc::EPERM)?,
        program(unknown, libc::ENOSYS)?,
        program(refused_families()?, libc::EAFNOSUPPORT)?,
        program(protocols, libc::EACCES)?,
    ])
}

/// Installs the filters on this process (no-new-privileges must be set), for everything it
/// execs and starts.
pub(crate) fn apply(best_effort: bool, protections: &mut Protections) -> Result<(), Failure> {
    let applied = programs().and_then(|programs| {
        programs
            .iter()
            .try_for_each(|p| seccompiler::apply_filter(p).map_err(failed))
    });
    match applied {
        Ok(()) => {
            protections.seccomp = true;
            protections.new_namespaces_denied = true;
            Ok(())
        }
        Err(f) if best_effort => {
            protections.missing.push(format!(
                "{}: every socket family, io_uring and new namespaces are reachable",
                f.message
            ));
            Ok(())
        }
        Err(f) => Err(Failure::unavailable(format!(
            "{} (a kernel without seccomp filters cannot keep sockets beside TCP and UDP and new \
             namespaces out of reach; write isolation = \"best-effort\" to run without it)",
            f.message
        ))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filters_build_for_this_machine() {
        assert!(super::programs().is_ok());
    }
}
