//! A seccomp filter for what Landlock and the namespaces leave open: unix sockets (a pathname
//! socket is reachable whatever the Landlock domain up to ABI 7, and no namespace hides it) and
//! io_uring (its operations, sockets among them, pass beside per-syscall filters). `socketpair`
//! stays, so programs keep their private pipes.

use crate::helper::Failure;
use crate::plan::Protections;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// x32 system calls reach the same kernel entry points with this bit set.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

fn failed(e: impl std::fmt::Display) -> Failure {
    Failure::setup(format!("seccomp: {e}"))
}

/// The filter: `socket(AF_UNIX, …)` and `io_uring_setup` fail with EPERM, all else passes.
fn program() -> Result<BpfProgram, Failure> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(failed)?;
    let unix = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            nix::libc::AF_UNIX as u64,
        )
        .map_err(failed)?,
    ])
    .map_err(failed)?;
    let mut rules = BTreeMap::new();
    rules.insert(nix::libc::SYS_socket, vec![unix.clone()]);
    rules.insert(nix::libc::SYS_io_uring_setup, vec![]);
    if arch == TargetArch::x86_64 {
        rules.insert(nix::libc::SYS_socket | X32_SYSCALL_BIT, vec![unix]);
        rules.insert(nix::libc::SYS_io_uring_setup | X32_SYSCALL_BIT, vec![]);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::EPERM as u32),
        arch,
    )
    .map_err(failed)?;
    BpfProgram::try_from(filter).map_err(failed)
}

/// Installs the filter on this process (no-new-privileges must be set), for everything it
/// execs and starts.
pub(crate) fn apply(best_effort: bool, protections: &mut Protections) -> Result<(), Failure> {
    match program().and_then(|p| seccompiler::apply_filter(&p).map_err(failed)) {
        Ok(()) => {
            protections.seccomp = true;
            Ok(())
        }
        Err(f) if best_effort => {
            protections.missing.push(format!(
                "{}: unix sockets and io_uring are reachable",
                f.message
            ));
            Ok(())
        }
        Err(f) => Err(Failure::unavailable(format!(
            "{} (a kernel without seccomp filters cannot keep unix sockets out of reach; \
             write isolation = \"best-effort\" to run without it)",
            f.message
        ))),
    }
}
