//! A client's write of a file into a session's sandbox (`warden/write` over MCP), the twin
//! of its read: never a tool call, so never the model's; by a fixed script, as the sandbox's
//! user, within the tool's executor's `transfer`. Its bytes go beside the session's shell
//! raw where the sandbox starts a shell there, else through the session's shell as base64.

use super::Dispatcher;
use super::read::{Printed, check_path, file_error, lie, printed};
use crate::clean_command;
use crate::message::ToolError;
use crate::pipe::PipeInput;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Arguments: the path, `new` to refuse a path that exists (a file, or a link even to
/// nothing), else `-`, and `raw` or `base64`: how the bytes come on stdin. Makes the file's
/// parents; writes only a regular file (a FIFO or a device may never take the bytes);
/// answers `WARDEN-OK` and the file's size after the write, or `WARDEN-ERR:` and why not.
const WRITE: &str = "p=$1 d=$(dirname -- \"$1\")\n\
    if [ -d \"$p\" ]; then echo WARDEN-ERR:is_directory\n\
    elif [ -e \"$p\" ] && [ ! -f \"$p\" ]; then echo WARDEN-ERR:permission_denied\n\
    elif [ \"$2\" = new ] && { [ -e \"$p\" ] || [ -L \"$p\" ]; }; then echo WARDEN-ERR:exists\n\
    elif [ -e \"$d\" ] && [ ! -d \"$d\" ]; then echo WARDEN-ERR:invalid_path\n\
    elif ! mkdir -p -- \"$d\" 2>/dev/null; then echo WARDEN-ERR:permission_denied\n\
    elif if [ \"$3\" = raw ]; then cat >\"$p\"; else base64 -d >\"$p\"; fi 2>/dev/null\n\
    then echo WARDEN-OK; wc -c <\"$p\"\n\
    else echo WARDEN-ERR:permission_denied; fi";

/// The codes [`WRITE`] may answer.
const CODES: [&str; 4] = [
    "is_directory",
    "exists",
    "invalid_path",
    "permission_denied",
];

impl Dispatcher {
    /// Writes `bytes` to the absolute `path` in the sandbox of this session's `tool`, as the
    /// sandbox's user, making its parents; with `new`, a path that exists is refused. A
    /// failure with the file itself carries the detail [`crate::FILE_DETAIL`]:
    /// `is_directory`, `exists`, `invalid_path`, `permission_denied` or `too_large`.
    pub async fn write_file(
        &self,
        tool: &str,
        path: &str,
        bytes: Vec<u8>,
        new: bool,
    ) -> Result<(), ToolError> {
        check_path(path)?;
        let bound = self.transfer_bound(tool)?;
        let size = bytes.len() as u64;
        if size > bound {
            return Err(file_error(
                "too_large",
                format!(
                    "{size} bytes are more than the {bound} its tool's policy lets a client \
                     write (`transfer`)"
                ),
            ));
        }
        let new = if new { "new" } else { "-" };
        let raw = clean_command(WRITE, "warden-write", &[path, new, "raw"]);
        if let Some(piped) = self
            .pipe_for_client(tool, raw, PipeInput::Bytes(&bytes), 4096)
            .await?
        {
            return written(&piped.stdout, size);
        }
        let command = format!(
            "{} <<'WARDEN_EOF'\n{}\nWARDEN_EOF",
            clean_command(WRITE, "warden-write", &[path, new, "base64"]),
            STANDARD.encode(&bytes)
        );
        let stdout = self.run_for_client(tool, command, 4096).await?;
        written(stdout.as_bytes(), size)
    }
}

/// Whether what [`WRITE`] printed says the file holds `size` bytes now.
fn written(stdout: &[u8], size: u64) -> Result<(), ToolError> {
    let Printed {
        refused, size: now, ..
    } = printed(stdout, &CODES)?;
    if let Some(code) = refused {
        return Err(file_error(code, code.replace('_', " ")));
    }
    match now {
        Some(now) if now == size => Ok(()),
        now => Err(lie(format!(
            "the file has {} bytes after writing {size}",
            now.map_or("an unknown number of".into(), |n| n.to_string())
        ))),
    }
}
