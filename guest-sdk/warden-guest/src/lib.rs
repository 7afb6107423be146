//! Helpers for writing warden tools in Rust.
//!
//! Tools generate their bindings through the re-exported `wit_bindgen`, so that
//! every tool builds against the one version this crate pins:
//!
//! ```ignore
//! warden_guest::wit_bindgen::generate!({
//!     runtime_path: "warden_guest::wit_bindgen::rt",
//! });
//! ```
//!
//! Tool errors cross the component boundary as `result<_, string>`; the
//! [`ErrorText`] extension turns any Rust error into that string.
//!
//! Beware of world-level exports named like libc functions (`read`, `write`,
//! `sleep`, ...): their core symbols replace libc's. See the guest-sdk README.

#[cfg(feature = "http")]
pub mod http;

use std::fmt::Display;
use std::path::{Path, PathBuf};

pub use wit_bindgen;

/// Where a policy mounts the host directory a tool may work in.
pub const WORKSPACE: &str = "/workspace";

/// Resolves a guest path the way tools document it: absolute paths stay as
/// they are, relative ones are taken from [`WORKSPACE`].
///
/// This is not a sandbox: the host's preopens decide what can be reached.
pub fn workspace_path(path: impl AsRef<Path>) -> PathBuf {
    // `join` keeps an absolute right-hand side as is.
    Path::new(WORKSPACE).join(path)
}

/// Turns a Rust error into the `string` of a WIT `result<_, string>`.
pub trait ErrorText<T> {
    /// The error's display text.
    fn err_text(self) -> Result<T, String>;

    /// The error's display text prefixed by the path it is about:
    /// `"/etc/passwd: No such file or directory (os error 44)"`.
    fn err_at(self, path: impl AsRef<Path>) -> Result<T, String>;
}

impl<T, E: Display> ErrorText<T> for Result<T, E> {
    fn err_text(self) -> Result<T, String> {
        self.map_err(|err| err.to_string())
    }

    fn err_at(self, path: impl AsRef<Path>) -> Result<T, String> {
        self.map_err(|err| format!("{}: {err}", path.as_ref().display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_land_in_the_workspace() {
        assert_eq!(workspace_path("a/b"), Path::new("/workspace/a/b"));
        assert_eq!(workspace_path("/etc/passwd"), Path::new("/etc/passwd"));
    }

    #[test]
    fn errors_carry_their_path() {
        let err: Result<(), &str> = Err("boom");
        assert_eq!(err.err_at("/x"), Err("/x: boom".to_string()));
        assert_eq!(err.err_text(), Err("boom".to_string()));
    }
}
