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
    /// The error's display text, in words: `"No such file or directory"`.
    fn err_text(self) -> Result<T, String>;

    /// The error's display text prefixed by the path it is about:
    /// `"/etc/passwd: No such file or directory"`.
    fn err_at(self, path: impl AsRef<Path>) -> Result<T, String>;
}

impl<T, E: Display> ErrorText<T> for Result<T, E> {
    fn err_text(self) -> Result<T, String> {
        self.map_err(|err| in_words(&err))
    }

    fn err_at(self, path: impl AsRef<Path>) -> Result<T, String> {
        self.map_err(|err| format!("{}: {}", path.as_ref().display(), in_words(&err)))
    }
}

/// An error's text without the ` (os error N)` std appends to an I/O error: N is WASI's
/// errno, not the host's (44 is ENOENT in WASI, ECHRNG on Linux), so it misleads whoever
/// reads it as the host's, and the words before it already say it all.
fn in_words(err: &impl Display) -> String {
    const MARK: &str = " (os error ";
    let mut text = err.to_string();
    while let Some(at) = text.find(MARK) {
        let digits = text[at + MARK.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .count();
        let end = at + MARK.len() + digits;
        if digits == 0 || !text[end..].starts_with(')') {
            break;
        }
        text.replace_range(at..=end, "");
    }
    text
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

    #[test]
    fn io_errors_are_told_in_words() {
        // As std formats an I/O error on wasm32-wasip2: WASI's errno 44 is ENOENT.
        let err: Result<(), String> = Err("No such file or directory (os error 44)".into());
        assert_eq!(
            err.err_at("/etc/passwd"),
            Err("/etc/passwd: No such file or directory".to_string())
        );
        let nested: Result<(), String> =
            Err("reading: Operation not permitted (os error 63); again (os error 63)".into());
        assert_eq!(
            nested.err_text(),
            Err("reading: Operation not permitted; again".to_string())
        );
        let odd: Result<(), &str> = Err("a (os error x)");
        assert_eq!(odd.err_text(), Err("a (os error x)".to_string()));
    }
}
