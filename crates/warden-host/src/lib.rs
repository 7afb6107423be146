//! warden's host executor: each call a confined host process tree, for machines without
//! Docker and for native tools.
//!
//! The confinement is set up by a small single-threaded helper, forked by a server warden
//! starts once ([`helper_main`]): a new PID namespace (everything the command starts dies with it), a new
//! network namespace unless the policy opts in to the host's network, an unprivileged user
//! (nobody by default), rlimits on CPU, address space, file size, processes and open files, no
//! core dumps, no-new-privileges, a seccomp filter that allows only TCP and UDP sockets and unix
//! socketpairs and refuses io_uring and new namespaces, an empty environment plus the grants, stdin on `/dev/null`, and a Landlock
//! domain that reaches only the system folders and the granted roots. What the kernel lacks
//! makes the call `unavailable` unless the policy accepts `isolation = "best-effort"`; every
//! answer says which protections were in force.

mod backend;
mod beside;
mod config;
mod exec;
mod failure;
mod forks;
mod gate;
mod helper;
mod init;
mod join;
mod landlock;
mod layout;
mod mounts;
mod overlays;
mod passthrough;
mod plan;
mod program;
mod received;
mod reports;
mod sandboxes;
mod seccomp;
mod session;
mod signals;
mod spawner;
mod starter;
mod tool;

pub use backend::{DEFAULT_PREPARED, HostBackend};
pub use config::{DEFAULT_FILE_SIZE, DEFAULT_OPEN_FILES, DEFAULT_PROCESSES, HostConfig, Isolation};
pub use program::Helper;

/// Runs the helper: call it first thing in `main` of the process warden starts as its
/// helper, before any thread starts. Never returns. Started with a socket on its stdin it is
/// the fork server, which forks a helper for each sandbox (`forks`); else one helper.
pub fn helper_main() -> ! {
    let stdin_is_socket = nix::sys::stat::fstat(std::io::stdin())
        .is_ok_and(|s| s.st_mode & nix::libc::S_IFMT == nix::libc::S_IFSOCK);
    if stdin_is_socket {
        forks::serve(helper::main, overlays::main)
    }
    helper::main()
}

/// The id of the plan's protocol between warden and its helper: this crate's version and a
/// hash of its source. A helper program holds it (warden looks for it in the file before
/// starting one) and answers [`PROTOCOL_ARG`] with it.
pub const PROTOCOL: &str = env!("WARDEN_HOST_PROTOCOL");

/// The argument that asks a helper program for its [`PROTOCOL`].
pub const PROTOCOL_ARG: &str = "--protocol";

/// `main` of a helper program of its own: answers [`PROTOCOL_ARG`], else runs the helper
/// ([`helper_main`]). Never returns.
pub fn helper_program_main() -> ! {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == PROTOCOL_ARG)
    {
        println!("{PROTOCOL}");
        std::process::exit(0);
    }
    helper_main()
}
