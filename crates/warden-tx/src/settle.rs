//! A call's (or a `warden exec` program's) changes to its writable roots, settled once its
//! command has ended (see `warden_tx`): committed when the command ended on its own, whatever
//! its exit status — or held for the dispatcher when a person reviews them; discarded when
//! warden ended it (timeout, a limit, a failed sandbox, a cancel: the view is dropped with the
//! call's future), so such a call leaves nothing behind.

use crate::{ChangeSet, SessionView, TxError, View};
use warden_core::changes::{self, discarded_detail};
use warden_core::{
    ChangesToReview, ErrorKind, Exit, Finished, HeldChanges, Output, PendingChanges, Policy,
    PolicyError, ToolError,
};

/// Why a session's commands' changes cannot be reviewed.
pub const SESSION_UNREVIEWED: &str = "a session's commands are committed as each ends, while \
    its shell lives on; review of changes needs a call of its own for each command (drop \
    `session = true`)";

/// Why a warden without a transaction store writes in place.
pub const NO_STORE: &str = "this warden keeps no transaction store, so its calls write in place";

/// Refuses `[review] changes = true` in `policy` when its calls write in place, for the
/// reason `in_place` gives.
pub fn refuse_review_in_place(policy: &Policy, in_place: Option<&str>) -> Result<(), PolicyError> {
    let reviewed = policy.review_changes
        || policy
            .functions
            .values()
            .any(|f| f.review_changes == Some(true));
    match in_place {
        Some(why) if reviewed => Err(PolicyError::new(
            &policy.path,
            None,
            format!("review of changes (`[review] changes = true`) cannot be honoured: {why}"),
        )),
        _ => Ok(()),
    }
}

/// Whose view is settled: warden's own id of the call (or program) and its tool, and the
/// bytes its changes and what they replace may hold (`[limits] changes`).
#[derive(Debug, Clone, Copy)]
pub struct Settling<'a> {
    pub call: &'a str,
    pub tool: &'a str,
    pub limit: u64,
}

/// The changes an answer lists; the rest are counted (`count`) and in the record.
pub const SHOWN: usize = 100;

/// The bytes of diff a reviewer of a call's changes is shown.
const DIFF_BYTES: usize = 64 * 1024;

/// What a call with a view answers, once its changes are committed, held in `hold` or
/// discarded. `gone`: every process of the call has ended, so what the view holds is final.
pub fn settle(
    view: Option<View>,
    gone: bool,
    whose: Settling<'_>,
    hold: Option<&HeldChanges>,
    answered: Result<Output, ToolError>,
) -> Result<Output, ToolError> {
    let Some(view) = view else {
        return answered;
    };
    let on_its_own = changes::ended_on_its_own(&answered);
    match settled(view, on_its_own, gone, whose, hold) {
        Settled::Discarded => answered.map_err(changes::discarded),
        Settled::Lingered => Err(lingered("call")),
        Settled::Kept(shown) => changes::with_changes(answered, shown),
        Settled::Refused(why) => Err(changes::refused(why, answered)),
    }
}

/// How a program of `warden exec` with a view ended, once its changes are committed or
/// discarded (see [`Exit::on_its_own`]); as [`settle`] for a call. No person reviews a
/// program's changes: a policy that asks for it runs no program.
pub fn settle_program(
    view: Option<View>,
    gone: bool,
    whose: Settling<'_>,
    ended: Result<Exit, ToolError>,
) -> Result<Finished, ToolError> {
    let Some(view) = view else {
        return ended.map(|exit| Finished::exited(whose.call, exit));
    };
    let exit = match ended {
        Ok(exit) => exit,
        Err(e) => {
            drop(view);
            return Err(changes::discarded(e));
        }
    };
    let changes = match settled(view, exit.on_its_own(), gone, whose, None) {
        Settled::Discarded => discarded_detail(),
        Settled::Lingered => return Err(lingered("program")),
        Settled::Kept(shown) => shown,
        Settled::Refused(why) => {
            let mut e = ToolError::new(
                why.kind,
                format!(
                    "{}\nThe program exited with status {}. {}",
                    why.message,
                    exit.status(),
                    changes::DISCARDED
                ),
            );
            e.set_detail("changes", discarded_detail());
            return Err(e);
        }
    };
    Ok(Finished {
        call_id: whose.call.to_owned(),
        exit,
        changes: Some(changes),
    })
}

/// What command `call` of a session with a view answers, once what it changed (with what the
/// session's background processes changed since the last answer) is committed, or put back
/// as the roots have it: as [`settle`] for a call (`limit`: `[limits] changes`), but the
/// view lives on with the session.
/// `live`: the session's shell lives on (else nothing need be put back: its view goes with
/// it). The second value is false when the view could not be settled: the session must
/// start afresh, and the answer says so.
pub fn settle_command(
    view: &mut SessionView,
    live: bool,
    call: &str,
    limit: u64,
    answered: Result<Output, ToolError>,
) -> (Result<Output, ToolError>, bool) {
    let on_its_own = changes::ended_on_its_own(&answered);
    let read = view.now().and_then(|now| Ok((now, view.changes()?)));
    let (now, changes) = match read {
        Ok(read) => read,
        Err(e) => {
            let e = refusal(&e);
            let answered = match on_its_own {
                true => Err(changes::refused(e, answered)),
                false => answered.map_err(changes::discarded),
            };
            return (answered.map_err(reset), false);
        }
    };
    let committed = match on_its_own {
        true => Some(view.commit(call, &changes, limit)),
        false => None,
    };
    let answered = match committed {
        Some(Ok(())) => {
            view.settled(now);
            return (changes::with_changes(answered, shown(&changes)), true);
        }
        Some(Err(e)) => Err(changes::refused(refusal(&e), answered)),
        None => answered.map_err(changes::discarded),
    };
    if !live {
        return (answered, true);
    }
    match view.revert(&changes) {
        Ok(()) => {
            view.settled(now);
            (answered, true)
        }
        Err(e) => {
            tracing::warn!("a session's view could not be put back: {e}");
            (answered.map_err(reset), false)
        }
    }
}

/// What a session's command answers once the changes staged in `view` from a copy of its
/// roots ([`View::stage`]: a container on an engine elsewhere) are committed, as call
/// `whose.call`. `view`: None for a command warden ended (nothing of it is read back, and it
/// is discarded), or why the copy could not be read back and staged. The second value is
/// false when the changes were not applied: the copy then holds what the roots do not, and
/// the session must start afresh (the answer says so).
pub fn settle_staged(
    view: Option<Result<View, ToolError>>,
    whose: Settling<'_>,
    answered: Result<Output, ToolError>,
) -> (Result<Output, ToolError>, bool) {
    let view = match view {
        Some(Ok(view)) if changes::ended_on_its_own(&answered) => view,
        Some(Err(why)) => {
            let refused = changes::refused(why, answered);
            return (Err(reset(changes::discarded(refused))), false);
        }
        _ => return (answered.map_err(|e| reset(changes::discarded(e))), false),
    };
    let committed = view.changes().and_then(|changes| {
        view.commit(whose.call, whose.tool, &changes, whose.limit)
            .map(|()| changes)
    });
    match committed {
        Ok(changes) => (changes::with_changes(answered, shown(&changes)), true),
        Err(e) => (Err(reset(changes::refused(refusal(&e), answered))), false),
    }
}

/// A command's answer, saying that its session's view could not be settled.
fn reset(mut e: ToolError) -> ToolError {
    e.message.push_str(
        "\nThe session's view of its read-write roots could not be settled: the session was \
         reset, and its next command starts in a fresh sandbox.",
    );
    e
}

/// What became of a view's changes.
enum Settled {
    /// Discarded: warden ended the call.
    Discarded,
    /// Discarded: processes of the call outlived it, so its view was not final.
    Lingered,
    /// Committed, or held for a person's review: the change set as an answer lists it.
    Kept(serde_json::Value),
    /// Not applied, for this reason.
    Refused(ToolError),
}

/// Settles `view` of a call that ended on its own or not (`on_its_own`): see [`settle`].
fn settled(
    view: View,
    on_its_own: bool,
    gone: bool,
    whose: Settling<'_>,
    hold: Option<&HeldChanges>,
) -> Settled {
    if !on_its_own {
        return Settled::Discarded;
    }
    if !gone {
        return Settled::Lingered;
    }
    let changes = match view.changes() {
        Ok(changes) => changes,
        Err(e) => return Settled::Refused(refusal(&e)),
    };
    let shown = shown(&changes);
    match hold {
        Some(hold) if !changes.changes.is_empty() => {
            let diff = view.diff(&changes, DIFF_BYTES);
            hold.put(Box::new(Pending {
                view,
                changes,
                call: whose.call.to_owned(),
                tool: whose.tool.to_owned(),
                limit: whose.limit,
                shown: ChangesToReview {
                    changes: shown.clone(),
                    diff,
                },
            }));
            Settled::Kept(shown)
        }
        _ => match view.commit(whose.call, whose.tool, &changes, whose.limit) {
            Ok(()) => Settled::Kept(shown),
            Err(e) => Settled::Refused(refusal(&e)),
        },
    }
}

/// The answer of a call (or a program) whose processes outlived it.
fn lingered(what: &str) -> ToolError {
    let e = ToolError::internal(format!(
        "the {what}'s processes did not end when it did; its changes were discarded"
    ));
    e.with_detail("changes", discarded_detail())
}

/// The change set as an answer lists it, with its digest.
fn shown(changes: &ChangeSet) -> serde_json::Value {
    let mut shown = changes.to_json(SHOWN);
    shown["digest"] = changes.digest().into();
    shown
}

/// A call's changes held for a reviewer: committed on approval, discarded when dropped.
struct Pending {
    view: View,
    changes: ChangeSet,
    call: String,
    tool: String,
    limit: u64,
    shown: ChangesToReview,
}

impl PendingChanges for Pending {
    fn shown(&self) -> &ChangesToReview {
        &self.shown
    }

    fn commit(self: Box<Self>) -> Result<(), ToolError> {
        let Pending {
            view,
            changes,
            call,
            tool,
            limit,
            ..
        } = *self;
        view.commit(&call, &tool, &changes, limit)
            .map_err(|e| refusal(&e))
    }
}

/// Why a call's changes were not applied, as the kind of error the model acts on.
fn refusal(e: &TxError) -> ToolError {
    let kind = match e {
        TxError::Conflict { .. } => ErrorKind::Conflict,
        TxError::TooLarge { .. } => ErrorKind::LimitExceeded,
        TxError::Special(_) => ErrorKind::Denied,
        _ => ErrorKind::Internal,
    };
    ToolError::new(kind, e.to_string())
}
