//! The sandbox's end of warden's gate. In a new network namespace nothing is up, not even
//! loopback; with net grants `init` brings loopback up, binds `127.0.0.1:GATE_PORT` there and
//! hands the listening socket to warden over a unix socket (`GATE_FD`). warden serves it with
//! [`warden_net::Proxy`] from its own namespace, so the sandbox reaches the gate and, through
//! it, the granted hosts: nothing else listens in its namespace and nothing routes out of it.

use crate::failure::{Failure, setup};
use crate::plan::GATE_FD;
use nix::libc;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
    recvmsg, sendmsg, socket,
};
use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use warden_net::GATE_PORT;

/// In `init`, inside the new namespaces: loopback up, the listener bound and handed over.
/// `GATE_FD` is closed either way, so warden never waits on it.
pub(crate) fn open_in_namespace() -> Result<(), Failure> {
    let handed = loopback_up().and_then(|()| {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, GATE_PORT))
            .map_err(|e| setup(format!("binding the gate at 127.0.0.1:{GATE_PORT}: {e}")))?;
        let fds = [listener.as_raw_fd()];
        sendmsg::<UnixAddr>(
            GATE_FD,
            &[IoSlice::new(b"g")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .map(drop)
        .map_err(|e| setup(format!("handing the gate to warden: {e}")))
    });
    let _ = nix::unistd::close(GATE_FD);
    handed
}

/// `ip link set lo up`, by ioctl: the namespace's own loopback, nothing else.
fn loopback_up() -> Result<(), Failure> {
    let fail =
        |what: &str, e: nix::errno::Errno| setup(format!("bringing loopback up ({what}): {e}"));
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| fail("socket", e))?;
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *to = *from as libc::c_char;
    }
    // SAFETY: both ioctls read and write only `req`, which outlives them.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(fail("SIOCGIFFLAGS", nix::errno::Errno::last()));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(fail("SIOCSIFFLAGS", nix::errno::Errno::last()));
        }
    }
    Ok(())
}

/// In warden: the listener the helper handed over on `socket`, or `None` when it closed the
/// socket without one (it failed, and its report says why).
pub(crate) async fn receive(
    socket: tokio::net::UnixStream,
) -> std::io::Result<Option<TcpListener>> {
    loop {
        socket.readable().await?;
        match socket.try_io(tokio::io::Interest::READABLE, || {
            take_fd(socket.as_raw_fd()).map_err(std::io::Error::from)
        }) {
            Ok(fd) => return Ok(fd.map(TcpListener::from)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

fn take_fd(fd: RawFd) -> nix::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    for message in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = message {
            // SAFETY: the kernel just installed these descriptors in this process for us.
            let mut owned = fds
                .into_iter()
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
            return Ok(owned.next());
        }
    }
    Ok(None)
}
