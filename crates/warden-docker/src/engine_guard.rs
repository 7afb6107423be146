//! What a docker policy must never hand its containers: the engine itself. A container that
//! reaches the engine's socket starts a privileged container of its own and owns the machine,
//! whatever its policy says; so roots that hold a socket, and the groups that may use the
//! engine's, are refused at load.

use crate::address::EngineAddress;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use warden_command::User;
use warden_core::{FsGrant, Policy, PolicyError};

/// How many entries of a granted root are looked at for sockets: enough for `/run` and a
/// project's folders; past it, the rest of a very large root is not searched (the engine's
/// own socket is always checked by its path).
pub(crate) const SOCKET_SEARCH_LIMIT: usize = 20_000;

/// Refuses a policy whose containers could reach the engine at `address`: a granted root
/// holding its socket (or any other socket found under it), or a `user` whose group is root's
/// or the one that owns the engine's socket.
pub(crate) fn refuse_engine_reach(
    policy: &Policy,
    user: User,
    address: Option<&EngineAddress>,
    user_line: Option<usize>,
) -> Result<(), PolicyError> {
    let engine_socket = match address {
        Some(EngineAddress::Unix(path)) => path.canonicalize().ok(),
        _ => None,
    };
    for (index, grant) in policy.grants.fs.iter().enumerate() {
        let line = policy.grant_lines.fs.get(index).copied();
        let found = match &engine_socket {
            Some(socket) if socket.starts_with(&grant.host) => Some(socket.clone()),
            _ => socket_under(&grant.host),
        };
        if let Some(socket) = found {
            return Err(PolicyError::new(
                &policy.path,
                line,
                holds_socket(grant, &socket, engine_socket.as_deref() == Some(&*socket)),
            ));
        }
    }
    let socket_group = engine_socket
        .as_ref()
        .and_then(|s| std::fs::metadata(s).ok())
        .map(|m| m.gid());
    if user.gid == 0 || Some(user.gid) == socket_group {
        let whose = if user.gid == 0 {
            "root's group".to_owned()
        } else {
            format!(
                "the group of the engine's socket {}",
                engine_socket.as_deref().unwrap_or(Path::new("?")).display()
            )
        };
        return Err(PolicyError::new(
            &policy.path,
            user_line,
            format!(
                "the container's user {user} has group {}, {whose}: a container of that group \
                 could reach the Docker engine and start containers of its own; set `user` in \
                 [executor] with another group (\"65534:65534\" is nobody's)",
                user.gid
            ),
        ));
    }
    Ok(())
}

fn holds_socket(grant: &FsGrant, socket: &Path, is_engine: bool) -> String {
    let what = if is_engine {
        "the Docker engine's socket"
    } else {
        "a socket"
    };
    format!(
        "the root {} holds {what} {}: a container given it could talk to whatever listens \
         there (the engine would hand it the machine); grant a folder without sockets",
        grant.host.display(),
        socket.display()
    )
}

/// The first socket under `root` (not following links), within [`SOCKET_SEARCH_LIMIT`]
/// entries.
fn socket_under(root: &Path) -> Option<PathBuf> {
    let mut pending = vec![root.to_owned()];
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SOCKET_SEARCH_LIMIT {
                return None;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_socket() {
                return Some(entry.path());
            }
            if kind.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test panics on what it cannot go on without"
    )]
    use super::*;

    #[test]
    fn a_socket_deep_in_a_root_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(socket_under(dir.path()), None);
        let path = dir.path().join("a/b/s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_eq!(socket_under(dir.path()), Some(path));
    }
}
