//! What a restore puts in a sandbox's `/tmp`: its kept archive, checked, unpacked there as
//! the sandbox's user. Through a shell beside the session's where the sandbox starts one
//! (`Dispatcher::pipe_for_client`), raw; else a part at a time through the session's shell,
//! as base64.

use crate::archive::{self, ArchiveError};
use crate::direct::DirectReader;
use crate::{RESTORE, SnapshotError, WALK, failed, strs, unfinished};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
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
    let raw = clean_command(&format!("{WALK}{DROP}{EMPTY_UNPACK_RAW}"), RESTORE, &roots);
    let piped = dispatcher
        .pipe_for_client(tool, raw, PipeInput::Bytes(whole), 64 * 1024)
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
    let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
    let owned = skip.to_vec();
    let checking = tokio::task::spawn_blocking(move || {
        crate::streamed::streamed(file, &strs(&owned), |piece| tx.blocking_send(piece).is_ok())
    });
    let raw = clean_command(
        &format!("{WALK}{DROP}{EMPTY_UNPACK_RAW}"),
        RESTORE,
        &strs(skip),
    );
    let input = PipeInput::Stream(Stream::new(len, rx));
    // Answered once the stream is taken or dropped: the check cannot wait on it after.
    let piped = dispatcher
        .pipe_for_client(tool, raw, input, 64 * 1024)
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

/// A restore's step answered `WARDEN-OK`, or why not.
fn expect_ok(printed: String) -> Result<(), SnapshotError> {
    match printed.trim() {
        "WARDEN-OK" => Ok(()),
        other => Err(SnapshotError::Unpack(other.to_owned())),
    }
}
