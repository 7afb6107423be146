//! The calls waiting for a person at the console (`warden serve --console`): a reviewer that
//! puts each call (or each call's changes) on the page and waits for a click. A decision is
//! bound to the digest the page showed: one sent for another digest is refused, so an
//! approval never reaches a call the person did not see.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use tokio::sync::oneshot;
use warden_core::{Asked, BoxFuture, ChangesToReview, Decision, Reviewer, Verdict};

/// What a person decided at the page.
#[derive(Debug)]
pub(crate) enum Decided {
    Approve,
    Reject(String),
    /// Run the call with these arguments instead (a call, not its changes).
    Edit(Value),
    /// Answer the model with this text, running nothing (a call, not its changes).
    Respond(String),
}

impl Decided {
    /// Whether this decides a call before it runs only: a call's changes are kept or not.
    fn for_calls_only(&self) -> bool {
        matches!(self, Decided::Edit(_) | Decided::Respond(_))
    }
}

/// What waits: a call to run, or the changes a call made.
#[derive(Clone, Copy, PartialEq)]
enum Asking {
    Call,
    Changes,
}

/// Why a decision was not taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecideError {
    #[error("no call waits as number {0} (decided already, or ended)")]
    Gone(u64),
    #[error("the call waiting as number {id} has digest {waiting}, not {sent}: reload the page")]
    Digest {
        id: u64,
        waiting: String,
        sent: String,
    },
    #[error("number {0} waits for its changes to be kept or not: approve or reject them")]
    NotACall(u64),
}

/// A call waiting: what the page shows, and where the decision goes.
struct Waiting {
    shown: Value,
    asking: Asking,
    digest: String,
    decide: oneshot::Sender<Decided>,
}

/// The console's reviewer: the calls waiting, by number.
#[derive(Default)]
pub struct Reviews {
    waiting: Mutex<BTreeMap<u64, Waiting>>,
    next: AtomicU64,
}

impl Reviews {
    /// The calls waiting, oldest first, as the page shows them.
    pub(crate) fn pending(&self) -> Value {
        let waiting = self.lock();
        Value::Array(waiting.values().map(|w| w.shown.clone()).collect())
    }

    /// Decides call number `id`, whose page showed `digest`.
    pub(crate) fn decide(
        &self,
        id: u64,
        digest: &str,
        decided: Decided,
    ) -> Result<(), DecideError> {
        let mut waiting = self.lock();
        let found = waiting.get(&id).ok_or(DecideError::Gone(id))?;
        if found.digest != digest {
            return Err(DecideError::Digest {
                id,
                waiting: found.digest.clone(),
                sent: digest.to_owned(),
            });
        }
        if found.asking == Asking::Changes && decided.for_calls_only() {
            return Err(DecideError::NotACall(id));
        }
        let Some(w) = waiting.remove(&id) else {
            return Err(DecideError::Gone(id));
        };
        w.decide.send(decided).map_err(|_| DecideError::Gone(id))
    }

    /// Puts `shown` on the page and waits for its decision; a call no one decides waits as
    /// long as the call does (its end drops the wait and takes it off the page).
    async fn ask(&self, mut shown: Value, asking: Asking, digest: &str) -> Option<Decided> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        shown["id"] = id.into();
        let (decide, decided) = oneshot::channel();
        self.lock().insert(
            id,
            Waiting {
                shown,
                asking,
                digest: digest.to_owned(),
                decide,
            },
        );
        let off_the_page = OffThePage { reviews: self, id };
        let decided = decided.await.ok();
        drop(off_the_page);
        decided
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Takes a call off the page when its wait ends, decided or dropped.
struct OffThePage<'a> {
    reviews: &'a Reviews,
    id: u64,
}

impl Drop for OffThePage<'_> {
    fn drop(&mut self) {
        self.reviews.lock().remove(&self.id);
    }
}

/// What the page shows of a call waiting.
fn shown(asked: &Asked<'_>, what: &str) -> Value {
    json!({
        "what": what,
        "tool": asked.call.name,
        "call_id": asked.call.id,
        "arguments": asked.call.arguments,
        "digest": asked.digest,
    })
}

const NO_ONE: &str = "the console stopped before anyone decided";

impl Reviewer for Reviews {
    fn review<'a>(&'a self, asked: &'a Asked<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            match self
                .ask(shown(asked, "call"), Asking::Call, &asked.digest)
                .await
            {
                Some(Decided::Approve) => Decision::Approve,
                Some(Decided::Reject(reason)) => Decision::Reject { reason },
                Some(Decided::Edit(arguments)) => Decision::Edit { arguments },
                Some(Decided::Respond(content)) => Decision::Respond { content },
                None => Decision::Reject {
                    reason: NO_ONE.into(),
                },
            }
        })
    }

    fn review_changes<'a>(
        &'a self,
        asked: &'a Asked<'a>,
        changes: &'a ChangesToReview,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let mut shown = shown(asked, "changes");
            shown["changes"] = changes.to_text().into();
            match self.ask(shown, Asking::Changes, &asked.digest).await {
                Some(Decided::Approve) => Verdict::Approve,
                Some(Decided::Reject(reason)) => Verdict::Reject { reason },
                // `decide` takes nothing else for changes.
                Some(Decided::Edit(_) | Decided::Respond(_)) | None => Verdict::Reject {
                    reason: NO_ONE.into(),
                },
            }
        })
    }

    fn name(&self) -> &'static str {
        "console"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_for_another_digest_is_refused_and_the_call_still_waits() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let reviews = Reviews::default();
        runtime.block_on(async {
            let asking = reviews.ask(json!({"tool": "rm"}), Asking::Call, "sha256:aa");
            let deciding = async {
                tokio::task::yield_now().await;
                let refused = reviews.decide(1, "sha256:bb", Decided::Approve);
                assert!(
                    matches!(refused, Err(DecideError::Digest { .. })),
                    "{refused:?}"
                );
                assert_eq!(reviews.pending()[0]["id"], 1, "still waiting");
                reviews
                    .decide(1, "sha256:aa", Decided::Reject("no".into()))
                    .expect("the digest shown");
            };
            let (decided, ()) = tokio::join!(asking, deciding);
            assert!(matches!(decided, Some(Decided::Reject(r)) if r == "no"));
        });
        assert_eq!(reviews.pending(), json!([]), "off the page once decided");
        assert!(matches!(
            reviews.decide(1, "sha256:aa", Decided::Approve),
            Err(DecideError::Gone(1))
        ));
    }

    #[test]
    fn changes_are_kept_or_not_never_edited_or_answered_for() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let reviews = Reviews::default();
        runtime.block_on(async {
            let asking = reviews.ask(json!({"tool": "rm"}), Asking::Changes, "sha256:aa");
            let deciding = async {
                tokio::task::yield_now().await;
                for decided in [Decided::Edit(json!({})), Decided::Respond("done".into())] {
                    let refused = reviews.decide(1, "sha256:aa", decided);
                    assert!(
                        matches!(refused, Err(DecideError::NotACall(1))),
                        "{refused:?}"
                    );
                }
                assert_eq!(reviews.pending()[0]["id"], 1, "still waiting");
                reviews
                    .decide(1, "sha256:aa", Decided::Approve)
                    .expect("changes are approved");
            };
            let (decided, ()) = tokio::join!(asking, deciding);
            assert!(matches!(decided, Some(Decided::Approve)));
        });
    }
}
