//! `warden log verify`: the call log's chain and seals checked (see `warden_ledger`); `warden
//! log export`: its lines as records a SIEM takes.

use anyhow::{Context as _, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warden::Warden;
use warden_core::shown::Escaped;
use warden_ledger::{Link, PublicKey, SealKey, Verified};

/// Verifies the call log with its rotated files against the pinned key (`key`, else the home
/// key's public half) and an exported `head`; exit 1 names the first problem.
pub(crate) fn verify(
    ctx: &Warden,
    key: Option<&Path>,
    head: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let (pinned, from) = match key {
        Some(path) => (Some(PublicKey::read(path)?), Some(path.to_owned())),
        None => {
            let beside = SealKey::public_path(&ctx.seals.key);
            if beside.exists() {
                (Some(PublicKey::read(&beside)?), Some(beside))
            } else {
                (None, None)
            }
        }
    };
    let head = match head {
        Some(text) => Some(Link::parse(text).with_context(|| {
            format!("--head {text}: a head is SEQ:HASH, as the syslog line of a seal shows it")
        })?),
        None => None,
    };
    let files = ctx.call_log_rotation.files(&ctx.call_log);
    let v = warden_ledger::verify(&files, pinned.as_ref(), head.as_ref())?;
    if json {
        outln!("{}", report(&v, &files, from.as_deref()));
    } else {
        say(&v, &files, from.as_deref(), key.is_some());
    }
    Ok(if v.problem.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints each line of the call log and its rotated files as an OCSF record (none for a line
/// that records no event); a line that cannot be exported is named on stderr, the export
/// goes on, and it exits 1.
pub(crate) fn export_ocsf(ctx: &Warden) -> Result<ExitCode> {
    use std::io::{BufRead as _, Write as _};
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = 0u64;
    for file in ctx.call_log_rotation.files(&ctx.call_log) {
        let reader = match std::fs::File::open(&file) {
            Ok(f) => std::io::BufReader::new(f),
            // A log not written yet has nothing to export.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
        };
        for (n, line) in reader.split(b'\n').enumerate() {
            let line = line.with_context(|| format!("cannot read {}", file.display()))?;
            let record = std::str::from_utf8(&line)
                .map_err(|_| "not UTF-8 text".to_string())
                .and_then(|text| warden_ledger::ocsf::to_ocsf(text).map_err(|e| e.to_string()));
            match record {
                Ok(Some(record)) => {
                    if writeln!(out, "{record}").is_err() {
                        // The reader went away (`| head`): nothing more to say to it.
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                Ok(None) => {}
                Err(why) => {
                    failed += 1;
                    let at = format!("{}:{}", file.display(), n + 1);
                    eprintln!(
                        "warden: {}: cannot export this line: {}",
                        Escaped(&at),
                        Escaped(&why)
                    );
                }
            }
        }
    }
    if out.flush().is_err() {
        return Ok(ExitCode::SUCCESS);
    }
    if failed > 0 {
        eprintln!("warden: {failed} line(s) of the call log were not exported (named above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn report(v: &Verified, files: &[PathBuf], key: Option<&Path>) -> serde_json::Value {
    json!({
        "ok": v.problem.is_none(),
        "files": files,
        "records": v.records,
        "unchained": v.unchained,
        "seals": v.seals,
        "keys": v.keys,
        "pinned_key": key,
        "unsigned": v.unsigned,
        "head": v.head.map(|h| h.to_text()),
        "problem": v.problem.as_ref().map(|p| json!({
            "file": p.file, "line": p.line, "call_id": p.call_id, "what": p.what,
        })),
    })
}

fn say(v: &Verified, files: &[PathBuf], key: Option<&Path>, pinned: bool) {
    if let Some(p) = &v.problem {
        outln!("broken: {}", Escaped(p));
        return;
    }
    outln!(
        "whole: {} record(s) in {} file(s), {} seal(s)",
        v.records,
        files.len(),
        v.seals
    );
    if v.unchained > 0 {
        outln!(
            "  {} line(s) before the chain began (written by a warden that did not chain)",
            v.unchained
        );
    }
    match key {
        Some(path) if pinned => outln!("  seals checked against {}", path.display()),
        Some(path) => outln!(
            "  seals checked against {}, beside the key in warden's home: pin a copy kept \
             elsewhere with --key",
            path.display()
        ),
        None => outln!("  no key to check the seals against: each holds under its own key"),
    }
    if v.unsigned > 0 {
        outln!(
            "  {} record(s) after the last seal are unsigned",
            v.unsigned
        );
    }
    if let Some(head) = v.head {
        outln!("  head {}", head.to_text());
    }
    if files.iter().all(|f| !f.exists()) {
        outln!("  (no call log yet)");
    }
}
