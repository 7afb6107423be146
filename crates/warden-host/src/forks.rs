//! The fork server: one helper process, started once, that forks a helper for each sandbox.
//!
//! Starting a helper program costs an `exec`: mapping it, its dynamic loader, and glibc's
//! start-up, which asks the CPU for its caches with a few dozen `cpuid` instructions, each a
//! trip to the hypervisor on a virtual machine (~12 µs each where this was measured: ~1.2 ms
//! of CPU an `exec`). And warden, a large threaded process, must `fork` to hand a child
//! descriptors at fixed numbers. Both are paid once here: warden starts the helper program
//! with a socket on its stdin, which makes it this server ([`serve`]); for each sandbox warden
//! sends the helper's five descriptors over the socket, and the server forks a child that
//! puts them in place and runs the helper ([`crate::helper::main`]) as if started anew.
//!
//! The server is single-threaded, does nothing but fork and reap, and dies with warden (a
//! parent-death signal, spawned from warden's long-lived thread, and its socket's end).
//! Its children die with it (their own parent-death signal). It runs in a process group of
//! its own, so a person's ^C at warden's terminal reaches warden alone, which ends or passes
//! it on (`crate::signals`). warden holds each child by a pidfd ([`Forked`]): it sees the
//! child end, signals it and kills it, and the server reaps it.

use crate::program::Helper;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// What a request hands a child, in this order: its stdin, stdout, stderr, reports
/// ([`crate::plan::REPORT_FD`]) and, with a gate, the gate's socket ([`crate::plan::GATE_FD`]).
const MAX_FDS: usize = 5;

/// A request for a sandbox's helper.
const SANDBOX: &[u8] = b"f";
/// A request for a view's overlays, with one descriptor: the socket to talk on.
const OVERLAYS: &[u8] = b"o";

/// How long warden waits for an answer (the server's, or a child's) before it gives up.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// warden's side: the server for one helper program, started when first needed and again
/// should it die.
#[derive(Debug)]
pub(crate) struct Forker {
    /// The helper program looked for beside this one ([`Helper::beside_this_program`]).
    beside: Option<String>,
    /// The helper when none is found beside this program.
    fallback: Helper,
    /// The helper chosen, once, as the server first starts: a process that starts no
    /// sandbox reads no helper file.
    helper: OnceLock<Helper>,
    server: Mutex<Option<Server>>,
}

/// A running server: its socket, and the process (reaped when replaced).
#[derive(Debug)]
struct Server {
    socket: OwnedFd,
    process: std::process::Child,
}

impl Forker {
    /// A server of the helper program `beside` this program when it is there and of this
    /// build, else of `fallback`.
    pub(crate) fn new(beside: Option<String>, fallback: Helper) -> Self {
        Self {
            beside,
            fallback,
            helper: OnceLock::new(),
            server: Mutex::new(None),
        }
    }

    /// A server like this one's, of the helper program `name` beside this program when it
    /// is there and of this build.
    pub(crate) fn preferring_beside(&self, name: &str) -> Self {
        Self::new(Some(name.to_owned()), self.fallback.clone())
    }

    /// The helper program, chosen at the first ask.
    fn helper(&self) -> &Helper {
        self.helper.get_or_init(|| {
            let beside = self.beside.as_deref().and_then(Helper::beside_this_program);
            let helper = beside.unwrap_or_else(|| self.fallback.clone());
            tracing::debug!("host helper: {}", helper.shown().display());
            helper
        })
    }

    /// Forks a helper that gets `fds` (see [`MAX_FDS`] for their order). A server that died
    /// is started again once; the error says why no helper was forked.
    pub(crate) fn fork(&self, fds: &[&OwnedFd]) -> io::Result<Forked> {
        self.ask(SANDBOX, fds)
    }

    /// Forks a child that makes a view's overlays (`crate::overlays`), talking on `socket`.
    pub(crate) fn fork_overlays(&self, socket: &OwnedFd) -> io::Result<Forked> {
        self.ask(OVERLAYS, &[socket])
    }

    /// One request of `kind` with `fds`, to the server (started again once should it have
    /// died).
    fn ask(&self, kind: &[u8], fds: &[&OwnedFd]) -> io::Result<Forked> {
        let mut server = self
            .server
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = None;
        for _ in 0..2 {
            let running = match server.take() {
                Some(s) => s,
                None => self.start()?,
            };
            match request(&running.socket, kind, fds) {
                Ok(forked) => {
                    *server = Some(running);
                    return Ok(forked);
                }
                Err(e) => {
                    let mut gone = running;
                    let _ = gone.process.kill();
                    let _ = gone.process.wait();
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the fork server did not answer")))
    }

    /// Starts the server from warden's long-lived thread, so its parent-death signal comes
    /// when warden ends and not before.
    fn start(&self) -> io::Result<Server> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        set_answer_wait(&ours)?;
        let helper = self.helper();
        let mut command = std::process::Command::new(&helper.program);
        command
            .args(&helper.args)
            .env_clear()
            .stdin(theirs)
            .stdout(std::process::Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let process = crate::spawner::on_spawner(move || command.spawn()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot start the sandbox helper {}: {e}",
                    helper.shown().display()
                ),
            )
        })?;
        Ok(Server {
            socket: ours,
            process,
        })
    }
}

/// Gives up reading `socket` after [`ANSWER_WAIT`].
pub(crate) fn set_answer_wait(socket: &OwnedFd) -> io::Result<()> {
    let wait = nix::sys::time::TimeVal::new(ANSWER_WAIT.as_secs() as _, 0);
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::ReceiveTimeout, &wait)?;
    Ok(())
}

/// One request: `kind` and `fds` out, the child's pidfd (or the server's error) back.
fn request(socket: &OwnedFd, kind: &[u8], fds: &[&OwnedFd]) -> io::Result<Forked> {
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(kind)],
        &[ControlMessage::ScmRights(&raw)],
        // A server gone is an error here, not a SIGPIPE for an embedder that keeps it.
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    let mut answer = [0u8; 512];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let (len, fds) = receive(socket, &mut answer, &mut space)?;
    let pidfd = fds.into_iter().next();
    match (len, pidfd) {
        (0, _) => Err(io::Error::other("the fork server ended")),
        (_, Some(pidfd)) => Forked::new(pidfd),
        _ => Err(io::Error::other(format!(
            "the fork server: {}",
            String::from_utf8_lossy(&answer[..len])
        ))),
    }
}

/// One answer on `socket`, as [`send_answer`] sends it: its bytes in `text`, how many, and
/// the descriptors it carried (`space`, from `cmsg_space!`, has room for as many as expected).
pub(crate) fn receive(
    socket: &OwnedFd,
    text: &mut [u8],
    space: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(text)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    Ok((msg.bytes, received(msg.cmsgs()?)))
}

/// Answers on fd 0 (a request's socket): `+` with `fds`, or why not, as text.
pub(crate) fn send_answer(answer: Result<&[RawFd], &str>) -> nix::Result<usize> {
    let (text, fds): (&[u8], &[RawFd]) = match answer {
        Ok(fds) => (b"+", fds),
        Err(why) => (why.as_bytes(), &[]),
    };
    let rights = [ControlMessage::ScmRights(fds)];
    let control: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    // A warden gone is an error here, not a SIGPIPE.
    sendmsg::<()>(
        0,
        &[IoSlice::new(text)],
        control,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
}

/// The descriptors in a message's control data, owned.
fn received(cmsgs: nix::sys::socket::CmsgIterator<'_>) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    for cmsg in cmsgs {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel just installed these descriptors for this process.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    fds
}

/// A helper the server forked, held by its pidfd: readable once it has ended. Killed when
/// dropped; the server reaps it.
pub(crate) struct Forked {
    pidfd: AsyncFd<OwnedFd>,
}

impl Forked {
    fn new(pidfd: OwnedFd) -> io::Result<Self> {
        // SAFETY: the descriptor is owned, and stays open and the same until the AsyncFd drops.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }?;
        Ok(Self { pidfd })
    }

    /// Whether the helper still runs.
    pub(crate) fn running(&self) -> bool {
        let mut poll = nix::libc::pollfd {
            fd: self.pidfd.get_ref().as_raw_fd(),
            events: nix::libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call; no wait.
        unsafe { nix::libc::poll(&mut poll, 1, 0) == 0 }
    }

    /// Until the helper has ended.
    pub(crate) async fn ended(&self) {
        // Readable, it stays so: the process is gone for good.
        let _ = self
            .pidfd
            .readable()
            .await
            .map(|mut ready| ready.retain_ready());
    }

    /// Sends the helper SIGKILL (nothing when it has ended).
    pub(crate) fn kill(&self) {
        self.signal(nix::libc::SIGKILL);
    }

    /// Sends the helper `signal` (nothing when it has ended), which it passes on to the
    /// command (`crate::signals`).
    pub(crate) fn signal(&self, signal: nix::libc::c_int) {
        // SAFETY: pidfd_send_signal with a valid pidfd, no siginfo and no flags.
        unsafe {
            nix::libc::syscall(
                nix::libc::SYS_pidfd_send_signal,
                self.pidfd.get_ref().as_raw_fd(),
                signal,
                std::ptr::null::<nix::libc::siginfo_t>(),
                0,
            );
        }
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server: answers each request on `socket` (the helper program's stdin) with a forked
/// child that runs `helper` with the descriptors it was sent (`overlays` for a view's
/// overlays); ends when warden closes the socket. Never returns.
pub(crate) fn serve(helper: fn() -> !, overlays: fn() -> !) -> ! {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    // Only warden's ending may end the server (the socket's close, or this signal).
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    // A handler that does nothing, without SA_RESTART: a child's end interrupts the wait for
    // the next request, and the loop reaps it. Reaped only there, a child is never reaped
    // before its pidfd is opened.
    let wake = SigAction::new(
        SigHandler::Handler(woken),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing.
    let _ = unsafe { sigaction(Signal::SIGCHLD, &wake) };
    loop {
        reap();
        let mut byte = [0u8; 1];
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let fds = {
            let mut iov = [IoSliceMut::new(&mut byte)];
            match recvmsg::<()>(0, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
                Ok(msg) if msg.bytes == 0 => std::process::exit(0),
                Ok(msg) => msg.cmsgs().map(received).unwrap_or_default(),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => std::process::exit(0),
            }
        };
        let answer = if byte[..] == *OVERLAYS && fds.len() == 1 {
            fork_child(&fds, overlays)
        } else if byte[..] == *SANDBOX && (4..=MAX_FDS).contains(&fds.len()) {
            fork_child(&fds, helper)
        } else {
            Err(io::Error::other(format!(
                "a request with {} descriptors",
                fds.len()
            )))
        };
        drop(fds);
        let sent = match &answer {
            Ok(pidfd) => send_answer(Ok(&[pidfd.as_raw_fd()])),
            Err(why) => send_answer(Err(&why.to_string())),
        };
        if sent.is_err() {
            std::process::exit(0);
        }
    }
}

extern "C" fn woken(_: nix::libc::c_int) {}

/// Reaps every child that has ended.
fn reap() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Forks a child that puts `fds` at 0, 1, 2, 3 (and 4) and runs `helper`; answers its pidfd.
fn fork_child(fds: &[OwnedFd], helper: fn() -> !) -> io::Result<OwnedFd> {
    use nix::unistd::{ForkResult, fork};
    // SAFETY: this process has a single thread.
    match unsafe { fork() } {
        Err(e) => Err(io::Error::other(format!("fork: {e}"))),
        Ok(ForkResult::Child) => {
            // SAFETY: back to the default disposition, which the helper waits with.
            let _ = unsafe {
                nix::sys::signal::signal(
                    nix::sys::signal::Signal::SIGCHLD,
                    nix::sys::signal::SigHandler::SigDfl,
                )
            };
            // Above every target first, so that no `dup2` closes a descriptor still to move.
            let high: Vec<OwnedFd> = fds
                .iter()
                .map(|fd| fd.as_fd().try_clone_to_owned())
                .collect::<Result<_, _>>()
                .unwrap_or_else(|_| std::process::exit(crate::failure::SETUP_FAILED));
            for (target, fd) in high.iter().enumerate() {
                // SAFETY: dup2 onto a number of this process's, which it then owns.
                if unsafe { nix::libc::dup2(fd.as_raw_fd(), target as RawFd) } < 0 {
                    std::process::exit(crate::failure::SETUP_FAILED);
                }
            }
            drop(high);
            // What was received and not overwritten: the helper holds its copies, numbered.
            for fd in fds
                .iter()
                .map(std::os::fd::AsRawFd::as_raw_fd)
                .filter(|&n| n >= fds.len() as RawFd)
            {
                let _ = nix::unistd::close(fd);
            }
            // Never back into the server's loop, even should the helper panic.
            let _ = std::panic::catch_unwind(|| -> () { helper() });
            std::process::exit(crate::failure::SETUP_FAILED)
        }
        Ok(ForkResult::Parent { child }) => {
            // SAFETY: pidfd_open of our own child, not yet reaped (only `reap` does, later).
            let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, child.as_raw(), 0) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                return Err(io::Error::new(e.kind(), format!("pidfd_open: {e}")));
            }
            // SAFETY: the kernel just returned this descriptor.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        }
    }
}
