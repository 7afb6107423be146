//! warden's Docker executor: each call (or each session) in a hardened container, driven over
//! the Engine API with bollard — no `docker` CLI.
//!
//! The engine is this machine's unix socket or another machine's over TCP with mutual TLS
//! ([`EngineAddress`]); which one a tool uses is `DOCKER_HOST`'s, or its policy's `engine`.
//!
//! Every container: read-only root with a small tmpfs `/tmp`, every capability dropped,
//! no-new-privileges, warden's seccomp profile (the engine's default, with sockets allowed by
//! list), a non-root user, pids/memory/CPU limits, no network unless the policy
//! opts in, only the granted folders mounted (or copied in, for an engine elsewhere), only the
//! granted env, no log driver (output is read through attach and capped), the `warden` label,
//! and removal when its call or session ends — or, after a crash, by the next warden to reach
//! the engine (at once on this machine, when its lease ends from anywhere else).

// Denied but in `joined`, whose shells join a container between a fork and an exec.
#![deny(unsafe_code)]

mod address;
mod backend;
mod beside;
mod config;
mod container;
mod debian;
mod engine;
mod engine_guard;
mod files;
mod gate;
mod image;
mod init;
#[allow(
    unsafe_code,
    reason = "system calls between a fork and an exec, and ptrace"
)]
mod joined;
mod launch;
mod lease;
mod names;
mod oom;
mod passthrough;
mod per_call;
mod plan;
mod pool;
mod removal;
mod runtime;
mod seccomp;
mod session;
mod tool;
mod view;
mod volume;

pub use address::{AddressError, CERT_FILES, EngineAddress, Place};
pub use backend::DockerBackend;
pub use config::{DEFAULT_NANO_CPUS, DEFAULT_PIDS, DockerConfig, MAX_POOL};
pub use debian::{
    BOOTSTRAP_TOOL, BuildTimes, DEBIAN_PACKAGES, DebianImage, DebianRecipe, Progress,
    build_debian_image,
};
pub use engine::{Engine, SANDBOX_IMAGE};
pub use files::{DEFAULT_COPY_LIMIT, FILES_ENV, Files};
pub use image::{BUSYBOX, IMAGE_LABEL, ImageError, build_sandbox_image};
pub use lease::{INSTANCE_LABEL, LABEL, LEASE, LEASE_LABEL, OWNER_LABEL};
pub use names::{DEBIAN_IMAGE, DEBIAN_REPOSITORY};
