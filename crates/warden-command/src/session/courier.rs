//! A courier: a shell beside a session's that carries a client's transfers one after another
//! ([`super::pipe`]), raw bytes both ways, so that a transfer starts no shell of its own (an
//! engine's `exec` takes ~45 ms here, and one started for each transfer ran beside the next
//! transfer on this machine's two cores).
//!
//! Its shell runs [`program`]: for each transfer it reads three lines — the input's length
//! (whole blocks of [`BLOCK`] bytes, and the rest) and where its bytes go (the mode
//! [`program`] names), a token made for the transfer, the
//! command (its `\` and newlines escaped) — prints the token's start line on both streams,
//! runs the command in a subshell with exactly that many bytes of its own stdin on the
//! command's (`dd … iflag=fullblock`; what the command leaves unread is drained, so a
//! transfer's bytes never reach the loop), then prints the token's end line on both streams,
//! on stdout with the command's status. Only exact lines with the transfer's token count
//! ([`Frames`]). The next transfer's lines are written once both end lines came back, so
//! nothing past a transfer's input waits in the pipe while it runs. A token must begin with
//! the courier's key, made for it and told to no one else, or the loop ends: lines out of
//! step are never run.
//!
//! Where an engine relays the shell's stdio ([`Siblings::relayed`]), the bytes go through a
//! FIFO of the courier's own instead ([`super::fifo`]), the lines above still on its stdio.
//!
//! `dd` rather than `head -c`: GNU `head` moves 8 KiB a call (50 MB took 26 ms more than
//! `cat` here, `dd` 3 ms), busybox's a byte at a time through stdio (290 ms more).

use super::fifo::{Fifo, SIZE, drain, keep};
use super::{Chunk, Chunks, Frames, Input, Launched, Sibling, Siblings, nonce};
use futures::StreamExt;
use std::io;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe::{Receiver, Sender};
use warden_core::{ErrorKind, Pipe, PipeInput, Piped, Stream, ToolError};

/// The block a transfer's input is read in.
const BLOCK: usize = 64 << 10;

/// What a courier's shell runs, with its key (see the module); with `fifo` (a file name in
/// its `/tmp`, unlinked at once), its own FIFO on fd 3 first ([`super::fifo`]), whose taking
/// its ready line offers with [`FIFO`]. A POSIX shell's builtins, and `dd` with
/// `iflag=fullblock` (coreutils, busybox's of recent years), which it checks first,
/// answering [`UNSUITED`] without one; one line, read whole before anything else is
/// written. Each transfer's first line ends with its mode: `-` through the shell's stdio,
/// `i` its input from the FIFO, `o` its output to the FIFO.
fn program(key: &str, fifo: Option<&str>) -> String {
    let fd = super::fifo::FD;
    let fifo = fifo.map_or_else(String::new, |name| {
        format!(
            "warden_f=/tmp/.warden-{name}; \
             if mkfifo -m 600 \"$warden_f\" 2>/dev/null; then \
             {{ command exec {fd}<>\"$warden_f\"; }} 2>/dev/null; fi; rm -f \"$warden_f\"; \
             if {{ true >&{fd}; }} 2>/dev/null; then warden_p=' {FIFO}'; fi; "
        )
    });
    format!(
        "warden_k={key}; warden_p=; \
         [ \"$(printf ab | dd bs=1 count=1 iflag=fullblock 2>/dev/null)\" = a ] || {{ \
         printf '\\n%s {UNSUITED}\\n' \"$warden_k\"; exit 127; }}; \
         {fifo}printf '\\n%s%s\\n' \"$warden_k\" \"$warden_p\"; \
         while IFS=' ' read -r warden_q warden_r warden_m && IFS= read -r warden_t && \
         IFS= read -r warden_c; do \
         case $warden_t in \"$warden_k\"?*) ;; *) exit 1 ;; esac; \
         case $warden_q:$warden_r in *[!0-9:]* | :* | *:) exit 1 ;; esac; \
         case $warden_m in -) warden_i=0 warden_o=1 ;; i) warden_i={fd} warden_o=1 ;; \
         o) warden_i=0 warden_o={fd} ;; *) exit 1 ;; esac; \
         printf '\\n%s<\\n' \"$warden_t\"; printf '\\n%s<\\n' \"$warden_t\" >&2; \
         warden_c=$(printf '%b' \"$warden_c\"); \
         if [ \"$warden_q$warden_r\" = 00 ]; then (eval \"$warden_c\") </dev/null >&\"$warden_o\"; \
         else {{ [ \"$warden_q\" = 0 ] || dd bs={BLOCK} count=\"$warden_q\" iflag=fullblock; \
         [ \"$warden_r\" = 0 ] || dd bs=\"$warden_r\" count=1 iflag=fullblock; }} 2>/dev/null \
         <&\"$warden_i\" | {{ (eval \"$warden_c\"); warden_s=$?; cat >/dev/null; \
         exit \"$warden_s\"; }} >&\"$warden_o\"; fi; \
         warden_s=$?; printf '\\n%s> %s\\n' \"$warden_t\" \"$warden_s\"; \
         printf '\\n%s>\\n' \"$warden_t\" >&2; done\n"
    )
}

/// What follows the key on the ready line of a courier that holds its FIFO.
const FIFO: &str = "fifo";

/// What follows the key on the line of a courier that cannot run in its sandbox.
const UNSUITED: &str = "unsuited";

/// `command` as one line that `printf '%b'` turns back into it.
fn escaped(command: &str) -> String {
    command.replace('\\', "\\\\").replace('\n', "\\n")
}

/// What follows the end marker on stdout: a space and the command's status.
fn status_rest(rest: &[u8]) -> bool {
    rest.len() > 1 && rest[0] == b' ' && rest[1..].iter().all(u8::is_ascii_digit)
}

/// A shell beside a session's running [`program`].
pub(super) struct Courier<T> {
    sibling: T,
    input: Input,
    output: Chunks,
    key: String,
    /// Its own FIFO, where warden took it.
    fifo: Option<Fifo>,
}

/// Why a transfer failed.
pub(super) enum Failed {
    /// Before its command ran: the courier took none of it.
    Unstarted(io::Error),
    /// After.
    Broken(io::Error),
}

/// Why no courier started.
pub(super) enum Unstarted {
    /// Its sandbox has no `dd` that takes `iflag=fullblock`: its transfers go through the
    /// session's shell instead.
    Unsuited,
    Failed(ToolError),
}

/// What a courier brought back.
pub(super) struct Carried {
    pub piped: Piped,
    /// Nothing out of step came and the command's output stayed within its bound: the
    /// courier may carry the next transfer.
    pub again: bool,
}

impl<T: Sibling> Courier<T> {
    /// Starts one beside the session's shell, and waits until its loop runs.
    pub(super) async fn start<S: Siblings<Sibling = T>>(siblings: &S) -> Result<Self, Unstarted> {
        let Launched {
            sandbox,
            input,
            output,
            ..
        } = siblings.start().await.map_err(Unstarted::Failed)?;
        let key = nonce();
        let mut courier = Courier {
            sibling: sandbox,
            input,
            output,
            key,
            fifo: None,
        };
        let Err(why) = courier.begin(siblings.relayed()).await else {
            return Ok(courier);
        };
        super::kill_tree(courier.pid());
        courier.close().await;
        Err(match why {
            None => Unstarted::Unsuited,
            Some(why) => Unstarted::Failed(ToolError::new(
                ErrorKind::Unavailable,
                format!("a shell beside the session's for a client's transfers failed: {why}"),
            )),
        })
    }

    /// Gives its shell [`program`] (asking for its FIFO where `relayed`), and waits until
    /// the loop runs: Err(None) when it cannot run in its sandbox, else why it did not start.
    async fn begin(&mut self, relayed: bool) -> Result<(), Option<String>> {
        let name = relayed.then(nonce);
        let program = program(&self.key, name.as_deref());
        write_all(&mut self.input, program.as_bytes())
            .await
            .map_err(|e| Some(e.to_string()))?;
        let line = |rest: &str| format!("\n{}{rest}\n", self.key);
        let (ready, fifo) = (line(""), line(&format!(" {FIFO}")));
        let unsuited = line(&format!(" {UNSUITED}"));
        let (mut head, mut stderr) = (Vec::new(), Vec::new());
        loop {
            if head == ready.as_bytes() {
                return Ok(());
            }
            if head == fifo.as_bytes() {
                break;
            }
            if head == unsuited.as_bytes() {
                return Err(None);
            }
            match self.output.next().await {
                Some(Ok(Chunk::Stdout(bytes))) => head.extend_from_slice(&bytes),
                Some(Ok(Chunk::Stderr(bytes))) => stderr.extend_from_slice(&bytes),
                Some(Err(e)) => return Err(Some(e.to_string())),
                None => {
                    let said = String::from_utf8_lossy(&stderr);
                    return Err(Some(format!("its shell ended: {}", said.trim())));
                }
            }
            if ![&ready, &fifo, &unsuited]
                .iter()
                .any(|l| l.as_bytes().starts_with(&head))
            {
                let head = String::from_utf8_lossy(&head[..head.len().min(80)]);
                return Err(Some(format!("its shell printed {head:?}")));
            }
        }
        // Its transfers go through its stdio where the FIFO cannot be taken.
        match Fifo::take(self.pid()) {
            Ok(fifo) => self.fifo = Some(fifo),
            Err(e) => tracing::debug!("a courier's FIFO was not taken: {e}"),
        }
        Ok(())
    }

    /// Its shell's pid on this machine.
    pub(super) fn pid(&self) -> i32 {
        self.sibling.pid()
    }

    /// Carries `pipe`: its command, its input in, its output back (see the module), through
    /// its FIFO where it has one.
    pub(super) async fn carry(&mut self, pipe: &Pipe<'_>) -> Result<Carried, Failed> {
        let token = format!("{}{}", self.key, nonce());
        let size = pipe.input.len();
        let (blocks, rest) = (size / BLOCK as u64, size % BLOCK as u64);
        // The FIFO, where there is one, carries the input, or else the output.
        let (fifo_in, fifo_out) = match (self.fifo.as_mut(), &pipe.input) {
            (Some(fifo), PipeInput::Nothing) => (None, Some(&fifo.rx)),
            (Some(fifo), _) => (Some(&mut fifo.tx), None),
            (None, _) => (None, None),
        };
        let mode = match (&fifo_in, fifo_out) {
            (Some(_), _) => 'i',
            (_, Some(_)) => 'o',
            _ => '-',
        };
        if let Some(rx) = fifo_out {
            // What a process of the sandbox wrote there since is no output of this one.
            if drain(rx, &mut Vec::new(), SIZE as u64).map_err(Failed::Unstarted)? {
                return Err(Failed::Unstarted(io::Error::other(
                    "something in its sandbox floods its FIFO",
                )));
            }
        }
        let lines = format!(
            "{blocks} {rest} {mode}\n{token}\n{}\n",
            escaped(&pipe.command)
        );
        write_all(&mut self.input, lines.as_bytes())
            .await
            .map_err(Failed::Unstarted)?;
        let (start, end) = (format!("\n{token}<"), format!("\n{token}>"));
        let mut out = Frames::new(&start, &end, status_rest, pipe.output);
        let mut err = Frames::between(&start, &end, Piped::STDERR as u64);
        let (ready, is_ready) = tokio::sync::oneshot::channel::<()>();
        let (input, pid) = (&mut self.input, self.sibling.pid());
        let write = async move {
            if is_ready.await.is_err() {
                return true;
            }
            match (&pipe.input, fifo_in) {
                (PipeInput::Nothing, _) => true,
                (PipeInput::Bytes(bytes), Some(tx)) => {
                    tx.write_all(bytes).await.and(tx.flush().await).is_ok()
                }
                (PipeInput::Bytes(bytes), None) => write_all(input, bytes).await.is_ok(),
                (PipeInput::Stream(stream), fifo) => {
                    let fed = feed(stream, fifo, input).await;
                    if !fed {
                        // Short of its bytes, the command would wait for them until its
                        // deadline: stopped now, so that the transfer ends.
                        super::kill_tree(pid);
                    }
                    fed
                }
            }
        };
        let output = &mut self.output;
        let read = async {
            let mut ready = Some(ready);
            // The output through the FIFO, and whether it went past its bound.
            let (mut body, mut body_cut) = (Vec::new(), false);
            let mut buf = vec![0; if fifo_out.is_some() { SIZE } else { 0 }];
            loop {
                let chunk = tokio::select! {
                    chunk = output.next() => chunk,
                    read = read_some(fifo_out, &mut buf), if !body_cut => {
                        let n = read.map_err(Failed::Broken)?;
                        body_cut = keep(&mut body, &buf[..n], pipe.output);
                        if body_cut {
                            return Ok((out, err, body, body_cut));
                        }
                        continue;
                    }
                };
                match chunk {
                    Some(Ok(Chunk::Stdout(bytes))) => out.push(&bytes),
                    Some(Ok(Chunk::Stderr(bytes))) => err.push(&bytes),
                    Some(Err(e)) if out.started() => return Err(Failed::Broken(e)),
                    Some(Err(e)) => return Err(Failed::Unstarted(e)),
                    None => break,
                }
                if out.before > 0 {
                    return Err(Failed::Unstarted(io::Error::other(
                        "its shell printed something before the command ran",
                    )));
                }
                if out.started() {
                    ready.take().map(|r| r.send(()));
                }
                if out.cut() || (out.done() && err.done()) {
                    // The command has ended: what it wrote to the FIFO is all there.
                    if let Some(rx) = fifo_out.filter(|_| out.done()) {
                        body_cut = drain(rx, &mut body, pipe.output).map_err(Failed::Broken)?;
                    }
                    return Ok((out, err, body, body_cut));
                }
            }
            let why = format!("its shell ended: {}", err.text().trim());
            Err(match out.started() {
                true => Failed::Broken(io::Error::other(why)),
                false => Failed::Unstarted(io::Error::other(why)),
            })
        };
        tokio::pin!(read, write);
        // The input is written while the output is read (a command may write as it reads);
        // the end lines (or the output's bound) end the transfer.
        let ((out, mut err, body, body_cut), written) = tokio::select! {
            biased;
            read = &mut read => {
                let read = read?;
                // Both end lines mean that every byte was taken: the write ends at once.
                let written = read.0.done() && read.1.done() && write.await;
                (read, written)
            }
            written = &mut write => (read.await?, written),
        };
        if matches!(pipe.input, PipeInput::Stream(_)) && !written {
            // Its command was stopped short of its input: whatever it answered is not the
            // transfer's.
            return Err(Failed::Broken(io::Error::other(
                "its input stopped before its end",
            )));
        }
        let cut = out.cut() || body_cut;
        let status = out
            .rest()
            .and_then(|rest| std::str::from_utf8(&rest[1..]).ok()?.parse().ok());
        let again =
            written && out.done() && !cut && out.after == 0 && err.before == 0 && err.after == 0;
        let stdout = match fifo_out {
            // Nothing else may come between its stdout's lines, nor be kept.
            Some(_) => {
                let stray = out.bytes();
                if !stray.is_empty() {
                    return Ok(Carried {
                        piped: Piped {
                            overflowed: false,
                            status: None,
                            stdout: Vec::new(),
                            stderr: "its shell printed output beside its FIFO's".into(),
                        },
                        again: false,
                    });
                }
                body
            }
            None => out.bytes(),
        };
        Ok(Carried {
            piped: Piped {
                overflowed: cut,
                status: status.filter(|_| !cut),
                stdout,
                stderr: err.text(),
            },
            again,
        })
    }

    /// Ends its shell (at the end of its input) and releases it.
    pub(super) async fn close(self) {
        drop(self.input);
        self.sibling.close().await;
    }
}

/// Reads what comes through `fifo` (never, without one).
async fn read_some(fifo: Option<&Receiver>, buf: &mut [u8]) -> io::Result<usize> {
    let Some(rx) = fifo else {
        return std::future::pending().await;
    };
    loop {
        rx.readable().await?;
        match rx.try_read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            read => return read,
        }
    }
}

/// Writes `stream`'s pieces as they come, to the FIFO end `fifo` where there is one, else to
/// the shell's `input`: false when the maker gave up or its pieces are not its length.
async fn feed(stream: &Stream, mut fifo: Option<&mut Sender>, input: &mut Input) -> bool {
    let Some(mut pieces) = stream.take() else {
        return false;
    };
    let mut left = stream.len();
    while let Some(piece) = pieces.recv().await {
        let Ok(piece) = piece else {
            return false;
        };
        let Some(after) = left.checked_sub(piece.len() as u64) else {
            return false;
        };
        left = after;
        let wrote = match fifo.as_mut() {
            Some(tx) => tx.write_all(&piece).await,
            None => input.write_all(&piece).await,
        };
        if wrote.is_err() {
            return false;
        }
    }
    let flushed = match fifo {
        Some(tx) => tx.flush().await,
        None => input.flush().await,
    };
    left == 0 && flushed.is_ok()
}

async fn write_all(input: &mut Input, bytes: &[u8]) -> io::Result<()> {
    input.write_all(bytes).await?;
    input.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escaped_command_is_one_line_that_printf_b_restores() {
        let command = "printf 'a\\nb'\nsed 's/\\\\/x/'\n";
        let line = escaped(command);
        assert!(!line.contains('\n'), "{line}");
        let restored = std::process::Command::new("sh")
            .args(["-c", "printf '%b' \"$1\"", "sh", &line])
            .output()
            .expect("sh runs");
        assert_eq!(String::from_utf8_lossy(&restored.stdout), command);
    }
}
