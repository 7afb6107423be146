//! One exchange with a registry under its [`Bounds`]: the request sent and its answer read,
//! each wait bounded, a bound that fires named in the error.

use crate::bounds::{Bound, Bounds, Deadline, Load};
use crate::error::OciError;
use std::time::Duration;
use tokio::time::Instant;

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
