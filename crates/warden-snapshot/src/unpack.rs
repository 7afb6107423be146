//! What a restore puts in a sandbox's `/tmp`: its kept archive, checked, unpacked there as
//! the sandbox's user. Through a shell beside the session's where the sandbox starts one
//! (`Dispatcher::pipe_for_client`), raw; else a part at a time through the session's shell,
//! as base64.

use crate::archive::{self, ArchiveError};
use crate::direct::DirectReader;
use crate::{RESTORE, SnapshotError, WALK, failed, strs, unfinished};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::Receiver;
use tokio::task::JoinHandle;
use warden_core::{Dispatcher, PipeInput, Stream, clean_command};

/// Arguments: the roots. Defines `drop PATH`, which removes it.
const DROP: &str = "roots=$(printf '%s\\n' \"$@\")\n\
    drop() { rm -rf -- \"$1\"; }\n";

/// After [`DROP`]: removes the entries of `/tmp` as [`WALK`] finds them.
const EMPTY: &str = "walk . drop && echo WARDEN-OK";

/// After [`EMPTY`]'s `drop`: empties `/tmp`, then unpacks the archive on stdin there, modes
/// as archived, owned by the sandbox's user (beside the session's shell). GNU tar takes its
/// records 64 KiB at a time (`-b 128`, through `TAR_OPTIONS`, which busybox's tar ignores):
/// at its default 10 KiB, 50 MB took 72–82 ms in the Debian image, against 45–55 ms, each
/// record a system call out of the pipe and one into `/tmp`.
const EMPTY_UNPACK_RAW: &str = "walk . drop || exit 1\n\
    umask 0\n\
    export TAR_OPTIONS='-b 128'\n\
    exec tar -xof -";

/// Unpacks the archive whose base64 is on stdin in `/tmp`, modes as archived, owned by the
/// sandbox's user (GNU tar's records as [`EMPTY_UNPACK_RAW`]'s).
const UNPACK: &str = "cd /tmp || exit 1\n\
    umask 0\n\
    export TAR_OPTIONS='-b 128'\n\
    if out=$(base64 -d | tar -xof - 2>&1); then echo WARDEN-OK; else printf '%s\\n' \"$out\"; fi";

/// The raw bytes of the archive each command of a restore moves in (a part holds one
/// larger file alone).
const CHUNK: usize = 768 * 1024;

/// The checked pieces of a streamed archive that may wait for the sandbox to take them
/// ([`crate::streamed::PIECE`] each).
const AHEAD: usize = 4;

/// Reads the kept archive `file` of `len` bytes and checks it whole ([`archive::checked`]),
/// off the runtime's threads. `skip`: the policy's roots below `/tmp`.
pub(crate) fn check(
    file: DirectReader,
    len: u64,
    skip: Vec<String>,
) -> JoinHandle<Result<Vec<u8>, ArchiveError>> {
    tokio::task::spawn_blocking(move || {
        archive::checked(file, usize::try_from(len).unwrap_or(0), &strs(&skip))
    })
}

/// The command that empties the sandbox's `/tmp` (but for the roots `skip`) and unpacks the
/// raw archive on its stdin there.
fn unpack_raw(skip: &[String]) -> String {
    clean_command(
        &format!("{WALK}{DROP}{EMPTY_UNPACK_RAW}"),
        RESTORE,
        &strs(skip),
    )
}

/// Checks the kept archive `file` as [`crate::streamed`] does, off the runtime's threads: its
/// checked pieces, [`AHEAD`] at most waiting to be taken, and whether all of them went out.
fn pieces(
    file: DirectReader,
    skip: &[String],
) -> (Receiver<std::io::Result<Vec<u8>>>, JoinHandle<bool>) {
    let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
    let owned = skip.to_vec();
    let checking = tokio::task::spawn_blocking(move || {
        crate::streamed::streamed(file, &strs(&owned), |piece| tx.blocking_send(piece).is_ok())
    });
    (rx, checking)
}

/// Empties the sandbox's `/tmp` (but for the roots `skip`) and unpacks `whole`, the archive
/// of snapshot `id` as [`check`] answered it, there.
pub(crate) async fn whole(
    dispatcher: &Dispatcher,
    tool: &str,
    id: &str,
    whole: &[u8],
    skip: &[String],
) -> Result<(), SnapshotError> {
    let roots = strs(skip);
    let piped = dispatcher
        .pipe_for_client(tool, unpack_raw(skip), PipeInput::Bytes(whole), 64 * 1024)
        .await?;
    match piped {
        Some(piped) if piped.succeeded() => Ok(()),
        Some(piped) => Err(SnapshotError::Unpack(failed(&piped))),
        None => {
            // Cut from the archive as checked (and written again) above.
            let parts = archive::split(whole, &roots, CHUNK)
                .map_err(|e| SnapshotError::Refused(id.to_owned(), e))?;
            let command = clean_command(&format!("{WALK}{DROP}{EMPTY}"), RESTORE, &roots);
            expect_ok(dispatcher.run_for_client(tool, command, 4096).await?)?;
            // A part at a time, straight into `tar`: no copy of the archive in `/tmp`
            // beside what it unpacks.
            for part in parts {
                let command = format!(
                    "{} <<'WARDEN_EOF'\n{}\nWARDEN_EOF",
                    clean_command(UNPACK, RESTORE, &[]),
                    STANDARD.encode(&part)
                );
                expect_ok(dispatcher.run_for_client(tool, command, 64 * 1024).await?)?;
            }
            Ok(())
        }
    }
}

/// Unpacks the kept archive `file` of `len` bytes as its check comes past each piece
/// ([`crate::streamed`]), beside the session's shell: for a sandbox that holds nothing to
/// lose, since an archive refused halfway leaves part of it unpacked. True when it went in
/// whole; false when it is not warden's own rewrite, or the sandbox starts no shell beside
/// its own: then it is to be checked and unpacked [`whole`] (which empties `/tmp` first).
pub(crate) async fn streamed(
    dispatcher: &Dispatcher,
    tool: &str,
    file: DirectReader,
    len: u64,
    skip: &[String],
) -> Result<bool, SnapshotError> {
    let (rx, checking) = pieces(file, skip);
    let input = PipeInput::Stream(Stream::new(len, rx));
    // Answered once the stream is taken or dropped: the check cannot wait on it after.
    let piped = dispatcher
        .pipe_for_client(tool, unpack_raw(skip), input, 64 * 1024)
        .await;
    let went = checking.await.map_err(unfinished)?;
    match piped {
        _ if !went => Ok(false),
        Ok(Some(piped)) if piped.succeeded() => Ok(true),
        Ok(Some(piped)) => Err(SnapshotError::Unpack(failed(&piped))),
        Ok(None) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The descriptor a fork's session shell holds the FIFO of [`fed`] on, between the command
/// that makes it and the one that reads it (above the 3 and 4 its framing takes).
const FEED_FD: i32 = 9;

/// What came of [`fed`].
pub(crate) enum Fed {
    /// The archive went in whole.
    Unpacked,
    /// It is not warden's own rewrite: it is to be checked and unpacked [`whole`].
    NotOwn,
    /// warden cannot take the shell's descriptors there: the archive, handed back.
    Cannot(DirectReader),
}

/// Unpacks the kept archive `file` as its check comes past each piece, as [`streamed`] does,
/// but through the session's own shell: the shell makes a FIFO in `/tmp` and holds it on
/// [`FEED_FD`]; warden takes it from the shell's process (never opening a path of the
/// sandbox's) and writes the pieces there while the shell's next command unpacks what it
/// reads from it. So a fork's new sandbox needs no shell beside its own, whose start (an
/// engine's `exec`, 50–70 ms here) the restore would wait for. For a sandbox that holds
/// nothing to lose, as [`streamed`]; [`Fed::Cannot`] where warden cannot take the shell's
/// descriptors (gVisor, an engine elsewhere, a shell warden may not trace).
pub(crate) async fn fed(
    dispatcher: &Dispatcher,
    tool: &str,
    file: DirectReader,
    skip: &[String],
) -> Result<Fed, SnapshotError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| SnapshotError::Random(e.to_string()))?;
    let fifo = format!("/tmp/.warden-feed-{}", hex::encode(bytes));
    let made = dispatcher
        .run_for_client(
            tool,
            format!(
                "mkfifo -m 600 {fifo} && exec {FEED_FD}<>{fifo} && rm -f {fifo} && echo WARDEN-OK"
            ),
            4096,
        )
        .await?;
    let taken = match made.trim() {
        "WARDEN-OK" => dispatcher.shell_fifo(tool, FEED_FD).await?,
        _ => None,
    };
    let writer = taken.and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok());
    let Some(mut writer) = writer else {
        dispatcher
            .run_for_client(tool, format!("exec {FEED_FD}<&-; rm -f {fifo}"), 0)
            .await?;
        return Ok(Fed::Cannot(file));
    };
    let (mut rx, checking) = pieces(file, skip);
    // The writer goes when the pieces end or stop: the unpacking then reads to its end.
    let feeding = tokio::spawn(async move {
        while let Some(Ok(piece)) = rx.recv().await {
            if writer.write_all(&piece).await.is_err() {
                return;
            }
        }
    });
    // Read through a descriptor of its own, opened while the shell's still holds the FIFO
    // (so that it never waits for a writer, nor warden's writes find no reader); then the
    // shell lets go of its own, and warden's is the FIFO's one writer: its close ends what
    // is read. What `tar` leaves unread (the archive's last record) is drained.
    let command = format!(
        "{{ exec {FEED_FD}<&-; {}; __w_s=$?; command cat >/dev/null; \
         [ \"$__w_s\" = 0 ] && echo WARDEN-OK; unset __w_s; }} </proc/self/fd/{FEED_FD} 2>&1",
        unpack_raw(skip)
    );
    let printed = dispatcher.run_for_client(tool, command, 64 * 1024).await;
    // An unpacking that ended early leaves the rest unread: the check then stops.
    feeding.abort();
    let went = checking.await.map_err(unfinished)?;
    match printed?.trim() {
        _ if !went => Ok(Fed::NotOwn),
        "WARDEN-OK" => Ok(Fed::Unpacked),
        other => Err(SnapshotError::Unpack(other.to_owned())),
    }
}

/// A restore's step answered `WARDEN-OK`, or why not.
fn expect_ok(printed: String) -> Result<(), SnapshotError> {
    match printed.trim() {
        "WARDEN-OK" => Ok(()),
        other => Err(SnapshotError::Unpack(other.to_owned())),
    }
}
