//! A wasm call's read-write roots as a transaction (see `warden_tx`). wasmtime's WASI opens a
//! preopened folder by its path, so each read-write root of the call is preopened at the
//! overlay that the host backend's fork server mounts for the call's view (`/proc/self/fd/N`,
//! the mount's descriptor): the guest's writes land in the view, and the root is untouched
//! until the call's answer commits them. A call warden ends (a trap, its fuel, its memory, its
//! time) drops the view and leaves nothing behind.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_core::{Access, Grants, Invocation, Output, ToolError};
use warden_tx::{Overlays, Store, View};

/// Where the views of one component's calls are kept and how they are mounted: made at load
/// for a policy that grants read-write roots (a call without one pays nothing).
#[derive(Clone)]
pub(crate) struct Views {
    store: Arc<Store>,
    overlays: Arc<dyn Overlays>,
    /// The read-write roots each call's view is of.
    roots: Vec<PathBuf>,
}

/// A call's view, mounted: open its roots' [`Mounted::path_of`] before it is dropped.
pub(crate) struct Mounted {
    pub view: View,
    mounts: Vec<OwnedFd>,
}

impl Views {
    /// The views of calls under `grants`, kept in `store` and mounted by `overlays`; `None`
    /// when `grants` gives no read-write root.
    pub(crate) fn of(
        grants: &Grants,
        store: Arc<Store>,
        overlays: Arc<dyn Overlays>,
    ) -> Option<Views> {
        let roots: Vec<PathBuf> = grants
            .fs
            .iter()
            .filter(|g| g.access == Access::ReadWrite)
            .map(|g| g.host.clone())
            .collect();
        (!roots.is_empty()).then_some(Views {
            store,
            overlays,
            roots,
        })
    }

    /// A view of the read-write roots, mounted.
    pub(crate) fn mount(&self) -> Result<Mounted, ToolError> {
        let view = self
            .store
            .view(&self.roots)
            .map_err(|e| ToolError::internal(format!("a view of the call's roots: {e}")))?;
        let mounts = self
            .overlays
            .mount(&view)
            .map_err(|e| ToolError::internal(e.to_string()))?;
        Ok(Mounted { view, mounts })
    }
}

/// What call `inv` of `tool` answers once its view is settled: committed when the call
/// returned (a value, an error of its own, an exit status), else dropped. The guest runs no
/// more, so nothing writes into the view.
pub(crate) fn settle(
    view: View,
    inv: &Invocation,
    tool: &str,
    answered: Result<Output, ToolError>,
) -> Result<Output, ToolError> {
    let whose = warden_tx::settle::Settling {
        call: &inv.call_id,
        tool,
        limit: inv.limits.changes,
    };
    warden_tx::settle::settle(Some(view), true, whose, inv.hold.as_ref(), answered)
}

impl Mounted {
    /// The path that opens the view of the read-write root `host`: its mount's descriptor.
    pub(crate) fn path_of(&self, host: &Path) -> Option<PathBuf> {
        let i = self.view.roots().iter().position(|r| r == host)?;
        let fd = self.mounts.get(i)?.as_raw_fd();
        Some(PathBuf::from(format!("/proc/self/fd/{fd}")))
    }
}
