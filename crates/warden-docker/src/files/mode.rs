//! Whether granted roots are mounted or copied: the word the engine and the copying share.

/// The environment variable that makes `Engine::from_env` copy roots (`copy`) or mount them
/// (`mount`, the default).
pub const FILES_ENV: &str = "WARDEN_DOCKER_FILES";

/// How granted roots reach an engine's containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    /// Bind-mounted: the engine runs on this machine and sees its folders.
    Mounted,
    /// Copied in at each container's start (and, for read-write roots with `copy_back`,
    /// written back at its end): the engine's machine does not hold this one's folders.
    Copied,
}

impl Files {
    /// As [`FILES_ENV`] says; an unknown value copies (it never exposes a folder) and says so.
    pub(crate) fn from_env() -> Files {
        match std::env::var(FILES_ENV).as_deref() {
            Err(_) | Ok("" | "mount" | "mounted") => Files::Mounted,
            Ok("copy" | "copied") => Files::Copied,
            Ok(other) => {
                tracing::warn!(
                    "{FILES_ENV}={other:?} is neither `copy` nor `mount`: granted roots are \
                     copied into containers"
                );
                Files::Copied
            }
        }
    }
}
