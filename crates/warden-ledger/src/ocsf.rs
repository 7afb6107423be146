//! The call log as OCSF records, for a SIEM: [`to_ocsf`] maps one line to one record of the
//! Open Cybersecurity Schema Framework, version [`OCSF_VERSION`].
//!
//! | line                  | OCSF class (`class_uid`)        | activity               |
//! |-----------------------|---------------------------------|------------------------|
//! | `call`                | API Activity (6003)             | 99 Other, `Call`       |
//! | `call`, `exec: true`  | Process Activity (1007)         | 1 Launch               |
//! | `decision`            | API Activity (6003)             | 99 Other, `Decision`   |
//! | `denied`              | Network Activity (4001)         | 5 Refuse               |
//! | `policy`, `seal`      | none: no event happened         |                        |
//!
//! - A call: `api.operation` is the tool, `api.request.uid` warden's `call_id`, and a failed
//!   call's `api.response` has its outcome (`error`) and message (`error_message`). A tool does
//!   not say whether it creates, reads, updates or deletes, so the activity is Other.
//! - A program `warden exec` ran: `process.cmd_line` is its `argv` quoted as a shell reads it
//!   back, `process.uid` the `call_id` (warden saw no pid), `exit_code` its exit status, and a
//!   failure's message `message`.
//! - A decision: the reviewer's `approve`, `reject`, … is `actor.authorizations[0].decision`,
//!   under the policy its digest names; it has no status, as the call's own line does.
//! - A refusal: `dst_endpoint` is the host or address and port the destination names,
//!   `app_name` the tool, `status_detail` the reason; it applies the `security_control` profile
//!   (`action_id` Denied, `disposition_id` Blocked).
//! - Every record: `time` is `ts_ms`; `status_id` Success or Failure by `outcome`; `severity_id`
//!   Informational, as warden ranks nothing; `actor.app_name` is warden, which made the call or
//!   launched the program. The line names no host and no agent, so `src_endpoint` is named
//!   `agent` and a program's `device` `warden host`, of an unknown type: roles, not identities.
//! - Its place in the ledger: `metadata.uid` is the line's sha256 ([`Link::of`]), and
//!   `metadata.sequence` its `seq`; `metadata.correlation_uid` is the `call_id`, shared by a
//!   call's refusals, decisions and record.
//! - `unmapped` holds what the line has that no attribute above holds exactly, under its own
//!   name: `prev`, `tool_call_id`, `usage`, `policy_digest`, `reached`, `changes`, `argv`, the
//!   `duration_ms` that `duration` rounds, and any field a later warden adds.
//!
//! A `policy` line says what a policy grants (a call names it by `policy_digest`) and a `seal`
//! signs the chain: neither is an activity.

use crate::Link;
use serde_json::{Map, Value, json};
use std::net::{IpAddr, SocketAddr};

/// The OCSF schema version the records follow (the ocsf-schema repository's tag `1.3.0`).
pub const OCSF_VERSION: &str = "1.3.0";

/// `metadata.log_name`: the log the records come from.
const LOG_NAME: &str = "warden call log";

/// Why a line of the call log cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum OcsfError {
    #[error("not JSON ({source}): {start}")]
    NotJson {
        /// The line's first characters.
        start: String,
        source: serde_json::Error,
    },
    #[error("not a JSON object, as each line of the call log is: {start}")]
    NotAnObject { start: String },
    #[error("a line with no `event` string, and no `tool` and `outcome` of a call")]
    NoEvent,
    #[error("an `{0}` line, an event this warden has no OCSF class for")]
    UnknownEvent(String),
    #[error("a `{event}` line whose `{field}` is missing or not {expected}")]
    Missing {
        event: String,
        field: &'static str,
        expected: &'static str,
    },
}

/// The OCSF record of one line of the call log (its newline may be left on), or `None` for a
/// line that records no event (`policy`, `seal`).
pub fn to_ocsf(line: &str) -> Result<Option<Value>, OcsfError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let start = || line.chars().take(60).collect();
    let value = serde_json::from_str(line).map_err(|source| OcsfError::NotJson {
        start: start(),
        source,
    })?;
    let Value::Object(map) = value else {
        return Err(OcsfError::NotAnObject { start: start() });
    };
    let mut f = Fields::of(map)?;
    let call_id = match f.event.as_str() {
        "policy" | "seal" => return Ok(None),
        "call" | "decision" | "denied" => f.str("call_id")?,
        _ => return Err(OcsfError::UnknownEvent(f.event)),
    };
    let time = f.optional("ts_ms", Value::as_u64);
    let time = time.ok_or_else(|| f.missing("ts_ms", "a number"))?;
    let exec = f.optional("exec", Value::as_bool) == Some(true);
    let (class, activity, body) = match f.event.as_str() {
        "decision" => decision(&mut f, &call_id)?,
        "denied" => refusal(&mut f)?,
        _ if exec => launch(&mut f, &call_id)?,
        _ => call(&mut f, &call_id)?,
    };
    let (link, prev) = Link::of(line.as_bytes());
    let mut metadata = json!({
        "version": OCSF_VERSION,
        "product": {"name": "warden", "vendor_name": "warden", "version": env!("CARGO_PKG_VERSION")},
        "log_name": LOG_NAME,
        "uid": hex::encode(link.hash),
        "correlation_uid": call_id,
    });
    // A line before the chain began has no place in it; its `seq`, if any, stays unmapped.
    if prev.is_some() {
        f.map.shift_remove("seq");
        metadata["sequence"] = link.seq.into();
    }
    if !class.profiles.is_empty() {
        metadata["profiles"] = class.profiles.into();
    }
    let mut record = class.classify(activity);
    record.insert("time".into(), time.into());
    record.extend(body);
    record.insert("metadata".into(), metadata);
    if !f.map.is_empty() {
        record.insert("unmapped".into(), Value::Object(f.map));
    }
    Ok(Some(Value::Object(record)))
}

/// An OCSF event class, as these records use it.
struct Class {
    /// `category_uid` * 1000 + the class's number in its category.
    uid: u64,
    name: &'static str,
    category_name: &'static str,
    /// The profiles its records apply.
    profiles: &'static [&'static str],
}

const API_ACTIVITY: Class = Class {
    uid: 6003,
    name: "API Activity",
    category_name: "Application Activity",
    profiles: &[],
};
const PROCESS_ACTIVITY: Class = Class {
    uid: 1007,
    name: "Process Activity",
    category_name: "System Activity",
    profiles: &[],
};
const NETWORK_ACTIVITY: Class = Class {
    uid: 4001,
    name: "Network Activity",
    category_name: "Network Activity",
    profiles: &["security_control"],
};

/// An activity of a class: its id and its name.
type Activity = (u64, &'static str);

impl Class {
    /// The attributes that say what a record is: class, category, activity, type, severity.
    fn classify(&self, (id, name): Activity) -> Map<String, Value> {
        object([
            ("class_uid", self.uid.into()),
            ("class_name", self.name.into()),
            ("category_uid", (self.uid / 1000).into()),
            ("category_name", self.category_name.into()),
            ("activity_id", id.into()),
            ("activity_name", name.into()),
            ("type_uid", (self.uid * 100 + id).into()),
            ("type_name", format!("{}: {name}", self.name).into()),
            ("severity_id", 1.into()),
            ("severity", "Informational".into()),
        ])
    }
}

/// A line's record before its classification, time and metadata are added: its class, its
/// activity and the attributes its line gives.
type Event = (&'static Class, Activity, Map<String, Value>);

/// A line's fields, each taken out as it finds its place in the record: what is left is
/// `unmapped`.
struct Fields {
    event: String,
    map: Map<String, Value>,
}

impl Fields {
    /// The fields of a line, its `event` taken out (a line an older warden wrote without one
    /// is a call when it has a call's `tool` and `outcome`).
    fn of(mut map: Map<String, Value>) -> Result<Self, OcsfError> {
        let event = match map.shift_remove("event") {
            Some(Value::String(event)) => event,
            Some(_) => return Err(OcsfError::NoEvent),
            None if map.contains_key("tool") && map.contains_key("outcome") => "call".into(),
            None => return Err(OcsfError::NoEvent),
        };
        Ok(Self { event, map })
    }

    /// Takes `field`, a string.
    fn str(&mut self, field: &'static str) -> Result<String, OcsfError> {
        let value = self.peek(field)?.to_owned();
        self.map.shift_remove(field);
        Ok(value)
    }

    /// `field`, a string, left in place (to be unmapped too).
    fn peek(&self, field: &'static str) -> Result<&str, OcsfError> {
        let value = self.map.get(field).and_then(Value::as_str);
        value.ok_or_else(|| self.missing(field, "a string"))
    }

    /// Takes `field` when `read` finds what it wants in it; leaves it otherwise.
    fn optional<T>(&mut self, field: &str, read: impl Fn(&Value) -> Option<T>) -> Option<T> {
        let value = self.map.get(field).and_then(read)?;
        self.map.shift_remove(field);
        Some(value)
    }

    /// The error for a `field` that is missing or not `expected`.
    fn missing(&self, field: &'static str, expected: &'static str) -> OcsfError {
        OcsfError::Missing {
            event: self.event.clone(),
            field,
            expected,
        }
    }

    /// `status_id` and its siblings from the line's `outcome`: `success` or an error's kind.
    fn status(&mut self) -> Result<Map<String, Value>, OcsfError> {
        let outcome = self.str("outcome")?;
        Ok(if outcome == "success" {
            object([("status_id", 1.into()), ("status", "Success".into())])
        } else {
            object([
                ("status_id", 2.into()),
                ("status", "Failure".into()),
                ("status_detail", outcome.into()),
            ])
        })
    }

    /// `duration` in whole milliseconds; `duration_ms` stays unmapped, to its microsecond.
    fn duration(&self) -> Option<(String, Value)> {
        let ms = self.map.get("duration_ms")?.as_f64()?;
        Some(("duration".into(), (ms.round() as u64).into()))
    }
}

/// A tool call: the API warden serves, called by an agent.
fn call(f: &mut Fields, call_id: &str) -> Result<Event, OcsfError> {
    let mut api = api(f.str("tool")?, call_id);
    let mut body = f.status()?;
    if let Some(error) = body.get("status_detail") {
        api["response"] = json!({"error": error});
        if let Some(message) = f.optional("message", text) {
            api["response"]["error_message"] = message.into();
        }
    }
    body.extend(f.duration());
    body.extend(object([
        ("api", api),
        ("actor", json!({"app_name": "warden"})),
        ("src_endpoint", json!({"name": "agent"})),
    ]));
    Ok((&API_ACTIVITY, (99, "Call"), body))
}

/// What `api` says of a call of `tool`.
fn api(tool: String, call_id: &str) -> Value {
    json!({"operation": tool, "service": {"name": "warden"}, "request": {"uid": call_id}})
}

/// A program `warden exec` ran, from launch to exit: warden launched it, in a sandbox.
fn launch(f: &mut Fields, call_id: &str) -> Result<Event, OcsfError> {
    let mut body = f.status()?;
    let mut process = json!({"uid": call_id});
    // Kept unmapped too: a command line is text, an argv its exact words.
    let argv = f.map.get("argv").and_then(Value::as_array);
    if let Some(line) = argv.and_then(|a| cmd_line(a)) {
        process["cmd_line"] = line.into();
    }
    if let Some(message) = f.optional("message", text) {
        body.insert("message".into(), message.into());
    }
    if let Some(status) = f.optional("exit_status", Value::as_i64) {
        body.insert("exit_code".into(), status.into());
    }
    body.extend(f.duration());
    body.extend(object([
        ("process", process),
        ("actor", json!({"app_name": "warden"})),
        (
            "device",
            json!({"name": "warden host", "type_id": 0, "type": "Unknown"}),
        ),
    ]));
    Ok((&PROCESS_ACTIVITY, (1, "Launch"), body))
}

/// A reviewer's decision about a call: an authorization of the call, before it runs (or of
/// its changes, after).
fn decision(f: &mut Fields, call_id: &str) -> Result<Event, OcsfError> {
    let api = api(f.str("tool")?, call_id);
    let mut authorization = json!({"decision": f.str("decision")?});
    if let Some(policy) = f.optional("policy_digest", text) {
        authorization["policy"] = json!({"uid": policy});
    }
    let mut body = Map::new();
    if let Some(reason) = f.optional("reason", text) {
        body.insert("message".into(), reason.into());
    }
    body.extend(object([
        ("api", api),
        (
            "actor",
            json!({"app_name": "warden", "authorizations": [authorization]}),
        ),
        ("src_endpoint", json!({"name": "agent"})),
    ]));
    Ok((&API_ACTIVITY, (99, "Decision"), body))
}

/// A destination the sandbox refused a call: a connection refused by a security control.
fn refusal(f: &mut Fields) -> Result<Event, OcsfError> {
    let tool = f.str("tool")?;
    let reason = f.str("reason")?;
    // Kept unmapped too: the endpoint drops how it was asked for (`connect`, `https://`).
    let destination = f.peek("destination")?;
    let body = object([
        ("status_id", 2.into()),
        ("status", "Failure".into()),
        ("status_detail", reason.into()),
        ("action_id", 2.into()),
        ("action", "Denied".into()),
        ("disposition_id", 2.into()),
        ("disposition", "Blocked".into()),
        ("app_name", tool.into()),
        ("dst_endpoint", endpoint(destination)),
    ]);
    Ok((&NETWORK_ACTIVITY, (5, "Refuse"), body))
}

/// The endpoint a refusal's destination names (`https://host:443`, `connect host:443`,
/// `tcp 10.0.0.1:22`, `udp [::1]:53`, `dns host`): its host or address, and its port. A
/// destination of another form is the endpoint's name, whole.
fn endpoint(destination: &str) -> Value {
    let last = destination.rsplit(' ').next().unwrap_or(destination);
    let address = last.split_once("://").map_or(last, |(_, rest)| rest);
    if let Ok(ip) = address.parse::<IpAddr>() {
        return json!({"ip": ip});
    }
    if let Ok(socket) = address.parse::<SocketAddr>() {
        return json!({"ip": socket.ip(), "port": socket.port()});
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) => (host, port.parse::<u16>().ok()),
        None => (address, None),
    };
    let named = |b: u8| b.is_ascii_alphanumeric() || b"-._".contains(&b);
    match port {
        _ if host.is_empty() || !host.bytes().all(named) => json!({"name": destination}),
        Some(port) => json!({"hostname": host, "port": port}),
        None => json!({"hostname": host}),
    }
}

/// `argv` as one line a POSIX shell reads back to the same words; `None` when it is empty (the
/// policy's own shell) or not all strings.
fn cmd_line(argv: &[Value]) -> Option<String> {
    let words: Vec<String> = argv
        .iter()
        .map(|w| w.as_str().map(quoted))
        .collect::<Option<_>>()?;
    (!words.is_empty()).then(|| words.join(" "))
}

/// `word`, single-quoted unless it is plain.
fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A string's text.
fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

/// A JSON object of `pairs`, in their order.
fn object<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
