//! `warden console`: a page on this machine's loopback where a person sees every tool with its
//! grants and limits, the calls as they happen (the call log, read as it grows) and whether the
//! ledger verifies.
//!
//! Safe by construction:
//! - The URL printed once carries a random token; the first load exchanges it for an
//!   `HttpOnly`, `SameSite=Strict` cookie and sends the browser on without it. Every other
//!   request needs the cookie (compared in constant time).
//! - `Host` must be a loopback name of the server, and a browser's `Origin` its own (one rule
//!   with `warden serve --http`: [`warden_mcp::Loopback`]). Its one request that changes
//!   anything, a decision on a call waiting for review (`warden serve --console`: [`Reviews`]),
//!   is a `POST` of JSON that needs the cookie and the console's own `Origin`, and is bound to
//!   the digest of the call the page showed.
//! - Every answer says `Content-Security-Policy: default-src 'none'` with only the console's
//!   own script, style and data allowed, `frame-ancestors 'none'`, no referrer, no caching.
//!   The page builds its text with `textContent`, never markup: what a tool, a model or a
//!   sandbox wrote is shown as text.
//! - Nothing is loaded from elsewhere: the page, script and style are in this crate.

mod reviews;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

pub use reviews::Reviews;
pub use routes::Source;

/// The cookie a browser holds once it has exchanged the token.
const COOKIE: &str = "warden_console";

/// What went wrong starting the console.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("the console can listen on a loopback address only, not {0}")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("no randomness for the console's token: {0}")]
    Random(String),
}

/// A console listening on loopback, not yet serving.
pub struct Console {
    listener: TcpListener,
    local: SocketAddr,
    token: String,
    cookie: String,
}

impl Console {
    /// Listens at `address` (a loopback address; port 0 picks one).
    pub async fn bind(address: SocketAddr) -> Result<Self, ConsoleError> {
        if !address.ip().is_loopback() {
            return Err(ConsoleError::NotLoopback(address));
        }
        let listen = |source| ConsoleError::Listen { address, source };
        let listener = TcpListener::bind(address).await.map_err(listen)?;
        let local = listener.local_addr().map_err(listen)?;
        Ok(Self {
            listener,
            local,
            token: random()?,
            cookie: random()?,
        })
    }

    /// The URL to open: with the token, which the first load exchanges for a cookie.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.local, self.token)
    }

    /// Serves the page and `source`'s data until the process ends; with `reviews`, the calls
    /// waiting for a person, decided there.
    pub async fn serve(self, source: Arc<dyn Source>, reviews: Option<Arc<Reviews>>) {
        let site = routes::Site {
            loopback: warden_mcp::Loopback::new(self.local, &[]),
            token: self.token,
            cookie: self.cookie,
            source,
            reviews,
        };
        routes::serve(self.listener, Arc::new(site)).await;
    }
}

/// 32 random bytes, in hex.
fn random() -> Result<String, ConsoleError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ConsoleError::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}
