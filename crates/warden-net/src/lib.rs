//! warden's egress gate, one implementation for every executor: a destination is checked
//! against the policy's `net` grants, resolved by warden (with `--resolve` overrides), every
//! address vetted (loopback, private, link-local and the like only under an address grant),
//! and only a vetted address dialled ([`Gate`]). Wasm tools reach it through their host-side
//! HTTP; programs in a docker or host sandbox through [`Proxy`], an HTTP proxy listening in
//! the sandbox's own, otherwise empty, network namespace.

#![forbid(unsafe_code)]

mod ca;
mod credentials;
mod egress;
mod gate;
mod proxy;
mod resolver;
mod scrub;

pub use ca::CaError;
pub use credentials::{Credentials, HeaderError, TRUST_VARIABLES};
pub use egress::{Egress, RootsError};
pub use gate::{DialError, Gate, Vetting, connect};
pub use proxy::{GATE_PORT, HEAD_WAIT, MAX_CONNECTIONS, Proxy, Scope, Traffic, proxy_env};
pub use resolver::{OverrideError, Resolver};
