//! A wasm call's read-write roots as a transaction (see `warden_tx`). wasmtime's WASI opens a
//! preopened folder by its path, so each read-write root of the call is preopened at the
//! overlay that the host backend's fork server mounts for the call's view (`/proc/self/fd/N`,
//! the mount's descriptor): the guest's writes land in the view, and the root is untouched
//! until the call's answer commits them. A call warden ends (a trap, its fuel, its memory, its
//! time) drops the view and leaves nothing behind.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{Access, Grants, ToolError};
use warden_tx::{Overlays, Store, View};

/// Where calls' views are kept and how they are mounted.
#[derive(Clone)]
pub(crate) struct Views {
    pub store: Arc<Store>,
    pub overlays: Arc<dyn Overlays>,
}

/// A call's view, mounted: open its roots' [`Mounted::path_of`] before it is dropped.
pub(crate) struct Mounted {
    pub view: View,
    mounts: Vec<OwnedFd>,
}

impl Views {
    /// A view of the read-write roots `grants` gives, mounted; `None` when it gives none.
    pub(crate) fn mount(&self, grants: &Grants) -> Result<Option<Mounted>, ToolError> {
        let roots: Vec<PathBuf> = grants
            .fs
            .iter()
            .filter(|g| g.access == Access::ReadWrite)
            .map(|g| g.host.clone())
            .collect();
        if roots.is_empty() {
            return Ok(None);
        }
        let view = self
            .store
            .view(&roots)
            .map_err(|e| ToolError::internal(format!("a view of the call's roots: {e}")))?;
        let mounts = self
            .overlays
            .mount(&view)
            .map_err(|e| ToolError::internal(e.to_string()))?;
        Ok(Some(Mounted { view, mounts }))
    }
}

impl Mounted {
    /// The path that opens the view of the read-write root `host`: its mount's descriptor.
    pub(crate) fn path_of(&self, host: &Path) -> Option<PathBuf> {
        let i = self.view.roots().iter().position(|r| r == host)?;
        let fd = self.mounts.get(i)?.as_raw_fd();
        Some(PathBuf::from(format!("/proc/self/fd/{fd}")))
    }
}
