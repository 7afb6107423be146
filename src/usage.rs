//! `warden audit --usage`: what the call log says tools did, and the grants they never
//! needed. The report is the library's ([`UsageReport`]); this prints it.

use anyhow::{Result, bail};
use std::process::ExitCode;
use warden::Warden;
use warden_core::shown::{Escaped, escape_json};
use warden_core::{ByteSize, HumanDuration};
use warden_tx::ToolWrites;
use warden_usage::{UsageError, UsageReport};

/// `warden audit --usage`: the usage report of the call log (of the last `since`), as JSON
/// or as text.
pub(crate) fn usage(ctx: &Warden, since: Option<HumanDuration>, json: bool) -> Result<ExitCode> {
    let toolbox = ctx.load()?;
    let files = ctx.call_log_rotation.files(&ctx.call_log);
    let report = match UsageReport::read(&files, since.map(|s| s.0), &toolbox) {
        Ok(report) => report,
        Err(UsageError::Missing(path)) => bail!(
            "there is no call log at {}: warden writes its calls to HOME/calls.jsonl unless \
             --call-log (or WARDEN_CALL_LOG) names another file; point --call-log at the log \
             to read",
            Escaped(path.display())
        ),
        Err(e) => return Err(e.into()),
    };
    let writes = ctx.transactions.writes(since.map(|s| s.0))?;
    if json {
        let mut out = serde_json::to_value(&report)?;
        out["writes"] = serde_json::to_value(&writes)?;
        outln!("{}", escape_json(&serde_json::to_string_pretty(&out)?));
        return Ok(ExitCode::SUCCESS);
    }
    let window = since.map_or("in the whole log".to_owned(), |s| {
        format!("in the last {s}")
    });
    outln!(
        "{} calls {window} ({})",
        report.calls,
        Escaped(ctx.call_log.display())
    );
    if report.unreadable_lines > 0 {
        outln!(
            "  {} lines that are not records passed over",
            report.unreadable_lines
        );
    }
    outln!();
    tools_table(&report);
    outln!();
    written(&writes);
    grants(&report);
    Ok(ExitCode::SUCCESS)
}

/// What tools wrote to their read-write roots, from the transactions' records.
fn written(writes: &[ToolWrites]) {
    if writes.is_empty() {
        return;
    }
    outln!("written to read-write roots (`warden undo --list` lists each call):");
    for w in writes {
        outln!(
            "  {}: {} calls ({} undone), {} added, {} modified, {} removed, {} paths",
            Escaped(&w.tool),
            w.calls,
            w.undone,
            w.added,
            w.modified,
            w.removed,
            w.distinct_paths
        );
        for path in &w.paths {
            outln!("    {}", Escaped(path.display()));
        }
    }
    outln!();
}

/// A line for each tool: its calls, their times, usage and errors.
fn tools_table(report: &UsageReport) {
    outln!(
        "{:<24} {:>6} {:>6} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9}  errors",
        "tool",
        "calls",
        "execs",
        "p50 ms",
        "p95 ms",
        "cpu ms",
        "peak mem",
        "out",
        "in"
    );
    for t in &report.tools {
        let errors: Vec<String> = t
            .errors
            .iter()
            .map(|(k, n)| format!("{} {n}", Escaped(k)))
            .collect();
        outln!(
            "{:<24} {:>6} {:>6} {:>9.1} {:>9.1} {:>10} {:>9} {:>9} {:>9}  {}",
            Escaped(&t.tool),
            t.calls,
            t.execs,
            t.wall_ms_p50,
            t.wall_ms_p95,
            t.cpu_ms.map_or("-".into(), |c| format!("{c:.1}")),
            t.peak_memory_bytes.map_or("-".into(), size),
            size(t.net_bytes_out),
            size(t.net_bytes_in),
            if errors.is_empty() {
                "none".into()
            } else {
                errors.join(", ")
            },
        );
    }
}

/// What the report says of the grants: those never used, narrower ones to write, refusals
/// that recur, and its notes.
fn grants(report: &UsageReport) {
    if report.unused_grants.is_empty() {
        outln!("every grant was used in the window");
    } else {
        outln!("grants never used in the window (remove the line):");
        for g in &report.unused_grants {
            outln!(
                "  {}:{}  {} {}: {}",
                Escaped(g.policy.display()),
                g.line,
                g.key,
                Escaped(&g.grant),
                Escaped(&g.why)
            );
        }
    }
    for s in &report.suggestions {
        outln!();
        outln!("narrower grants for {}:", Escaped(s.policy.display()));
        for line in s.grants.lines() {
            outln!("  {}", Escaped(line));
        }
    }
    if !report.refused_repeatedly.is_empty() {
        outln!();
        outln!("refused again and again (a tool asking for what it lacks):");
        for r in &report.refused_repeatedly {
            outln!(
                "  {} {} refused {} times: {}",
                Escaped(&r.tool),
                Escaped(&r.destination),
                r.times,
                Escaped(&r.reason)
            );
        }
    }
    for note in &report.notes {
        outln!();
        outln!("note: {}", Escaped(note));
    }
}

/// Bytes as the audit writes sizes, in whole units where they fit.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 10 << 20 => format!("{}MiB", b >> 20),
        b if b >= 10 << 10 => format!("{}KiB", b >> 10),
        b => ByteSize(b).to_string(),
    }
}
