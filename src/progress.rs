//! What `warden agent` shows while it works: concise progress on stderr, or every event as a
//! JSON line on stdout (`--json`).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use warden_agent::{Event, EventSink, Line, Outcome, Run, StopReason};
use warden_core::shown::{Escaped, escape, escape_json, escape_lines};

/// Names the run and its transcript before anything else happens.
pub(crate) fn announce(run: &Run, json: bool) {
    if json {
        let line = serde_json::json!({
            "type": "transcript",
            "run_id": run.id(),
            "path": run.path().display().to_string(),
        });
        outln!("{}", escape_json(&line.to_string()));
    } else {
        eprintln!("run {}  (transcript {})", run.id(), run.path().display());
    }
}

/// Where the run's events go as they are written.
pub(crate) fn sink(json: bool) -> EventSink {
    if json {
        return Arc::new(|line: &Line| {
            if let Ok(text) = serde_json::to_string(line) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", escape_json(&text));
                let _ = out.flush();
            }
        });
    }
    let step = Arc::new(AtomicU32::new(0));
    Arc::new(move |line: &Line| {
        if let Some(text) = describe(&line.event, &step) {
            eprintln!("{text}");
        }
    })
}

fn describe(event: &Event, step: &AtomicU32) -> Option<String> {
    match event {
        Event::Run {
            model,
            base_url,
            tools,
            ..
        } => Some(format!(
            "model {} at {}, {} tools",
            Escaped(model),
            Escaped(base_url),
            tools.len()
        )),
        Event::Resume { model, .. } => Some(format!("resuming with model {}", Escaped(model))),
        Event::ModelCall {
            step: s,
            error,
            retry_in_ms,
            ..
        } => {
            step.store(*s, Ordering::Relaxed);
            let error = error.as_ref()?;
            Some(match retry_in_ms {
                Some(ms) => format!(
                    "  model: {}; retrying in {:.1} s",
                    short(error, 120),
                    *ms as f64 / 1000.0
                ),
                None => format!("  model: {}", short(error, 200)),
            })
        }
        Event::Message { message } if message["role"] == "assistant" => {
            let calls = message["tool_calls"].as_array().map_or(0, Vec::len);
            if calls == 0 {
                return None;
            }
            let mut text = format!(
                "step {}: {calls} tool call{}",
                step.load(Ordering::Relaxed),
                if calls == 1 { "" } else { "s" }
            );
            if let Some(said) = message["content"].as_str().filter(|s| !s.trim().is_empty()) {
                text.push_str(&format!("\n  model says: {}", short(said, 120)));
            }
            Some(text)
        }
        Event::Decision {
            call_id,
            tool,
            decision,
            source,
        } => {
            let what = serde_json::to_value(decision).ok()?;
            Some(format!(
                "  review {} [{}]: {} ({})",
                Escaped(tool),
                Escaped(call_id),
                what["decision"].as_str().unwrap_or("?"),
                Escaped(source)
            ))
        }
        Event::Pending {
            call_id,
            tool,
            arguments,
        } => Some(format!(
            "  ⏸ {} [{}] awaits a decision: {}",
            Escaped(tool),
            Escaped(call_id),
            short(arguments, 120)
        )),
        Event::Answered { message } => {
            let tool = Escaped(message["name"].as_str().unwrap_or("?"));
            let id = Escaped(message["tool_call_id"].as_str().unwrap_or("?"));
            Some(match message["error"]["kind"].as_str() {
                None => format!(
                    "  ✓ {tool} [{id}] {}",
                    short(message["content"].as_str().unwrap_or_default(), 80)
                ),
                Some(kind) => format!(
                    "  ✗ {tool} [{id}] {}: {}",
                    Escaped(kind),
                    short(
                        message["error"]["message"].as_str().unwrap_or_default(),
                        100
                    )
                ),
            })
        }
        _ => None,
    }
}

/// The stop, on stderr, and the model's answer on stdout.
pub(crate) fn finish(outcome: &Outcome, resume: &str) {
    let t = &outcome.totals;
    eprintln!(
        "stopped: {} ({} steps, {} model calls, {} tool calls, {:.1} s)",
        // A provider's error is quoted in it.
        Escaped(&outcome.reason),
        t.steps,
        t.model_calls,
        t.tool_calls,
        t.elapsed_ms as f64 / 1000.0
    );
    eprintln!("tool calls used: {}", t.usage);
    match &outcome.reason {
        StopReason::Answered => {}
        StopReason::AwaitingReview { .. } => eprintln!(
            "decide those calls in the decisions file (keyed by their ids), then: {resume} --decisions FILE"
        ),
        StopReason::ProviderError { .. } | StopReason::ModelUnavailable { .. } => {
            eprintln!("to try again: {resume}")
        }
        _ => eprintln!("to carry on: {resume} (raise the limit that stopped it)"),
    }
    if let Some(answer) = &outcome.answer {
        outln!("{}", escape_lines(answer));
    }
}

/// One line of at most `max` characters, escaped.
fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    let cut = line.char_indices().nth(max).map(|(i, _)| i);
    match cut {
        Some(i) => format!("{}…", escape(&line[..i])),
        None if line.len() < text.trim_end().len() => format!("{}…", escape(line)),
        None => escape(line).into_owned(),
    }
}
