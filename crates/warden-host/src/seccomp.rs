//! Seccomp filters for what Landlock and the namespaces leave open:
//! - unix sockets: a pathname socket is reachable whatever the Landlock domain up to ABI 7,
//!   and no namespace hides it. `socketpair` stays, so programs keep their private pipes;
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

use crate::helper::Failure;
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

/// The filters: what fails with EPERM (`socket(AF_UNIX, …)`, `io_uring_setup`, `setns`, and
/// `unshare` and `clone` asking for a namespace), then `clone3`, which fails with ENOSYS. A
/// filter has one answer for what it matches, hence two.
fn programs() -> Result<[BpfProgram; 2], Failure> {
    let unix = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::AF_UNIX as u64,
        )
        .map_err(failed)?,
    ])
    .map_err(failed)?;
    let clone = CLONE_NAMESPACES
        .into_iter()
        .map(first_arg_has)
        .collect::<Result<Vec<_>, _>>()?;
    let mut unshare = clone.clone();
    unshare.push(first_arg_has(libc::CLONE_NEWTIME)?);
    let refused = BTreeMap::from([
        (libc::SYS_socket, vec![unix]),
        (libc::SYS_io_uring_setup, vec![]),
        (libc::SYS_setns, vec![]),
        (libc::SYS_unshare, unshare),
        (libc::SYS_clone, clone),
    ]);
    let unknown = BTreeMap::from([(libc::SYS_clone3, vec![])]);
    Ok([
        program(refused, libc::EPERM)?,
        program(unknown, libc::ENOSYS)?,
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
                "{}: unix sockets, io_uring and new namespaces are reachable",
                f.message
            ));
            Ok(())
        }
        Err(f) => Err(Failure::unavailable(format!(
            "{} (a kernel without seccomp filters cannot keep unix sockets and new namespaces \
             out of reach; write isolation = \"best-effort\" to run without it)",
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
