//! What every container of one tool looks like: the hardening, the mounts, the user, the
//! limits. Decided once at load, so the audit and the containers agree.

use crate::config::DockerConfig;
use crate::files::{Copied, Files, Root};
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType,
};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use warden_command::{NetworkMode, User};
use warden_core::{Access, Grants};

/// Where every container has a tmpfs of its own.
const TMP: &str = "/tmp";

/// Everything about a tool's containers except the command.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub tool: String,
    pub image: String,
    /// Other images a session's client may choose (the policy's `images`).
    pub images: Vec<String>,
    pub user: User,
    pub workdir: Option<String>,
    pub mounts: Vec<Mount>,
    /// The roots copied in, for an engine that does not mount them (`mounts` then holds
    /// their volumes).
    pub copied: Option<Copied>,
    pub network: NetworkMode,
    pub pids: u32,
    pub nano_cpus: u64,
    pub tmp: u64,
    /// The engine's OCI runtime, by name; `None`: its default.
    pub runtime: Option<String>,
    /// The runtime is gVisor, whose processes cost the host more than one pid each.
    pub gvisor: bool,
}

/// Under gVisor's ptrace platform a sandbox holds about 40 host pids of its own (its kernel's
/// threads and its file server's) and about 10 more for each process inside it (the process's
/// stub and the threads that trace it): measured with runsc 2022-12-19. A cgroup limit of
/// `pids` would let it start barely a few processes, or not start at all, so the container's
/// limit is scaled to hold `pids` processes inside.
const GVISOR_BASE_PIDS: u32 = 48;
const GVISOR_PIDS_PER_PROCESS: u32 = 12;

/// Why a container's user cannot write what the policy grants it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    /// A read-write root's owner could not be read.
    #[error("cannot read {}: {source}", .root.display())]
    Unreadable {
        root: PathBuf,
        source: std::io::Error,
    },
    /// The container's user may not write a read-write root it mounts.
    #[error(
        "the read-write root {} is owned by {owner}:{group} (mode {mode:o}), so the container's \
         user {user} could not write it (Docker does not remap owners, and a docker tool never \
         runs as root): give the folder to a user (`chown -R 65534:65534 {}`, or your own \
         user), or set `user` in [executor] to one that may write it",
        .root.display(),
        .root.display()
    )]
    NotWritable {
        root: PathBuf,
        owner: u32,
        group: u32,
        mode: u32,
        user: User,
    },
}

impl Plan {
    /// Checks what can only be checked against this machine: that every read-write root is
    /// writable by the container's user, when it is mounted.
    pub(crate) fn new(
        cfg: &DockerConfig,
        grants: &Grants,
        files: Files,
    ) -> Result<Plan, PlanError> {
        let user = choose_user(cfg, grants, files)?;
        let copied = (files == Files::Copied).then(|| Copied {
            roots: grants
                .fs
                .iter()
                .map(|g| Root {
                    host: g.host.clone(),
                    guest: g.guest.clone(),
                    write_back: g.access == Access::ReadWrite,
                })
                .collect(),
            limit: cfg.copy_limit,
            user,
        });
        let mounts = match &copied {
            Some(copied) => copied.mounts(),
            None => bind_mounts(grants),
        };
        Ok(Plan {
            tool: cfg.name.clone(),
            image: cfg.image.value.clone(),
            images: cfg.images.clone(),
            user,
            workdir: cfg.workdir.as_ref().map(|w| w.value.clone()),
            mounts,
            copied,
            network: cfg.network.value,
            pids: cfg.pids,
            nano_cpus: cfg.nano_cpus,
            tmp: cfg.tmp,
            runtime: cfg.runtime.as_ref().map(|r| r.value.clone()),
            gvisor: false,
        })
    }

    /// Every path a container mounts something at: each granted root (or its copy) and its
    /// `/tmp`.
    pub(crate) fn mount_points(&self) -> Vec<PathBuf> {
        let roots = self.mounts.iter().filter_map(|m| m.target.as_deref());
        roots.chain([TMP]).map(PathBuf::from).collect()
    }

    /// The limit of the container's pids cgroup: the policy's processes, in host pids.
    pub(crate) fn pids_limit(&self) -> u32 {
        if self.gvisor {
            GVISOR_BASE_PIDS.saturating_add(self.pids.saturating_mul(GVISOR_PIDS_PER_PROCESS))
        } else {
            self.pids
        }
    }

    /// The container for one command (or one session shell when `stdin` is true).
    pub(crate) fn container(
        &self,
        cmd: Vec<String>,
        env: Vec<String>,
        memory: u64,
        labels: HashMap<String, String>,
        stdin: bool,
    ) -> ContainerCreateBody {
        let memory = i64::try_from(memory).unwrap_or(i64::MAX);
        let host = HostConfig {
            mounts: Some(self.mounts.clone()),
            network_mode: Some(
                match self.network {
                    NetworkMode::None => "none",
                    NetworkMode::Unrestricted => "bridge",
                }
                .into(),
            ),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([(
                TMP.to_owned(),
                format!("rw,nosuid,nodev,size={},mode=1777", self.tmp),
            )])),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec![
                "no-new-privileges".into(),
                crate::seccomp::SECURITY_OPT.clone(),
            ]),
            pids_limit: Some(i64::from(self.pids_limit())),
            memory: Some(memory),
            // Equal to memory: no swap, so the memory limit is the limit.
            memory_swap: Some(memory),
            nano_cpus: Some(i64::try_from(self.nano_cpus).unwrap_or(i64::MAX)),
            // Output is read through attach: a log driver would copy a flood to disk.
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            // An init as PID 1 reaps orphans, which would otherwise count against pids.
            init: Some(true),
            ipc_mode: Some("private".into()),
            privileged: Some(false),
            auto_remove: Some(false),
            runtime: self.runtime.clone(),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            cmd: Some(cmd),
            // The command is exactly the policy's argv, whatever the image's entrypoint.
            entrypoint: Some(Vec::new()),
            env: Some(env),
            user: Some(self.user.to_string()),
            working_dir: self.workdir.clone(),
            hostname: Some("sandbox".into()),
            labels: Some(labels),
            // Under a runtime the policy names, `none`'s namespace is all: gVisor serves its
            // host network (where the gate listens) from that namespace, which a disabled
            // network takes away from it.
            network_disabled: Some(self.network == NetworkMode::None && self.runtime.is_none()),
            attach_stdin: Some(stdin),
            open_stdin: Some(stdin),
            // The shell sees end-of-input when warden detaches, so a crash ends the session.
            stdin_once: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            host_config: Some(host),
            ..Default::default()
        }
    }
}

/// Each root bind-mounted at its guest path, read-only or read-write as granted.
fn bind_mounts(grants: &Grants) -> Vec<Mount> {
    grants
        .fs
        .iter()
        .map(|g| Mount {
            target: Some(g.guest.clone()),
            source: Some(g.host.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(g.access == Access::ReadOnly),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                // Mounts below a granted folder are not part of the grant.
                non_recursive: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// The policy's user; else the owner of the read-write roots (so files written there belong
/// to whoever owns the folder); else nobody. Never root, and always one that can write every
/// read-write root, since the engine does not remap owners (a copied root is the user's
/// inside whoever owns it here: warden writes it back).
fn choose_user(cfg: &DockerConfig, grants: &Grants, files: Files) -> Result<User, PlanError> {
    let writable: Vec<&Path> = grants
        .fs
        .iter()
        .filter(|g| g.access == Access::ReadWrite)
        .map(|g| g.host.as_path())
        .collect();
    let user = match &cfg.user {
        Some(u) => u.value,
        None => match writable.first() {
            Some(first) => {
                let meta = std::fs::metadata(first).map_err(|source| PlanError::Unreadable {
                    root: first.to_path_buf(),
                    source,
                })?;
                if meta.uid() == 0 {
                    User::NOBODY
                } else {
                    User {
                        uid: meta.uid(),
                        gid: meta.gid(),
                    }
                }
            }
            None => User::NOBODY,
        },
    };
    if files == Files::Copied {
        return Ok(user);
    }
    for dir in writable {
        let meta = std::fs::metadata(dir).map_err(|source| PlanError::Unreadable {
            root: dir.to_path_buf(),
            source,
        })?;
        if !may_write(meta.uid(), meta.gid(), meta.mode(), user) {
            return Err(PlanError::NotWritable {
                root: dir.to_path_buf(),
                owner: meta.uid(),
                group: meta.gid(),
                mode: meta.mode() & 0o7777,
                user,
            });
        }
    }
    Ok(user)
}

/// Whether `user` may create files in a directory with this owner and mode.
fn may_write(owner: u32, group: u32, mode: u32, User { uid, gid }: User) -> bool {
    let need = if owner == uid {
        0o300
    } else if group == gid {
        0o030
    } else {
        0o003
    };
    mode & need == need
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_permission_follows_the_mode_bits() {
        assert!(may_write(
            1000,
            1000,
            0o755,
            User {
                uid: 1000,
                gid: 1000
            }
        ));
        assert!(!may_write(0, 0, 0o755, User::NOBODY));
        assert!(may_write(0, 0, 0o1777, User::NOBODY));
        assert!(may_write(0, 65534, 0o775, User::NOBODY));
        assert!(!may_write(
            1000,
            1000,
            0o555,
            User {
                uid: 1000,
                gid: 1000
            }
        ));
    }
}
