//! A courier's own pipe, for a sandbox whose shells' stdio an engine relays
//! ([`super::Siblings::relayed`]): a docker `exec`'s bytes pass through the engine and its
//! shim, two more copies each way (50 MB took ~110 ms out and ~90 ms in here, against
//! ~50 ms each through a pipe).
//!
//! The courier's shell makes a FIFO in its `/tmp`, opens it on its fd 3 for reading and
//! writing (which never blocks), and unlinks it. warden takes that descriptor from the
//! shell's process by its pidfd (`pidfd_getfd`: a duplicate, never a new open with warden's
//! rights), checks that it is a FIFO, and opens its own two ends of it through its own
//! `/proc/self/fd`, non-blocking (a flag of warden's ends alone: the shell's stays
//! blocking). A transfer's input is then written there and its output read from there; the
//! shell's stdio still carries the framing lines and the status.
//!
//! What it exposes is what the shell's stdio already did: a process of the sandbox's user
//! may open a pipe of the courier's through `/proc`, and so write into a transfer of its own
//! sandbox, or read one, as it could through the shell's stdin and stdout. Whatever reaches
//! warden is checked as any transfer's output is. A process that took the courier's pid
//! after it died can hand over only a FIFO it holds itself.

use rustix::fd::{AsRawFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};
use std::io;
use tokio::net::unix::pipe::{Receiver, Sender};

/// The descriptor the courier's shell holds its FIFO on.
pub(super) const FD: i32 = 3;

/// What a FIFO holds (a pipe's 64 KiB, as made: 1 MiB measured no faster here, and counts
/// against its maker's, the sandbox user's, pipe buffers), and so what one read takes.
pub(super) const SIZE: usize = 64 << 10;

/// warden's two ends of a courier's FIFO.
pub(super) struct Fifo {
    pub rx: Receiver,
    pub tx: Sender,
}

impl Fifo {
    /// Takes the FIFO on fd [`FD`] of process `pid` (see the module): an error when the
    /// process is gone, warden may not take its descriptors, or the descriptor is no FIFO.
    pub(super) fn take(pid: i32) -> io::Result<Self> {
        let held = taken(pid, FD)?;
        let own = |flags: OFlags| -> io::Result<OwnedFd> {
            let path = format!("/proc/self/fd/{}", held.as_raw_fd());
            let flags = flags | OFlags::NONBLOCK | OFlags::CLOEXEC;
            Ok(rustix::fs::open(path, flags, Mode::empty())?)
        };
        let (rx, tx) = (own(OFlags::RDONLY)?, own(OFlags::WRONLY)?);
        Ok(Self {
            rx: Receiver::from_owned_fd(rx)?,
            tx: Sender::from_owned_fd(tx)?,
        })
    }
}

/// warden's own writing end, non-blocking, of the FIFO that process `pid` holds on its
/// descriptor `fd` (taken as [`Fifo::take`] takes a courier's). Once the process closes its
/// own descriptor, this end is the FIFO's one writer: closing it ends what its reader reads.
pub(super) fn writer(pid: i32, fd: i32) -> io::Result<OwnedFd> {
    let held = taken(pid, fd)?;
    let path = format!("/proc/self/fd/{}", held.as_raw_fd());
    let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    Ok(rustix::fs::open(path, flags, Mode::empty())?)
}

/// Descriptor `fd` of process `pid`, duplicated by its pidfd: an error when the process is
/// gone, warden may not take its descriptors, or the descriptor is no FIFO.
fn taken(pid: i32, fd: i32) -> io::Result<OwnedFd> {
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("no such process"))?;
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty())?;
    let held = rustix::process::pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty())?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&held)?.st_mode);
    if kind != FileType::Fifo {
        return Err(io::Error::other(format!(
            "its fd {fd} is a {kind:?}, not a FIFO"
        )));
    }
    Ok(held)
}

/// Reads what FIFO end `rx` holds now into `into`, up to `bound` bytes in all: whether it went
/// past `bound`. Read by the system call itself, not by the runtime's `try_read`, which
/// reads nothing until the reactor has seen the FIFO readable: bytes a command wrote
/// just before it ended would be missed.
pub(super) fn drain(rx: &Receiver, into: &mut Vec<u8>, bound: u64) -> io::Result<bool> {
    let mut buf = vec![0; SIZE];
    loop {
        match rustix::io::read(rx, &mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                if keep(into, &buf[..n], bound) {
                    return Ok(true);
                }
            }
            Err(rustix::io::Errno::AGAIN) => return Ok(false),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Adds `bytes` to `into` within `bound` bytes in all: whether it went past.
pub(super) fn keep(into: &mut Vec<u8>, bytes: &[u8], bound: u64) -> bool {
    let room = usize::try_from(bound)
        .unwrap_or(usize::MAX)
        .saturating_sub(into.len());
    into.extend_from_slice(&bytes[..bytes.len().min(room)]);
    bytes.len() > room
}
