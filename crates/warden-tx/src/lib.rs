//! Tool calls as transactions over their read-write roots.
//!
//! A call with a read-write root writes into a [`View`] of its own: the sandbox sees the root
//! through an overlay whose upper layer is a folder in warden's home, outside every grant.
//! Once every process of the call is gone, warden reads the view's [`ChangeSet`] (what was
//! added, modified, removed: [`Change`]) and either commits it to the real root — keeping
//! the pre-image of everything it replaces, so that [`Store::undo`] and [`Store::rewind`] can
//! put it back — or discards it, and the root never saw the call. A call whose sandbox got
//! a copy of its roots instead (a container on an engine elsewhere) has what its copy
//! changed staged in its view ([`View::stage`]), and is settled the same way.
//!
//! Every default is here, but what one call's changes and their pre-images may hold: that is
//! a policy's limit (`[limits] changes`, `warden_core::Limits::changes`).
//! - [`KEEP_BYTES`] and [`KEEP_FOR`]: the pre-images kept for undo; past them the oldest are
//!   dropped, and an undo of a dropped call says so.
//! - [`DIFF_FILE_BYTES`]: the largest file [`View::diff`] shows the text of.
//!
//! What "byte-exact" covers is in [`Entry`]. Commit, undo and rewind reach every path beneath
//! its root without following a link (see `beneath`), and a commit is journalled: a warden
//! killed in the middle leaves a record that the next [`Store::open`] rolls back.

mod beneath;
mod changes;
mod clock;
mod copied;
mod diff;
mod entry;
mod fork;
pub mod mount;
mod record;
mod session;
pub mod settle;
mod store;
mod trash;
mod watch;
mod writes;

pub use changes::{Change, ChangeKind};
pub use copied::Copied;
pub use diff::DIFF_FILE_BYTES;
pub use entry::{Entry, Kind};
pub use record::{CallRecord, State};
pub use session::SessionView;
pub use store::{ChangeSet, Layer, Store, View};
pub use writes::ToolWrites;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Mounts a view for a caller that cannot mount it itself (a wasm tool, run in warden's own
/// process): each of the view's roots as a detached overlay whose upper layer is the view's,
/// answered as a descriptor of the mount, in the order of [`View::roots`]. What is written
/// through a descriptor lands in the view; the mount goes when its last descriptor closes.
pub trait Overlays: Send + Sync {
    fn mount(&self, view: &View) -> Result<Vec<OwnedFd>, TxError>;
}

/// The pre-images kept for undo, all calls together; past them the oldest calls' are dropped.
pub const KEEP_BYTES: u64 = 1 << 30;

/// How long a call's pre-images are kept for undo.
pub const KEEP_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// What went wrong with a transaction.
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the call made {}, which is neither a file, a folder nor a link: its changes are not \
         committed",
        .0.display()
    )]
    Special(PathBuf),
    #[error("{}", conflict(.call.as_deref(), .paths))]
    Conflict {
        /// The call whose changes could not be applied or undone, when known.
        call: Option<String>,
        paths: Vec<PathBuf>,
    },
    #[error(
        "the call's changes and what they replace hold {bytes} bytes, past the {limit} its \
         policy lets a call hold (`[limits] changes`): none of them were applied"
    )]
    TooLarge { bytes: u64, limit: u64 },
    #[error("no call {0} changed any root in this warden home (`warden undo --list` lists them)")]
    Unknown(String),
    #[error("the call {call} cannot be undone: {why}")]
    NotUndoable { call: String, why: String },
    #[error("warden's transaction store {}: {why}", dir.display())]
    Unready { dir: PathBuf, why: String },
    #[error("the record of call {call}: {source}")]
    Record {
        call: String,
        source: serde_json::Error,
    },
}

impl TxError {
    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.to_owned(),
            source,
        }
    }
}

fn conflict(call: Option<&str>, paths: &[PathBuf]) -> String {
    let paths = shown(paths);
    match call {
        Some(call) => format!(
            "call {call} cannot be undone: what it left at {paths} was changed since (undo \
             the later calls first, or `warden rewind` past them)"
        ),
        None => format!(
            "another call committed changes to {paths} while this call ran: this call's \
             changes were not applied"
        ),
    }
}

/// Up to ten paths, then how many more.
fn shown(paths: &[PathBuf]) -> String {
    let mut text: Vec<String> = paths
        .iter()
        .take(10)
        .map(|p| p.display().to_string())
        .collect();
    if paths.len() > 10 {
        text.push(format!("and {} more", paths.len() - 10));
    }
    text.join(", ")
}
