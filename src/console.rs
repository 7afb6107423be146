//! `warden console`: the console's data from this warden's toolbox, call log and ledger (see
//! `warden_console`), served on loopback until stopped.

use anyhow::{Context as _, Result};
use serde_json::{Value, json};
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use warden::Warden;

/// The most of the call log one answer reads: a console opened on a long log starts from its
/// last records.
const READ_AT_MOST: u64 = 1 << 20;

/// The console's data, from this warden's toolbox, call log and home.
pub(crate) struct Data(pub Arc<Warden>);

impl warden_console::Source for Data {
    fn tools(&self) -> Value {
        // The audit probes sandboxes on a runtime of its own: on a thread that is in none.
        let audit = std::thread::scope(|s| {
            s.spawn(|| crate::audit::audit_json(&self.0))
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the audit failed")))
        });
        audit.unwrap_or_else(|e| {
            json!({ "policies": [], "not_loaded": [{
            "policy": self.0.toolbox.display().to_string(), "error": format!("{e:#}") }] })
        })
    }

    fn calls(&self, after: u64) -> (Vec<Value>, u64) {
        read_calls(&self.0.call_log, after).unwrap_or((Vec::new(), after))
    }

    fn ledger(&self) -> Value {
        let files = self.0.call_log_rotation.files(&self.0.call_log);
        let key = warden_ledger::SealKey::public_path(&self.0.seals.key);
        let pinned = warden_ledger::PublicKey::read(&key).ok();
        match warden_ledger::verify(&files, pinned.as_ref(), None) {
            Ok(v) => crate::ledger::report(&v, &files, pinned.is_some().then_some(&*key)),
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        }
    }
}

/// The whole lines of the call log after byte `after` (from its start, or its last
/// [`READ_AT_MOST`] bytes, when `after` is past its end: it was rotated), and where they end.
fn read_calls(path: &std::path::Path, after: u64) -> std::io::Result<(Vec<Value>, u64)> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut from = if after > len { 0 } else { after };
    let skip_partial = len - from > READ_AT_MOST;
    if skip_partial {
        from = len - READ_AT_MOST;
    }
    file.seek(SeekFrom::Start(from))?;
    let mut text = Vec::new();
    file.take(READ_AT_MOST).read_to_end(&mut text)?;
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut lines = text[..whole].split(|&b| b == b'\n');
    if skip_partial {
        // Begun mid-line: the first is a piece.
        lines.next();
    }
    let records = lines
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    Ok((records, from + whole as u64))
}

/// Serves the console at `address` until stopped, its URL on stderr.
pub(crate) fn console(ctx: Warden, address: SocketAddr) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let console = warden_console::Console::bind(address)
            .await
            .context("starting the console")?;
        eprintln!("warden console: {}", console.url());
        console.serve(Arc::new(Data(Arc::new(ctx))), None).await;
        Ok(ExitCode::SUCCESS)
    })
}
