//! What can go wrong between warden and a registry, each naming the fix.

use crate::bounds::Bound;
use std::time::Duration;

/// An OCI failure. Nothing is stored after any of them.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{0}")]
    BadReference(String),
    #[error("{0}")]
    Key(String),
    #[error("the registry {registry} is not reachable ({why}): check the address and that it runs")]
    Unreachable { registry: String, why: String },
    #[error(
        "the registry {registry}'s certificate is not trusted ({why}): give warden its CA with \
         --upstream-roots CA.pem (WARDEN_UPSTREAM_ROOTS)"
    )]
    Untrusted { registry: String, why: String },
    #[error(
        "the registry {registry} {bound} {limit:?} ({exchange}): {flag} sets this bound; \
         nothing was stored",
        flag = bound.flag()
    )]
    Bounded {
        registry: String,
        /// The request, `METHOD URL`, or what was under way.
        exchange: String,
        bound: Bound,
        limit: Duration,
    },
    #[error(
        "the registry {registry} sends warden for a token to {realm}, where its credentials \
         for {registry} do not go: {why}"
    )]
    Withheld {
        registry: String,
        realm: String,
        /// Which rule keeps them, and the fix.
        why: String,
    },
    #[error("{what} is not in the registry: check the repository and the tag")]
    NotFound { what: String },
    #[error(
        "the registry {registry} refused warden ({status}): it needs credentials warden does \
         not have for it"
    )]
    Unauthorised { registry: String, status: u16 },
    #[error("the registry {registry} answered {status} to {what}: {body}")]
    Registry {
        registry: String,
        what: String,
        status: u16,
        body: String,
    },
    #[error(
        "{what} does not match its digest: expected {expected}, got {got} (the registry's copy \
         was changed, or is corrupt); nothing was stored"
    )]
    DigestMismatch {
        what: String,
        expected: String,
        got: String,
    },
    #[error("{what} is larger than {limit} bytes, the most warden reads of it")]
    TooLarge { what: String, limit: u64 },
    #[error("{0}")]
    Layout(String),
    #[error("{0}")]
    Unsigned(String),
    #[error("{0}")]
    BadSignature(String),
}
