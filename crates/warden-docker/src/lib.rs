//! warden's Docker executor: each call (or each session) in a hardened container, driven over
//! the Engine API with bollard — no `docker` CLI.
//!
//! Every container: read-only root with a small tmpfs `/tmp`, every capability dropped,
//! no-new-privileges, a non-root user, pids/memory/CPU limits, no network unless the policy
//! opts in, only the granted folders mounted (or copied in, for an engine elsewhere), only the granted env, no log driver (output is
//! read through attach and capped), the `warden` label, and removal when its call or session
//! ends — or, after a crash, at the next warden's first contact with the engine.

mod backend;
mod cgroup;
mod config;
mod container;
mod debian;
mod engine;
mod files;
mod gate;
mod image;
mod plan;
mod session;
mod tool;

pub use backend::DockerBackend;
pub use config::{DEFAULT_NANO_CPUS, DEFAULT_PIDS, DockerConfig};
pub use debian::{
    BOOTSTRAP_TOOL, BuildTimes, DEBIAN_IMAGE, DEBIAN_PACKAGES, DEBIAN_REPOSITORY, DebianImage,
    DebianRecipe, Progress, build_debian_image,
};
pub use engine::{Engine, LABEL, OWNER_LABEL, SANDBOX_IMAGE};
pub use files::{DEFAULT_COPY_LIMIT, FILES_ENV, Files};
pub use image::{BUSYBOX, IMAGE_LABEL, ImageError, build_sandbox_image};
