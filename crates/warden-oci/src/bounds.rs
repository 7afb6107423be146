//! How long warden waits on a registry. Every exchange is bounded, so a registry (or whatever
//! answers in its name) that stalls or trickles cannot hold `push`, `add` or `pull` for ever; a
//! bound that fires is named with the flag that sets it, and nothing is stored after it.

use std::time::Duration;
use tokio::time::Instant;

/// The bounds on a registry's exchanges; [`Bounds::DEFAULT`] states every default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connecting: resolving the registry's name, the TCP connection and the TLS handshake.
    pub connect: Duration,
    /// Waiting without a byte: for an answer once asked, or for the next piece of its body.
    pub idle: Duration,
    /// A whole exchange that moves no blob (a manifest, a token, the start of an upload), and
    /// the fixed part of one that does.
    pub request: Duration,
    /// The slowest a blob may come or go, in bytes a second: a blob of N bytes has `request`
    /// plus N / `min_rate`.
    pub min_rate: u64,
}

impl Bounds {
    /// 10 s to connect, 30 s without a byte, 60 s for an exchange that moves no blob, and blobs
    /// at no less than 10 KiB/s (a 1 MiB component has 60 s + 102.4 s).
    pub const DEFAULT: Bounds = Bounds {
        connect: Duration::from_secs(10),
        idle: Duration::from_secs(30),
        request: Duration::from_secs(60),
        min_rate: 10 << 10,
    };

    /// The deadline of an exchange that moves `load`, starting now.
    pub(crate) fn deadline(&self, load: Load) -> Deadline {
        let (bound, limit) = match load {
            Load::Small => (Bound::Request, self.request),
            Load::Fetch(size) | Load::Upload(size) => {
                let moving = Duration::from_secs_f64(size as f64 / self.min_rate.max(1) as f64);
                (Bound::Blob, self.request.saturating_add(moving))
            }
        };
        Deadline {
            at: Instant::now() + limit,
            bound,
            limit,
        }
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Which bound fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// [`Bounds::connect`].
    Connect,
    /// [`Bounds::idle`].
    Idle,
    /// [`Bounds::request`].
    Request,
    /// [`Bounds::request`] plus a blob's size at [`Bounds::min_rate`].
    Blob,
}

impl Bound {
    /// The command-line flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Bound::Connect => "--registry-connect-timeout",
            Bound::Idle => "--registry-idle-timeout",
            Bound::Request => "--registry-timeout",
            Bound::Blob => "--registry-min-rate (with --registry-timeout)",
        }
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bound::Connect => "could not be connected to within",
            Bound::Idle => "sent nothing for",
            Bound::Request => "did not finish answering within",
            Bound::Blob => "did not finish moving a blob within",
        })
    }
}

/// What an exchange moves, which sets its deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Load {
    /// No blob: a manifest, a token, a check or the start of an upload.
    Small,
    /// A blob of this many bytes, fetched.
    Fetch(u64),
    /// A blob of this many bytes, sent: the registry answers only once it has it all, so no
    /// idle bound applies until then.
    Upload(u64),
}

/// Until when an exchange may run, and which bound that is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    pub(crate) bound: Bound,
    pub(crate) limit: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blobs_deadline_grows_with_its_size() {
        let bounds = Bounds::DEFAULT;
        let small = bounds.deadline(Load::Small);
        assert_eq!((small.bound, small.limit), (Bound::Request, bounds.request));
        let blob = bounds.deadline(Load::Fetch(1 << 20));
        assert_eq!(blob.bound, Bound::Blob);
        assert_eq!(blob.limit, Duration::from_millis(60_000 + 102_400));
    }
}
