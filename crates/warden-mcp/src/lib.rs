//! An MCP server over a warden toolbox.
//!
//! Every `tools/call` goes through the toolbox's [`Dispatcher`](warden_core::Dispatcher), so
//! validation, limits, review, redaction and the call log apply exactly as for `warden call`.
//! Transports: stdio ([`Server::serve_stdio`]) and streamable HTTP ([`HttpServer`]), which binds
//! loopback unless told otherwise and requires a bearer token.
//!
//! No MCP request can change a grant: grants live only in the policy files, which the server
//! reads and never writes.

#![forbid(unsafe_code)]

mod calls;
mod choices;
mod connections;
mod convert;
mod handler;
mod http;
mod inflight;
mod jsonrpc;
mod progress;
mod read;
mod request_state;
mod review;
mod session;
mod snapshot;
mod start;
mod state;
mod stateless_review;
mod stdio;
mod trace;
mod undo;
mod watch;
mod write;

pub use connections::ConnectionLimits;
pub use http::loopback::{Loopback, Refused};
pub use http::{HttpOptions, HttpServer, generate_token};
pub use state::{Loader, Options, PolicyLoader, Server};

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Toolbox(#[from] warden_core::ToolboxError),
    #[error(
        "refusing to listen on {0}, which is not a loopback address: anyone who can reach it \
         could try the token; pass --allow-remote to mean it"
    )]
    NotLoopback(std::net::SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
    #[error("the MCP session ended before it started: {0}")]
    Initialize(String),
    #[error("the MCP server stopped unexpectedly: {0}")]
    Stopped(String),
    #[error("cannot generate a token: {0}")]
    Random(String),
    #[error("the token must be at least {min} characters (it guards every tool)", min = http::MIN_TOKEN_LEN)]
    WeakToken,
}
