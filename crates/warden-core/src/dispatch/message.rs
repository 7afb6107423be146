//! What a call's message carries besides the executor's answer: the output capped, what the
//! call cost and exercised, the gate's refusals, and every secret value of the tool redacted.

use crate::executor::{Denial, Output, Sample, Usage};
use crate::limits::cap_text;
use crate::message::{ToolCall, ToolMessage};
use crate::redact::Secrets;
use crate::toolbox::Tool;
use serde_json::{Value, json};
use std::time::Duration;

/// What the call cost goes with every answer: `usage` in the artifact, or in an error's
/// details: wall time, what the executor measured, and fuel when metered.
pub(super) fn attach_usage(m: &mut ToolMessage, took: Duration, usage: Usage, fuel: Option<u64>) {
    let mut value = serde_json::to_value(usage).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut value {
        map.insert("wall_ms".into(), json!(crate::units::millis(took)));
        if let Some(fuel) = fuel {
            map.insert("fuel".into(), fuel.into());
        }
    }
    set_detail(m, "usage", value);
}

/// The keys a sample of what a call exercised goes under in its answer: the list kept, and
/// every occurrence counted (one root opened five times is one root and five uses).
pub(super) struct Exercised {
    list: &'static str,
    count: &'static str,
}

/// The destinations the call reached.
pub(super) const REACHED: Exercised = Exercised {
    list: "reached",
    count: "reached_count",
};
/// The granted roots the call opened, and its uses of them.
pub(super) const ROOTS_OPENED: Exercised = Exercised {
    list: "roots_opened",
    count: "root_uses",
};
/// The hosts the gate set a credential for.
pub(super) const CREDENTIALS_USED: Exercised = Exercised {
    list: "credentials_used",
    count: "credentials_used_count",
};

/// What the call exercised goes with its answer too, when it did any.
pub(super) fn attach_exercised<T: serde::Serialize>(
    m: &mut ToolMessage,
    keys: &Exercised,
    sample: &Sample<T>,
) {
    if sample.total == 0 {
        return;
    }
    set_detail(
        m,
        keys.list,
        serde_json::to_value(&sample.kept).unwrap_or_default(),
    );
    set_detail(m, keys.count, sample.total.into());
}

/// Sets `key` in an error's details, or in a success's artifact.
pub(super) fn set_detail(m: &mut ToolMessage, key: &str, value: Value) {
    match &mut m.error {
        Some(e) => e.set_detail(key, value),
        None => {
            if let Value::Object(map) = m.artifact.get_or_insert_with(|| json!({})) {
                map.insert(key.into(), value);
            }
        }
    }
}

/// Refusals are news to the model too: it should stop asking for what the policy forbids.
pub(super) fn attach_denials(m: &mut ToolMessage, denied: &Sample<Denial>) {
    let (count, denied) = (denied.total, &denied.kept);
    if count == 0 {
        return;
    }
    let list = serde_json::to_value(denied).unwrap_or_default();
    match &mut m.error {
        Some(e) => {
            // The tool's own words may not say what was refused; warden's do.
            if let Some(first) = denied.first() {
                let more = match count {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                let note = format!(" [warden refused {}{more}]", refusal(first));
                e.message.push_str(&note);
                m.content.push_str(&note);
            }
            e.set_detail("denied", list);
            e.set_detail("denied_count", count);
        }
        None => {
            let artifact = m.artifact.get_or_insert_with(|| json!({}));
            if let Value::Object(map) = artifact {
                map.insert("denied".into(), list);
                map.insert("denied_count".into(), count.into());
            }
        }
    }
}

/// A refusal as the note on an error says it: the destination and why, naming the
/// destination once where the reason begins with it (`http://10.0.0.1:80: not granted…`,
/// not `http://10.0.0.1:80: 10.0.0.1:80 is not granted…`).
fn refusal(d: &Denial) -> String {
    // `http://host:port`, `connect host:port`, `tcp 10.0.0.1:22`: the address is the last part.
    let address = d.destination.rsplit(['/', ' ']).next().unwrap_or_default();
    let why = d
        .reason
        .strip_prefix(address)
        .and_then(|rest| rest.strip_prefix(" is "))
        .filter(|_| !address.is_empty())
        .unwrap_or(&d.reason);
    format!("{}: {why}", d.destination)
}

/// The message of an executor's answer: its text within the tool's output limit, and the
/// rest (the structured result, the streams, the executor's details) in the artifact.
pub(super) fn success(call: &ToolCall, tool: &Tool, output: Output) -> ToolMessage {
    let content = cap_text(&output.content, tool.limits.output);
    let truncated = content.len() != output.content.len();
    let mut artifact = serde_json::Map::new();
    match output.structured {
        // The structured copy would carry everything the cap just cut.
        Some(_) if truncated => {
            artifact.insert("truncated".into(), true.into());
        }
        Some(s) => {
            artifact.insert("result".into(), s);
        }
        None => {}
    }
    if let Some(s) = output.stdout.filter(|s| !s.is_empty()) {
        artifact.insert("stdout".into(), s.into());
    }
    if let Some(s) = output.stderr.filter(|s| !s.is_empty()) {
        artifact.insert("stderr".into(), s.into());
    }
    artifact.extend(output.details);
    let artifact = (!artifact.is_empty()).then_some(Value::Object(artifact));
    ToolMessage::success(call, content, artifact)
}

/// Takes every one of `secrets` out of `m`.
pub(super) fn redact_message(secrets: &Secrets, m: &mut ToolMessage) {
    if secrets.is_empty() {
        return;
    }
    m.content = secrets.redact(&m.content);
    if let Some(e) = &mut m.error {
        e.message = secrets.redact(&e.message);
        secrets.redact_value(&mut e.details);
    }
    if let Some(a) = &mut m.artifact {
        secrets.redact_value(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_destination_once() {
        let said = |destination: &str, reason: &str| {
            refusal(&Denial {
                destination: destination.into(),
                reason: reason.into(),
            })
        };
        assert_eq!(
            said(
                "http://127.0.0.1:8080",
                "127.0.0.1:8080 is not granted by the tool's policy"
            ),
            "http://127.0.0.1:8080: not granted by the tool's policy"
        );
        assert_eq!(
            said("connect a.test:443", "a.test:443 is not granted"),
            "connect a.test:443: not granted"
        );
        // A reason that does not begin with the address is kept whole.
        let other = "a.test resolves to 10.0.0.1, a private address";
        assert_eq!(
            said("http://a.test:80", other),
            format!("http://a.test:80: {other}")
        );
    }
}
