//! `warden undo` and `warden rewind`: what calls committed to their read-write roots, put back
//! (see `warden_tx`); `warden snapshot`: the snapshots of sessions' sandboxes (see
//! `warden_snapshot`). Never a tool a model can call: a person, or the program that runs the
//! agent, decides.

use anyhow::Result;
use std::process::ExitCode;
use warden::Warden;
use warden_core::shown::Escaped;
use warden_tx::{CallRecord, ChangeKind, State};

/// Puts back what call `call_id` changed.
pub(crate) fn undo(ctx: &Warden, call_id: &str) -> Result<ExitCode> {
    let record = ctx.transactions.undo(call_id)?;
    outln!("undid {}", summary(&record));
    Ok(ExitCode::SUCCESS)
}

/// Undoes every call committed after `call_id`, newest first.
pub(crate) fn rewind(ctx: &Warden, call_id: &str) -> Result<ExitCode> {
    let undone = ctx.transactions.rewind(call_id)?;
    if undone.is_empty() {
        outln!("no call committed after {call_id} is left to undo");
    }
    for record in &undone {
        outln!("undid {}", summary(record));
    }
    Ok(ExitCode::SUCCESS)
}

/// Lists the calls that changed roots, oldest first, with what each can still become.
pub(crate) fn list(ctx: &Warden) -> Result<ExitCode> {
    let records = ctx.transactions.records()?;
    if records.is_empty() {
        outln!("no call has changed a read-write root in this warden home");
    }
    for record in &records {
        let state = match record.state {
            State::Committed => "committed (can be undone)".to_owned(),
            State::Committing => "being committed".to_owned(),
            State::Undone => "undone".to_owned(),
            State::Dropped => format!(
                "committed; pre-images dropped ({})",
                record.dropped.as_deref().unwrap_or("the store's bounds")
            ),
        };
        outln!("{}: {state}", summary(record));
    }
    Ok(ExitCode::SUCCESS)
}

/// Lists the snapshots kept in this home, oldest first.
pub(crate) fn snapshots(ctx: &Warden) -> Result<ExitCode> {
    let all = ctx.snapshots.store().list()?;
    if all.is_empty() {
        outln!("no snapshot is kept in this warden home");
    }
    for meta in &all {
        outln!(
            "{} ({}): {} bytes of /tmp, in {}, taken at {} ms",
            meta.id,
            Escaped(&meta.tool),
            meta.bytes,
            Escaped(&meta.shell.cwd),
            meta.created_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes snapshot `id`.
pub(crate) fn delete_snapshot(ctx: &Warden, id: &str) -> Result<ExitCode> {
    ctx.snapshots.store().delete(id)?;
    outln!("deleted {id}");
    Ok(ExitCode::SUCCESS)
}

/// `CALL_ID (TOOL): 2 added, 1 modified, 0 removed in ROOT`.
fn summary(record: &CallRecord) -> String {
    let count = |kind| record.count(kind);
    let roots: Vec<String> = record
        .roots
        .iter()
        .map(|r| r.display().to_string())
        .collect();
    format!(
        "{} ({}): {} added, {} modified, {} removed in {}",
        record.call_id,
        Escaped(&record.tool),
        count(ChangeKind::Added),
        count(ChangeKind::Modified),
        count(ChangeKind::Removed),
        Escaped(&roots.join(", "))
    )
}
