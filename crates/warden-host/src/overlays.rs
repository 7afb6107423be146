//! Views for what runs in warden's own process (wasm tools): each read-write root of a call
//! as a detached overlay mount whose upper layer is the call's view (see `warden_tx`), handed
//! to warden as a descriptor. warden cannot mount it itself: an unprivileged mount needs a
//! user namespace, which a threaded process cannot enter. So the fork server forks a child
//! for it ([`main`]) that enters new user and mount namespaces (unless it runs as root),
//! makes the overlays with `fsmount(2)`, sends their descriptors back over its socket, and
//! exits. A detached mount lives as long as a descriptor of it is open, wherever its
//! namespaces went.

use crate::plan::ViewLayer;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use warden_tx::{TxError, View};

/// The most roots one call's view mounts (the descriptors one answer carries).
const MAX_ROOTS: usize = 64;

/// One overlay to make: `lower` seen through `layer`.
#[derive(Debug, Serialize, Deserialize)]
struct Layered {
    lower: PathBuf,
    layer: ViewLayer,
}

/// Mounts views through a host backend's fork server.
pub(crate) struct ForkedOverlays {
    pub backend: crate::HostBackend,
}

impl warden_tx::Overlays for ForkedOverlays {
    fn mount(&self, view: &View) -> Result<Vec<OwnedFd>, TxError> {
        let wanted: Vec<Layered> = view
            .roots()
            .iter()
            .enumerate()
            .map(|(i, root)| {
                let layer = view.layer(i);
                Layered {
                    lower: root.clone(),
                    layer: ViewLayer {
                        upper: layer.upper,
                        work: layer.work,
                    },
                }
            })
            .collect();
        let fail = |why: String| TxError::Unready {
            dir: view.roots().first().cloned().unwrap_or_default(),
            why: format!("the call's view could not be mounted: {why}"),
        };
        if wanted.len() > MAX_ROOTS {
            return Err(fail(format!("more than {MAX_ROOTS} read-write roots")));
        }
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| fail(format!("socketpair: {e}")))?;
        crate::forks::set_answer_wait(&ours).map_err(|e| fail(e.to_string()))?;
        let _child = self
            .backend
            .forker()
            .fork_overlays(&theirs)
            .map_err(|e| fail(e.to_string()))?;
        drop(theirs);
        let framed = crate::plan::frame(&wanted).map_err(|e| fail(e.to_string()))?;
        File::from(ours.try_clone().map_err(|e| fail(e.to_string()))?)
            .write_all(&framed)
            .map_err(|e| fail(format!("sending the roots: {e}")))?;
        let (text, fds) = receive(&ours).map_err(|e| fail(format!("reading the answer: {e}")))?;
        if fds.len() == wanted.len() {
            Ok(fds)
        } else {
            Err(fail(text))
        }
    }
}

/// One answer: its text and the descriptors it carried.
fn receive(socket: &OwnedFd) -> std::io::Result<(String, Vec<OwnedFd>)> {
    let mut text = [0u8; 1024];
    let mut space = nix::cmsg_space!([RawFd; MAX_ROOTS]);
    let (len, fds) = crate::forks::receive(socket, &mut text, &mut space)?;
    let said = match len {
        0 => "the helper ended without an answer".to_owned(),
        _ => String::from_utf8_lossy(&text[..len]).into_owned(),
    };
    Ok((said, fds))
}

/// The child's side: reads the overlays to make on fd 0, answers their descriptors (or why
/// not) there, and exits.
pub(crate) fn main() -> ! {
    // SAFETY: fd 0 is the socket the fork server put there; ManuallyDrop keeps it open.
    let socket = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    let answer = crate::received::read_frame::<Vec<Layered>>(&socket)
        .map_err(|f| f.message)
        .and_then(|(wanted, _)| mount_all(&wanted));
    let sent = match &answer {
        Ok(fds) => {
            let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            crate::forks::send_answer(Ok(&raw))
        }
        Err(why) => crate::forks::send_answer(Err(why)),
    };
    std::process::exit(i32::from(sent.is_err() || answer.is_err()))
}

/// The overlays, in new user and mount namespaces of warden's user unless this is root.
fn mount_all(wanted: &[Layered]) -> Result<Vec<OwnedFd>, String> {
    let root = nix::unistd::Uid::effective().is_root();
    if !root {
        own_namespaces()?;
    }
    wanted
        .iter()
        .map(|w| {
            crate::mounts::overlay(&w.lower, &w.layer, !root)
                .map_err(|e| format!("an overlay of {}: {e}", w.lower.display()))
        })
        .collect()
}

/// Enters new user and mount namespaces, warden's user mapped to itself as a sandbox's is.
fn own_namespaces() -> Result<(), String> {
    use nix::sched::{CloneFlags, unshare};
    use nix::unistd::{Pid, getgid, getuid};
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("entering a user namespace: {e}"))?;
    crate::helper::map_user(Pid::this(), uid, gid, true).map_err(|f| f.message)
}
