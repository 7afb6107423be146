//! The names of the images warden builds, as policies name them and the engine looks for
//! them.

/// The Debian image's repository: `:latest` names the newest build, `:<digest>` each recipe.
pub const DEBIAN_REPOSITORY: &str = "warden-sandbox-debian";

/// The Debian image as a policy names it.
pub const DEBIAN_IMAGE: &str = "warden-sandbox-debian:latest";
