//! A pseudo-terminal for a test to run `warden exec` at, as a person's terminal would be:
//! warden's stdin and stdout are its one side, the test types and reads on the other.

use nix::pty::Winsize;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A command running at a terminal of the test's.
pub(crate) struct Terminal {
    /// The terminal's other side, where the test types.
    keys: File,
    /// All the command has written so far.
    screen: Arc<Mutex<Vec<u8>>>,
    child: Child,
}

impl Terminal {
    /// Starts `command` with a new terminal of `rows` × `cols` as its stdin and stdout
    /// (stderr stays a pipe, so warden's own errors can be told apart).
    pub(crate) fn start(mut command: Command, rows: u16, cols: u16) -> Self {
        let pty = nix::pty::openpty(&size(rows, cols), None).unwrap();
        let child = command
            .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave))
            .stderr(Stdio::piped())
            .spawn()
            .expect("warden runs");
        Self::watching(pty.master, child)
    }

    /// Records what `child` writes to the terminal whose other side is `master`.
    fn watching(master: std::os::fd::OwnedFd, child: Child) -> Self {
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = File::from(master.try_clone().unwrap());
        let seen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // The read fails (EIO) once nobody holds the terminal's side any more.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self {
            keys: File::from(master),
            screen,
            child,
        }
    }

    /// The command's piped stdin, stdout and stderr (of [`Terminal::controlling`]).
    pub(crate) fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Starts `command` in a new session whose controlling terminal is a new one, its
    /// stdin, stdout and stderr pipes: a parent that drives warden through pipes from a
    /// person's terminal. The terminal is where warden asks that person.
    pub(crate) fn controlling(mut command: Command) -> Self {
        use std::os::unix::process::CommandExt;
        let pty = nix::pty::openpty(&size(24, 80), None).unwrap();
        let terminal = pty.slave.as_raw_fd();
        // SAFETY: setsid and ioctl are async-signal-safe; the terminal's descriptor is open in
        // the child until it execs.
        unsafe {
            command.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(terminal, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("warden runs");
        drop(pty.slave);
        Self::watching(pty.master, child)
    }

    /// warden's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Types `keys`.
    pub(crate) fn type_keys(&self, keys: &[u8]) {
        (&self.keys).write_all(keys).unwrap();
    }

    /// What is on the screen so far.
    pub(crate) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits up to 20 s for `text` on the screen; panics with the screen if it never comes.
    pub(crate) fn wait_for(&self, text: &str) {
        self.wait_until(text, || {});
    }

    /// [`Terminal::wait_for`], doing `meanwhile` every half second.
    pub(crate) fn wait_until(&self, text: &str, mut meanwhile: impl FnMut()) {
        let until = Instant::now() + Duration::from_secs(20);
        let mut next = Instant::now();
        while !self.screen().contains(text) {
            assert!(
                Instant::now() < until,
                "`{text}` never came; the screen: {:?}",
                self.screen()
            );
            if Instant::now() >= next {
                meanwhile();
                next = Instant::now() + Duration::from_millis(500);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Makes the terminal `rows` × `cols` and tells warden, as a terminal window does.
    pub(crate) fn resize(&self, rows: u16, cols: u16) {
        let size = size(rows, cols);
        // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
        let set = unsafe { libc::ioctl(self.keys.as_raw_fd(), libc::TIOCSWINSZ, &raw const size) };
        assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGWINCH) }, 0);
    }

    /// Waits for the command to end; answers its exit code, and its stderr and the screen
    /// for a failing assertion to show.
    pub(crate) fn wait(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            pipe.read_to_string(&mut stderr).unwrap();
        }
        (
            status.code(),
            format!("stderr: {stderr:?}; screen: {:?}", self.screen()),
        )
    }
}

impl Drop for Terminal {
    /// A test that failed leaves no warden behind to hold its sandbox's user.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn size(rows: u16, cols: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}
