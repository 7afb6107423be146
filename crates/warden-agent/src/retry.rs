//! When to try a model call again: exponential backoff, or what the provider asks for.

use reqwest::header::HeaderMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

/// How transient failures of a model call are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first wait; each next one doubles, up to `max_delay`.
    pub initial: Duration,
    pub max_delay: Duration,
    /// A provider that asks for a longer wait than this (`Retry-After`) is not retried.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            initial: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// The provider asks for a longer wait than warden waits: the call is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the provider asks to wait {:.0} s, longer than warden waits ({:.0} s)",
    .asked.as_secs_f64(),
    .limit.as_secs_f64()
)]
pub struct WaitTooLong {
    pub asked: Duration,
    /// The policy's [`RetryPolicy::max_retry_after`].
    pub limit: Duration,
}

impl RetryPolicy {
    /// The wait before attempt `failed + 1`, honouring the provider's `asked` wait; an error
    /// says why not to wait at all.
    pub fn delay(&self, failed: u32, asked: Option<Duration>) -> Result<Duration, WaitTooLong> {
        if let Some(asked) = asked {
            if asked > self.max_retry_after {
                return Err(WaitTooLong {
                    asked,
                    limit: self.max_retry_after,
                });
            }
            return Ok(asked);
        }
        let doubled = self
            .initial
            .saturating_mul(2u32.saturating_pow(failed.saturating_sub(1)));
        let capped = doubled.min(self.max_delay);
        // Jitter keeps many clients that failed together from retrying together.
        let jitter = 0.75 + 0.25 * unit_random();
        Ok(capped.mul_f64(jitter))
    }
}

/// The wait a response asks for: `retry-after-ms` (OpenAI's), else `Retry-After` in seconds
/// or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(|t| t.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = text("retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// A number in [0, 1): enough randomness for jitter without a dependency.
fn unit_random() -> f64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backs_off_exponentially_and_honours_the_provider() {
        let p = RetryPolicy::default();
        let first = p.delay(1, None).unwrap();
        let third = p.delay(3, None).unwrap();
        assert!(first <= Duration::from_millis(500) && first >= Duration::from_millis(375));
        assert!(third >= Duration::from_millis(1500), "{third:?}");
        assert!(p.delay(30, None).unwrap() <= p.max_delay);
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3))),
            Ok(Duration::from_secs(3))
        );
        assert!(p.delay(1, Some(Duration::from_secs(3600))).is_err());
    }

    #[test]
    fn reads_retry_after_in_every_form() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        h.insert("retry-after", HeaderValue::from_str(&later).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(27) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }
}
