//! How things fail, in words both sides share: a helper's set-up steps ([`Failure`], reported
//! to warden as [`Report::Failed`]) and the errors warden answers a call with when its
//! sandbox could not run it.

use crate::plan::Report;
use std::fs::File;
use std::io::Write;
use warden_core::{ErrorKind, ToolError};

/// Exit code of the helper when it could not start the command (the report says why).
pub(crate) const SETUP_FAILED: i32 = 125;

/// A setup step that failed: `unavailable` when this machine lacks the protection.
pub(crate) struct Failure {
    pub(crate) unavailable: bool,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn setup(message: impl Into<String>) -> Self {
        Self {
            unavailable: false,
            message: message.into(),
        }
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self {
            unavailable: true,
            message: message.into(),
        }
    }
}

pub(crate) fn setup(message: impl Into<String>) -> Failure {
    Failure::setup(message)
}

/// Sends `report` to warden, one JSON line; a report warden no longer reads is lost.
pub(crate) fn send(reports: &mut File, report: &Report) {
    if let Ok(mut line) = serde_json::to_vec(report) {
        line.push(b'\n');
        let _ = reports.write_all(&line);
    }
}

/// Reports `f` to warden.
pub(crate) fn fail(reports: &mut File, f: Failure) {
    send(
        reports,
        &Report::Failed {
            unavailable: f.unavailable,
            message: f.message,
        },
    );
}

/// The sandbox could not run the command: this machine lacks what the policy needs.
pub(crate) fn unavailable(message: &str) -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        format!("the host sandbox could not run the command: {message}"),
    )
}
