//! What the helper reads from warden: the plan's frames, on its stdin (see [`crate::plan`]).
//! Shared by the helper that makes a sandbox and the one that joins a session's.

use crate::failure::{Failure, setup};
use crate::plan::Call;
use std::fs::File;
use std::io::Read;

/// One frame of the plan: its length, then its JSON, read unbuffered so that nothing after it
/// (a session's commands) is taken from the shell. Also answers the frame's bytes as read.
pub(crate) fn read_frame<T: serde::de::DeserializeOwned>(
    mut from: &File,
) -> Result<(T, Vec<u8>), Failure> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len)
        .map_err(|e| setup(format!("reading the plan: {e}")))?;
    let size = u32::from_le_bytes(len) as usize;
    if size > MAX_PLAN {
        return Err(setup(format!("a plan of {size} bytes is too large")));
    }
    let mut framed = vec![0u8; size + 4];
    framed[..4].copy_from_slice(&len);
    from.read_exact(&mut framed[4..])
        .map_err(|e| setup(format!("reading the plan: {e}")))?;
    let value = serde_json::from_slice(&framed[4..])
        .map_err(|e| setup(format!("a malformed plan: {e}")))?;
    Ok((value, framed))
}

/// The largest plan the helper reads.
const MAX_PLAN: usize = 16 << 20;

/// The call's frame, from warden: the call's deadline starts now, whenever the sandbox was
/// prepared. Answers the call and its frame as read, for `init`.
pub(crate) fn receive_call(stdin: &File) -> Result<(Call, Vec<u8>), Failure> {
    let (call, framed): (Call, _) = read_frame(stdin)?;
    if call.deadline_secs > 0 {
        // Should warden die without killing us, the command still ends.
        nix::unistd::alarm::set(call.deadline_secs.min(u32::MAX as u64) as u32);
    }
    Ok((call, framed))
}
