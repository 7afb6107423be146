//! The `requestState` of a stateless review: what an approval asked for is bound to, sealed
//! with HMAC-SHA256, so that the client's retry brings back only what a server made.
//!
//! The state is base64url (no padding) of `version (1) | expires (8, big-endian Unix seconds)
//! | nonce (16) | tool | digest | policy digest | tag (32)`, each string a big-endian u16
//! length then its UTF-8 bytes. It is signed, not encrypted: it holds nothing secret.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long an input request waits for its answer: a retry after this is refused.
pub(crate) const LIFETIME: Duration = Duration::from_secs(600);
/// The most states remembered as answered at once; past them, and until some expire, an
/// answer is refused rather than a state forgotten (which would let it be replayed).
const MAX_USED: usize = 65_536;
/// What the key a token gives is derived for, so that it is no other use's key.
const LABEL: &[u8] = b"warden/mcp/request-state/v1";
const VERSION: u8 = 1;
const NONCE_LEN: usize = 16;
const TAG_LEN: usize = 32;

/// The key states are sealed with.
pub(crate) struct StateKey(hmac::Key);

impl StateKey {
    /// A key of this process alone (stdio: its client talks to this process only).
    pub(crate) fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    /// The key every server given the bearer token `token` derives, so that replicas behind
    /// one load balancer open each other's states: HMAC-SHA256 of [`LABEL`] under the token.
    pub(crate) fn from_token(token: &str) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, token.as_bytes());
        let derived = hmac::sign(&root, LABEL);
        Self(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))
    }

    /// `bound` as a `requestState`.
    pub(crate) fn seal(&self, bound: &Bound) -> String {
        let mut bytes = vec![VERSION];
        bytes.extend_from_slice(&bound.expires.to_be_bytes());
        bytes.extend_from_slice(&bound.nonce);
        for field in [&bound.tool, &bound.digest, &bound.policy_digest] {
            // A field longer than a u16 says is cut (no tool name or digest comes near it):
            // the retry's call then differs from the one bound, and is refused.
            let field = &field[..field.floor_char_boundary(usize::from(u16::MAX))];
            let len = u16::try_from(field.len()).unwrap_or(u16::MAX);
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(field.as_bytes());
        }
        let tag = hmac::sign(&self.0, &bytes);
        bytes.extend_from_slice(tag.as_ref());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// What `state` binds, if this key sealed it and it has not expired by `now` (Unix seconds).
    pub(crate) fn open(&self, state: &str, now: u64) -> Result<Bound, StateError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(state)
            .map_err(|_| StateError::Forged)?;
        let split = bytes.len().checked_sub(TAG_LEN).ok_or(StateError::Forged)?;
        let (body, tag) = bytes.split_at(split);
        hmac::verify(&self.0, body, tag).map_err(|_| StateError::Forged)?;
        let bound = Bound::parse(body).ok_or(StateError::Forged)?;
        if bound.expires <= now {
            return Err(StateError::Expired);
        }
        Ok(bound)
    }
}

/// What an approval asked for over a stateless round trip is for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bound {
    pub tool: String,
    /// The call's digest (`warden_core::call_digest`).
    pub digest: String,
    /// The digest of the tool's policy when it was asked.
    pub policy_digest: String,
    /// Tells this state from every other: it is answered once.
    pub nonce: [u8; NONCE_LEN],
    /// When it stops being good, in Unix seconds.
    pub expires: u64,
}

impl Bound {
    /// A state for the call of `tool` with `digest` under the policy `policy_digest`, good
    /// for [`LIFETIME`] from now.
    pub(crate) fn new(
        tool: &str,
        digest: &str,
        policy_digest: &str,
    ) -> Result<Self, getrandom::Error> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce)?;
        Ok(Self {
            tool: tool.to_owned(),
            digest: digest.to_owned(),
            policy_digest: policy_digest.to_owned(),
            nonce,
            expires: now() + LIFETIME.as_secs(),
        })
    }

    /// The fields of a body whose tag was verified; `None` when it is not one [`StateKey::seal`]
    /// writes (another version).
    fn parse(body: &[u8]) -> Option<Self> {
        let (&version, rest) = body.split_first()?;
        if version != VERSION {
            return None;
        }
        let (expires, rest) = rest.split_first_chunk::<8>()?;
        let (nonce, mut rest) = rest.split_first_chunk::<NONCE_LEN>()?;
        let mut field = || {
            let (len, after) = rest.split_first_chunk::<2>()?;
            let (text, after) = after.split_at_checked(usize::from(u16::from_be_bytes(*len)))?;
            rest = after;
            String::from_utf8(text.to_vec()).ok()
        };
        let (tool, digest, policy_digest) = (field()?, field()?, field()?);
        rest.is_empty().then_some(Self {
            tool,
            digest,
            policy_digest,
            nonce: *nonce,
            expires: u64::from_be_bytes(*expires),
        })
    }
}

/// Why a `requestState` is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum StateError {
    #[error(
        "the requestState is not one this server made: it is malformed or was edited, or a \
         server with another key made it; call again without it to be asked anew"
    )]
    Forged,
    #[error(
        "the input request this answers has expired (they wait {} seconds); call again \
         without it to be asked anew", LIFETIME.as_secs()
    )]
    Expired,
    #[error(
        "this requestState was answered already: an approval runs its call once; call again \
         without it to be asked anew"
    )]
    Used,
    #[error(
        "too many answers to input requests are remembered at once to take another now; try \
         again in a few minutes"
    )]
    Full,
}

/// The nonces of the states answered in this process, until they expire.
#[derive(Default)]
pub(crate) struct Used(Mutex<HashMap<[u8; NONCE_LEN], u64>>);

impl Used {
    /// Marks `bound` answered at `now`: refused when it was already, or when no room is left.
    pub(crate) fn take(&self, bound: &Bound, now: u64) -> Result<(), StateError> {
        let mut used = warden_core::lock(&self.0);
        if used.len() >= MAX_USED {
            used.retain(|_, expires| *expires > now);
        }
        if used.contains_key(&bound.nonce) {
            return Err(StateError::Used);
        }
        if used.len() >= MAX_USED {
            return Err(StateError::Full);
        }
        used.insert(bound.nonce, bound.expires);
        Ok(())
    }
}

/// Now, in Unix seconds.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> Bound {
        Bound::new("rm", "sha256:ab", "0123456789abcdef").unwrap()
    }

    #[test]
    fn a_sealed_state_opens_to_what_it_binds() {
        let key = StateKey::from_token("t".repeat(32).as_str());
        let bound = bound();
        let state = key.seal(&bound);
        assert!(state.len() < 200, "{state}");
        assert_eq!(key.open(&state, now()), Ok(bound.clone()));
        // Another replica given the same token opens it; a server with another key does not.
        let replica = StateKey::from_token("t".repeat(32).as_str());
        assert_eq!(replica.open(&state, now()), Ok(bound.clone()));
        let other = StateKey::from_token("u".repeat(32).as_str());
        assert_eq!(other.open(&state, now()), Err(StateError::Forged));
        assert_eq!(
            key.open(&state, bound.expires),
            Err(StateError::Expired),
            "expired"
        );
    }

    #[test]
    fn anything_but_a_sealed_state_is_forged() {
        let key = StateKey::random().unwrap();
        let state = key.seal(&bound());
        let mut bytes = URL_SAFE_NO_PAD.decode(&state).unwrap();
        bytes[12] ^= 1;
        let tampered = URL_SAFE_NO_PAD.encode(&bytes);
        let cut = &state[..state.len() - 4];
        for forged in ["", "!!", "AAAA", tampered.as_str(), cut] {
            assert_eq!(key.open(forged, now()), Err(StateError::Forged), "{forged}");
        }
        // A body that parses as nothing, under a valid tag, is refused too.
        let tag = hmac::sign(&key.0, b"\x01short");
        let odd = URL_SAFE_NO_PAD.encode([b"\x01short".as_slice(), tag.as_ref()].concat());
        assert_eq!(key.open(&odd, now()), Err(StateError::Forged));
    }

    #[test]
    fn a_state_is_answered_once() {
        let used = Used::default();
        let bound = bound();
        assert_eq!(used.take(&bound, now()), Ok(()));
        assert_eq!(used.take(&bound, now()), Err(StateError::Used));
        assert_eq!(used.take(&self::bound(), now()), Ok(()));
    }
}
