//! Signals passed down a sandbox: warden → the helper (by its pidfd) → `init` → the command's
//! process group. `init` is PID 1 of its namespace, which takes from outside only the signals
//! it handles, so each step handles them by sending them on. A command's `exec` sets them back
//! to their defaults.

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signals passed on: a person's ^C, ^\ and a closed terminal, a polite stop, a resized
/// window, and the two left to programs.
pub(crate) const PASSED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// Where this process sends on what it gets (a pid, or minus a process group); 0 for nowhere
/// yet.
static TARGET: AtomicI32 = AtomicI32::new(0);

/// From now on, every signal of [`PASSED`] this process gets goes on to `target`.
pub(crate) fn pass_to(target: Pid) {
    TARGET.store(target.as_raw(), Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(pass),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in PASSED {
        // SAFETY: the handler only loads an atomic and calls kill(2), both async-signal-safe.
        let _ = unsafe { sigaction(signal, &action) };
    }
}

extern "C" fn pass(signal: nix::libc::c_int) {
    let target = TARGET.load(Ordering::SeqCst);
    if target != 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            nix::libc::kill(target, signal);
        }
    }
}
