//! The request ids in flight in each HTTP session. JSON-RPC asks a client for an id that no
//! request of its still waiting uses, and rmcp routes a session's answers by id: a second
//! request reusing one would take the first one's answer, and one of the two would never be
//! answered. The second is refused instead, with a JSON-RPC error naming the id.

use rmcp::model::RequestId;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// Every session's ids of requests whose answers are not sent yet.
#[derive(Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashSet<(String, String)>>>);

/// An id in use until this is dropped: held by the request's answer until it has been sent.
pub(crate) struct Claim {
    ids: InFlight,
    key: (String, String),
}

impl InFlight {
    /// Claims `id` in `session`; `None` when a request of the session waits on it already.
    pub(crate) fn claim(&self, session: &str, id: &RequestId) -> Option<Claim> {
        // As JSON: the number 7 and the string "7" are two ids.
        let key = (
            session.to_owned(),
            serde_json::to_string(id).unwrap_or_default(),
        );
        let fresh = self.lock().insert(key.clone());
        fresh.then(|| Claim {
            ids: self.clone(),
            key,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        // A panic while holding it leaves the set whole: insert and remove are single steps.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.ids.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_taken_until_its_answer_is_sent_and_only_in_its_session() {
        let ids = InFlight::default();
        let first = ids.claim("s1", &RequestId::Number(7));
        assert!(first.is_some());
        assert!(ids.claim("s1", &RequestId::Number(7)).is_none());
        assert!(ids.claim("s2", &RequestId::Number(7)).is_some());
        assert!(ids.claim("s1", &RequestId::String("7".into())).is_some());
        drop(first);
        assert!(ids.claim("s1", &RequestId::Number(7)).is_some());
    }
}
