//! How long warden waits on a registry. Every exchange is bounded, so a registry (or whatever
//! answers in its name) that stalls or trickles cannot hold `push`, `add` or `pull` for ever; a
//! bound that fires is named with the flag that sets it, and nothing is stored after it.

use crate::error::OciError;
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
    at: Instant,
    bound: Bound,
    limit: Duration,
}

/// One bounded exchange: a request sent, its answer read.
pub(crate) struct Exchange<'a> {
    pub(crate) registry: &'a str,
    pub(crate) bounds: &'a Bounds,
    pub(crate) load: Load,
}

/// An answer whose body is still to be read, within its exchange's bounds.
pub(crate) struct Answer {
    pub(crate) response: reqwest::Response,
    registry: String,
    label: String,
    deadline: Deadline,
    idle: Duration,
}

impl Exchange<'_> {
    /// Sends `request`; `failed` names a failure that is no bound's (a refused connection, a
    /// certificate not trusted).
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
        failed: impl Fn(reqwest::Error) -> OciError,
    ) -> Result<Answer, OciError> {
        let (client, request) = request.build_split();
        let request = request.map_err(&failed)?;
        let label = format!("{} {}", request.method(), request.url());
        let deadline = self.bounds.deadline(self.load);
        // An upload's answer comes only once the registry has the whole blob.
        let idle = match self.load {
            Load::Upload(_) => None,
            Load::Small | Load::Fetch(_) => Some(Instant::now() + self.bounds.idle),
        };
        let (until, bound, limit) = earliest(deadline, idle, self.bounds.idle);
        let bounded = |bound, limit| OciError::Bounded {
            registry: self.registry.to_owned(),
            exchange: label.clone(),
            bound,
            limit,
        };
        match tokio::time::timeout_at(until, client.execute(request)).await {
            Err(_) => Err(bounded(bound, limit)),
            Ok(Err(e)) if e.is_connect() && e.is_timeout() => {
                Err(bounded(Bound::Connect, self.bounds.connect))
            }
            Ok(Err(e)) => Err(failed(e)),
            Ok(Ok(response)) => Ok(Answer {
                response,
                registry: self.registry.to_owned(),
                label,
                deadline,
                idle: self.bounds.idle,
            }),
        }
    }
}

/// Whichever comes first: the exchange's deadline, or `idle` (without a byte since) when it
/// applies; with the bound that is and its limit.
fn earliest(
    deadline: Deadline,
    idle: Option<Instant>,
    idle_limit: Duration,
) -> (Instant, Bound, Duration) {
    match idle {
        Some(idle) if idle < deadline.at => (idle, Bound::Idle, idle_limit),
        _ => (deadline.at, deadline.bound, deadline.limit),
    }
}

impl Answer {
    /// Reads the body, refusing past `limit` bytes.
    pub(crate) async fn body(mut self, what: &str, limit: u64) -> Result<Vec<u8>, OciError> {
        let too_large = || OciError::TooLarge {
            what: what.to_owned(),
            limit,
        };
        if self.response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            let idle = Instant::now() + self.idle;
            let (until, bound, bound_limit) = earliest(self.deadline, Some(idle), self.idle);
            let chunk = match tokio::time::timeout_at(until, self.response.chunk()).await {
                Err(_) => {
                    return Err(OciError::Bounded {
                        registry: self.registry,
                        exchange: self.label,
                        bound,
                        limit: bound_limit,
                    });
                }
                Ok(Err(e)) => {
                    return Err(OciError::Unreachable {
                        registry: self.registry,
                        why: format!("reading {what}: {e}"),
                    });
                }
                Ok(Ok(None)) => return Ok(body),
                Ok(Ok(Some(chunk))) => chunk,
            };
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
    }
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
