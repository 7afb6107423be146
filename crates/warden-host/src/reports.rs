//! A helper's reports as warden reads them (one JSON line each, see [`crate::plan::Report`]),
//! and how long warden waits for a helper to end: shared by session shells and the shells
//! beside them.

use crate::plan::Report;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe::Receiver;

/// How long closing waits for the helper to exit once its namespace is killed.
pub(crate) const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The next report a helper sent on `reports`, `None` at the end of the pipe.
pub(crate) async fn next_report(reports: &mut BufReader<Receiver>) -> Option<Report> {
    loop {
        let mut line = String::new();
        match reports.read_line(&mut line).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {
                if let Ok(report) = serde_json::from_str(line.trim_end()) {
                    return Some(report);
                }
            }
        }
    }
}
