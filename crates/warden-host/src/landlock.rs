//! The Landlock domain of a host command: read and execute in the system folders a program
//! needs to start, the granted roots with their access, and nothing else. Every feature is a
//! hard requirement: the crate's best effort would silently run with less.

use crate::failure::Failure;
use crate::plan::{Plan, Protections, TRUST_MOUNT};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, make_bitflags,
    path_beneath_rules,
};

/// The oldest ABI warden confines with: 3 (Linux 6.2) is the first that controls truncation,
/// without which a read-only root could still be emptied by `truncate(2)`.
pub(crate) const REQUIRED_ABI: u32 = 3;

/// The newest ABI this code was tested on; a newer kernel is used at this level.
const TESTED_ABI: ABI = ABI::V7;

/// Read and execute: what a program needs to start (loader, libraries, binaries, the files
/// libc reads). Missing ones are skipped.
pub(crate) const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    // Public facts programs read: the release (pip's User-Agent fails without it) and the
    // roots that verify HTTPS through the gate's tunnels.
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/ssl/certs",
    "/etc/pki/tls/certs",
    "/etc/ca-certificates",
    // Tables Python's standard library reads (pip fails without mime.types).
    "/etc/mime.types",
    "/etc/services",
    "/etc/protocols",
    "/dev/urandom",
    "/dev/random",
];

/// Devices any command may read and write.
pub(crate) const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The highest Landlock ABI of the running kernel, 0 when it has none.
pub(crate) fn kernel_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: nix::libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call only returns a number.
    let v = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// The ABI to confine with, given the kernel's: refused below [`REQUIRED_ABI`] unless the
/// policy accepts best effort (then noted as missing); `None` when there is none at all.
fn usable_abi(
    kernel: u32,
    best_effort: bool,
    protections: &mut Protections,
) -> Result<Option<ABI>, Failure> {
    if kernel < REQUIRED_ABI {
        let lack = format!(
            "Landlock (this kernel's ABI is {kernel}; warden needs {REQUIRED_ABI}, Linux 6.2)"
        );
        if !best_effort {
            return Err(Failure::unavailable(format!(
                "{lack}: files outside the granted roots cannot be kept out of reach. Use a \
                 newer kernel with landlock in its lsm= list, or write isolation = \
                 \"best-effort\" in the policy to run without it"
            )));
        }
        protections.missing.push(format!(
            "{lack}: every file the user can reach is reachable"
        ));
        if kernel == 0 {
            return Ok(None);
        }
    }
    Ok(Some(ABI::from(kernel as i32).min(TESTED_ABI)))
}

fn failed(what: &str, e: impl std::fmt::Display) -> Failure {
    Failure::setup(format!("landlock {what}: {e}"))
}

/// Builds the ruleset (opening the roots while still privileged); `None` when the kernel has
/// no usable Landlock and the policy accepts that.
pub(crate) fn ruleset(
    plan: &Plan,
    protections: &mut Protections,
) -> Result<Option<RulesetCreated>, Failure> {
    let Some(abi) = usable_abi(kernel_abi(), plan.sandbox.best_effort, protections)? else {
        return Ok(None);
    };
    let mut rules = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| failed("filesystem rights", e))?;
    if abi >= ABI::V6 {
        rules = rules
            .scope(Scope::from_all(abi))
            .map_err(|e| failed("scoping", e))?;
        protections.landlock_scoped = true;
    }
    if abi >= ABI::V4 && !plan.sandbox.host_network {
        rules = rules
            .handle_access(make_bitflags!(AccessNet::{BindTcp | ConnectTcp}))
            .map_err(|e| failed("TCP rights", e))?;
        protections.landlock_tcp_denied = true;
    }
    let read = AccessFs::from_read(abi);
    let mut created = rules
        .create()
        .map_err(|e| failed("ruleset", e))?
        .add_rules(path_beneath_rules(SYSTEM, read))
        .map_err(|e| failed("system folders", e))?
        .add_rules(path_beneath_rules(
            DEVICES,
            read | AccessFs::from_write(abi),
        ))
        .map_err(|e| failed("devices", e))?;
    if protections.private_tmp {
        // The call's own tmpfs, not the host's /tmp (which stays out of reach otherwise).
        let fd = PathFd::new("/tmp").map_err(|e| failed("/tmp", e))?;
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::from_all(abi)))
            .map_err(|e| failed("/tmp", e))?;
    }
    if plan.sandbox.trust {
        // The sandbox's own tmpfs there, holding only the bundle it trusts.
        let fd = PathFd::new(TRUST_MOUNT).map_err(|e| failed(TRUST_MOUNT, e))?;
        created = created
            .add_rule(PathBeneath::new(fd, read))
            .map_err(|e| failed(TRUST_MOUNT, e))?;
    }
    for root in &plan.sandbox.roots {
        let fd =
            PathFd::new(&root.guest).map_err(|e| failed(&root.guest.display().to_string(), e))?;
        let access = if root.writable {
            AccessFs::from_all(abi)
        } else {
            read
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| failed(&root.guest.display().to_string(), e))?;
    }
    if protections.landlock_tcp_denied && plan.sandbox.gate {
        // Connects to the gate's port: in the sandbox's own namespace only the gate listens.
        created = created
            .add_rule(NetPort::new(warden_net::GATE_PORT, AccessNet::ConnectTcp))
            .map_err(|e| failed("the gate's port", e))?;
    }
    protections.landlock_abi = abi as u32;
    Ok(Some(created))
}

/// Enforces the ruleset on this process and everything it starts.
pub(crate) fn restrict(
    ruleset: Option<RulesetCreated>,
    protections: &mut Protections,
) -> Result<(), Failure> {
    let Some(ruleset) = ruleset else {
        return Ok(());
    };
    let status = ruleset.restrict_self().map_err(|e| failed("restrict", e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        protections.landlock_abi = 0;
        return Err(Failure::unavailable(format!(
            "Landlock was not fully enforced ({:?})",
            status.ruleset
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_kernel_is_refused_unless_the_policy_accepts_less() {
        for kernel in [0, 1, 2] {
            let mut p = Protections::default();
            let e = usable_abi(kernel, false, &mut p).expect_err("refused");
            assert!(e.unavailable, "{}", e.message);
            assert!(e.message.contains("best-effort"), "{}", e.message);
        }
        let mut p = Protections::default();
        assert_eq!(usable_abi(2, true, &mut p).ok().flatten(), Some(ABI::V2));
        assert!(p.missing[0].contains("ABI is 2"), "{:?}", p.missing);
        let mut p = Protections::default();
        assert_eq!(usable_abi(0, true, &mut p).ok().flatten(), None);
        assert_eq!(p.missing.len(), 1);
    }

    #[test]
    fn a_newer_kernel_is_used_at_the_tested_level() {
        let mut p = Protections::default();
        assert_eq!(usable_abi(3, false, &mut p).ok().flatten(), Some(ABI::V3));
        assert_eq!(
            usable_abi(42, false, &mut p).ok().flatten(),
            Some(TESTED_ABI)
        );
        assert!(p.missing.is_empty());
    }
}
