//! The OCSF export of a realistic call log, each record checked against what OCSF 1.3.0
//! requires of its class: no schema ships offline, so the required attributes, their types and
//! the enums are written out below from the schema itself.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

use serde_json::{Value, json};
use warden_ledger::ocsf::{OCSF_VERSION, OcsfError, to_ocsf};
use warden_ledger::{Link, SealKey, chained, verify};

// What OCSF 1.3.0 requires, from the ocsf-schema repository at its tag `1.3.0` (commit
// c8bde8c4cc7e93bb4a36e873623bbe099da22fb5). Types from dictionary.json's `types`:
// timestamp_t, long_t, integer_t and port_t are integers; string_t, hostname_t and ip_t strings.
// A path is required when its parent is there: `api.request.uid` when there is a request.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ty {
    Int,
    Str,
    Obj,
    Arr,
}
use Ty::{Arr, Int, Obj, Str};

/// events/base_event.json with includes/classification.json and includes/occurrence.json;
/// the required `metadata` (objects/metadata.json) and its `product` (objects/product.json).
/// Its profiles (cloud, datetime, osint) are not applied.
const BASE: &[(&str, Ty)] = &[
    ("activity_id", Int),
    ("category_uid", Int),
    ("class_uid", Int),
    ("type_uid", Int),
    ("time", Int),
    ("severity_id", Int),
    ("metadata", Obj),
    ("metadata.version", Str),
    ("metadata.product", Obj),
    ("metadata.product.vendor_name", Str),
];

/// events/application/api.json (uid 3 in category application, 6): `api`, `actor`,
/// `src_endpoint`; objects/api.json's `operation`, objects/request.json's `uid`.
const API_ACTIVITY: &[(&str, Ty)] = &[
    ("api", Obj),
    ("api.operation", Str),
    ("api.request.uid", Str),
    ("actor", Obj),
    ("src_endpoint", Obj),
];

/// events/system/system.json (`actor`, `device`; its profiles host and security_control not
/// applied) and events/system/process.json (uid 7 in category system, 1: `process`);
/// objects/device.json's `type_id`.
const PROCESS_ACTIVITY: &[(&str, Ty)] = &[
    ("actor", Obj),
    ("device", Obj),
    ("device.type_id", Int),
    ("process", Obj),
];

/// events/network/network.json (`dst_endpoint`) and network_activity.json (uid 1 in category
/// network, 4).
const NETWORK_ACTIVITY: &[(&str, Ty)] = &[("dst_endpoint", Obj)];

/// profiles/security_control.json, when `metadata.profiles` names it.
const SECURITY_CONTROL: &[(&str, Ty)] = &[("action_id", Int)];

/// A class: its uid, its category's (categories.json), its activities (the class's
/// `activity_id` enum and classification.json's 0 Unknown and 99 Other) and what it requires.
struct Class {
    uid: u64,
    category_uid: u64,
    activities: &'static [u64],
    required: &'static [(&'static str, Ty)],
}

const CLASSES: &[Class] = &[
    Class {
        uid: 6003,
        category_uid: 6,
        activities: &[0, 1, 2, 3, 4, 99],
        required: API_ACTIVITY,
    },
    Class {
        uid: 1007,
        category_uid: 1,
        activities: &[0, 1, 2, 3, 4, 5, 99],
        required: PROCESS_ACTIVITY,
    },
    Class {
        uid: 4001,
        category_uid: 4,
        // includes/network/network_activities.json
        activities: &[0, 1, 2, 3, 4, 5, 6, 7, 99],
        required: NETWORK_ACTIVITY,
    },
];

/// Enums checked where the attribute is present: dictionary.json's `severity_id`,
/// `status_id`, `disposition_id`; profiles/security_control.json's `action_id` (no 99).
const ENUMS: &[(&str, &[u64])] = &[
    ("severity_id", &[0, 1, 2, 3, 4, 5, 6, 99]),
    ("status_id", &[0, 1, 2, 99]),
    ("action_id", &[0, 1, 2]),
    (
        "disposition_id",
        &[
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
            24, 25, 26, 27, 99,
        ],
    ),
];

/// The optional attributes the records use, typed as dictionary.json and the objects say.
const TYPED: &[(&str, Ty)] = &[
    ("duration", Int),
    ("exit_code", Int),
    ("message", Str),
    ("status_detail", Str),
    ("app_name", Str),
    ("unmapped", Obj),
    ("metadata.uid", Str),
    ("metadata.sequence", Int),
    ("metadata.correlation_uid", Str),
    ("metadata.profiles", Arr),
    ("api.response.error", Str),
    ("api.response.error_message", Str),
    ("actor.app_name", Str),
    ("actor.authorizations", Arr),
    ("process.uid", Str),
    ("process.cmd_line", Str),
    ("dst_endpoint.ip", Str),
    ("dst_endpoint.hostname", Str),
    ("dst_endpoint.port", Int),
];

/// `constraints.at_least_one` of the objects the records hold: objects/actor.json,
/// network_endpoint.json, endpoint.json (a device's), process.json, _entity.json (a
/// product's, a service's).
const AT_LEAST_ONE: &[(&str, &[&str])] = &[
    (
        "actor",
        &[
            "process",
            "user",
            "invoked_by",
            "session",
            "app_name",
            "app_uid",
        ],
    ),
    ("src_endpoint", NETWORK_ENDPOINT),
    ("dst_endpoint", NETWORK_ENDPOINT),
    (
        "device",
        &[
            "ip",
            "uid",
            "name",
            "hostname",
            "instance_uid",
            "interface_uid",
            "interface_name",
        ],
    ),
    ("process", &["pid", "uid"]),
    ("metadata.product", &["name", "uid"]),
    ("api.service", &["name", "uid"]),
];

const NETWORK_ENDPOINT: &[&str] = &[
    "ip",
    "uid",
    "name",
    "hostname",
    "svc_name",
    "instance_uid",
    "interface_uid",
    "interface_name",
];

/// The attribute at a dotted path (a number picks from an array).
fn at<'a>(record: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(record, |v, key| match key.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(key),
        })
}

fn type_of(v: &Value) -> Option<Ty> {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(Int),
        Value::String(_) => Some(Str),
        Value::Object(_) => Some(Obj),
        Value::Array(_) => Some(Arr),
        _ => None,
    }
}

/// What is wrong with `record` as an OCSF 1.3.0 record of its class, each naming its path.
fn problems(record: &Value) -> Vec<String> {
    let class_uid = at(record, "class_uid").and_then(Value::as_u64);
    let Some(class) = CLASSES.iter().find(|c| Some(c.uid) == class_uid) else {
        return vec![format!("class_uid: {class_uid:?} is no class checked")];
    };
    let profiles = at(record, "metadata.profiles").and_then(Value::as_array);
    let mut required: Vec<(&str, Ty)> = [BASE, class.required].concat();
    if profiles.is_some_and(|p| p.iter().any(|p| p == "security_control")) {
        required.extend_from_slice(SECURITY_CONTROL);
    }
    let mut wrong = Vec::new();
    for (path, _) in &required {
        let parent = path.rsplit_once('.').map(|(p, _)| p);
        if at(record, path).is_none() && parent.is_none_or(|p| at(record, p).is_some()) {
            wrong.push(format!("{path}: required, missing"));
        }
    }
    for (path, ty) in required.iter().chain(TYPED) {
        if let Some(v) = at(record, path).filter(|v| type_of(v) != Some(*ty)) {
            wrong.push(format!("{path}: not {ty:?}: {v}"));
        }
    }
    wrong.extend(off_the_enums(record, class));
    for (path, any) in AT_LEAST_ONE {
        if at(record, path).is_some_and(|o| any.iter().all(|k| o.get(k).is_none())) {
            wrong.push(format!("{path}: has none of {any:?}"));
        }
    }
    wrong
}

/// The ids of `record` that its class's enums do not list, and a `type_uid` or `category_uid`
/// that is not its class's.
fn off_the_enums(record: &Value, class: &Class) -> Vec<String> {
    let mut enums: Vec<(&str, &[u64])> = ENUMS.to_vec();
    enums.push(("category_uid", &[0, 1, 2, 3, 4, 5, 6, 7]));
    enums.push(("activity_id", class.activities));
    let mut wrong = Vec::new();
    for (path, values) in enums {
        let listed = |v: &&Value| v.as_u64().is_some_and(|n| values.contains(&n));
        if let Some(v) = at(record, path).filter(|v| !listed(v)) {
            wrong.push(format!(
                "{path}: {v} is not in the schema's enum {values:?}"
            ));
        }
    }
    let int = |path| at(record, path).and_then(Value::as_u64);
    if int("category_uid") != Some(class.category_uid) {
        wrong.push(format!("category_uid: not class {}'s", class.uid));
    }
    let activity = int("activity_id").unwrap_or_default();
    if int("type_uid") != Some(class.uid * 100 + activity) {
        wrong.push("type_uid: not class_uid * 100 + activity_id".to_owned());
    }
    wrong
}

/// Asserts each dotted path `expected` names holds its value in `record`.
fn assert_holds(record: &Value, expected: Value) {
    for (path, value) in expected.as_object().unwrap() {
        assert_eq!(at(record, path), Some(value), "{path} in {record:#}");
    }
}

/// A realistic log: a line an older warden wrote before the chain began, then a chained
/// policy, a call, a refusal, a rejected call that timed out, an exec and a seal.
fn log(key: &SealKey, message: &str) -> Vec<String> {
    let old = r#"{"ts_ms":1754000000000,"tool":"add","call_id":"c0","outcome":"success","duration_ms":0.4,"attempts":1,"fuel":null}"#;
    let mut lines = vec![format!("{old}\n")];
    let digest = "a1b2c3d4e5f60718";
    let records = [
        json!({"event": "policy", "ts_ms": 1754000000100u64, "policy_digest": digest, "executor": "wasm",
            "policy": "fetch.toml", "grants": {"net": ["api.test:443"]}, "limits": {}}),
        json!({"event": "call", "ts_ms": 1754000000200u64, "tool": "fetch", "call_id": "3f9c2a71b0de-1",
            "tool_call_id": "c1", "outcome": "success", "duration_ms": 12.345, "attempts": 1, "fuel": 1200,
            "usage": {"cpu_ms": 3.2, "net_bytes_out": 210}, "reached": [{"destination": "https://api.test:443",
            "address": "192.0.2.7:443"}], "reached_count": 1, "executor": "wasm", "policy_digest": digest}),
        json!({"event": "denied", "ts_ms": 1754000000300u64, "tool": "fetch", "call_id": "3f9c2a71b0de-2",
            "tool_call_id": "c2", "destination": "tcp 10.0.0.1:22", "reason": "not granted"}),
        json!({"event": "decision", "ts_ms": 1754000000400u64, "tool": "fetch", "call_id": "3f9c2a71b0de-2",
            "tool_call_id": "c2", "decision": "reject", "reviewer": "terminal", "digest": "9f86d081884c7d65",
            "policy_digest": digest, "session": 1, "reason": "not that host"}),
        json!({"event": "call", "ts_ms": 1754000000500u64, "tool": "fetch", "call_id": "3f9c2a71b0de-2",
            "tool_call_id": "c2", "outcome": "timeout", "duration_ms": 30000.2, "attempts": 2, "fuel": null,
            "denied_count": 1, "denied": 1, "executor": "wasm", "policy_digest": digest, "message": message}),
        json!({"event": "call", "ts_ms": 1754000000600u64, "tool": "shell", "call_id": "3f9c2a71b0de-3",
            "tool_call_id": "exec-1", "outcome": "exit_status", "duration_ms": 1500.25, "attempts": 1,
            "fuel": null, "usage": {"cpu_ms": 80.5, "peak_memory_bytes": 4096000}, "executor": "host",
            "message": "the program exited with status 2", "exec": true,
            "argv": ["sh", "-c", "grep -r 'TODO' src"], "exit_status": 2}),
    ];
    // A writer goes on from the older line: the chain's first line names it.
    let mut last = Link::of(old.as_bytes()).0;
    for record in records {
        let mut line = record.to_string();
        last = chained(&last, &mut line);
        lines.push(line);
    }
    let mut seal = key.seal_line(&last, 1754000000700);
    chained(&last, &mut seal);
    lines.push(seal);
    lines
}

/// The log's lines, and the records of those that have one.
fn exported(message: &str) -> (Vec<String>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let key = SealKey::load_or_create(&dir.path().join("ledger.key")).unwrap();
    let lines = log(&key, message);
    // The log is one a writer would write: its chain and seal hold.
    let path = dir.path().join("calls.jsonl");
    std::fs::write(&path, lines.concat()).unwrap();
    assert_eq!(verify(&[path], None, None).unwrap().problem, None);
    let records = lines.iter().filter_map(|l| to_ocsf(l).unwrap()).collect();
    (lines, records)
}

#[test]
fn each_line_of_a_log_is_one_valid_record_carrying_its_hash_and_place() {
    let (lines, _) = exported("took too long");
    for line in &lines {
        let Some(record) = to_ocsf(line).unwrap() else {
            let event = &serde_json::from_str::<Value>(line).unwrap()["event"];
            assert!(event == "policy" || event == "seal", "{line}");
            continue;
        };
        assert_eq!(problems(&record), Vec::<String>::new(), "{record:#}");
        let (link, prev) = Link::of(line.trim_end_matches('\n').as_bytes());
        let hash = hex::encode(link.hash);
        assert_holds(
            &record,
            json!({"metadata.uid": hash, "metadata.version": OCSF_VERSION}),
        );
        match prev {
            Some(prev) => assert_holds(
                &record,
                json!({"metadata.sequence": link.seq,
                "unmapped.prev": hex::encode(prev)}),
            ),
            None => assert_eq!(at(&record, "metadata.sequence"), None),
        }
    }
}

#[test]
fn each_record_says_what_its_line_says() {
    let message = "took too long </script><script>alert(1)</script>\nline two \"quoted\"";
    let (_, records) = exported(message);
    let [old, ok, denied, decision, timeout, exec] = &records[..] else {
        panic!("six records: {records:#?}");
    };
    assert_holds(old, json!({"class_uid": 6003, "api.operation": "add"}));
    assert_holds(
        ok,
        json!({"status_id": 1, "api.request.uid": "3f9c2a71b0de-1", "duration": 12,
        "unmapped.usage.net_bytes_out": 210, "unmapped.policy_digest": "a1b2c3d4e5f60718"}),
    );
    assert_eq!(at(ok, "api.response"), None);
    assert_holds(
        denied,
        json!({"type_uid": 400105, "action_id": 2, "disposition_id": 2,
        "dst_endpoint": {"ip": "10.0.0.1", "port": 22}, "metadata.profiles": ["security_control"]}),
    );
    assert_holds(
        decision,
        json!({"actor.authorizations.0.decision": "reject",
        "actor.authorizations.0.policy.uid": "a1b2c3d4e5f60718", "message": "not that host",
        "metadata.correlation_uid": "3f9c2a71b0de-2"}),
    );
    assert_holds(
        timeout,
        json!({"status_id": 2, "api.response.error": "timeout",
        "metadata.correlation_uid": "3f9c2a71b0de-2"}),
    );
    // A tool's message is data: it goes out and comes back as it was, on one line.
    let text = timeout.to_string();
    assert!(!text.contains('\n'));
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_holds(&back, json!({"api.response.error_message": message}));
    assert_holds(
        exec,
        json!({"class_uid": 1007, "activity_id": 1, "exit_code": 2,
        "process.cmd_line": r"sh -c 'grep -r '\''TODO'\'' src'",
        "unmapped.argv": ["sh", "-c", "grep -r 'TODO' src"]}),
    );
}

#[test]
fn a_refusals_destination_becomes_an_endpoint() {
    let cases = json!({
        "https://api.test:443": {"hostname": "api.test", "port": 443},
        "connect api.test:443": {"hostname": "api.test", "port": 443},
        "udp [::1]:53": {"ip": "::1", "port": 53},
        "dns example.test": {"hostname": "example.test"},
        "unix /run/x.sock": {"name": "unix /run/x.sock"},
    });
    for (destination, endpoint) in cases.as_object().unwrap() {
        let line = json!({"event": "denied", "ts_ms": 1, "tool": "t", "call_id": "c",
            "tool_call_id": "t1", "destination": destination, "reason": "no"});
        let record = to_ocsf(&line.to_string()).unwrap().unwrap();
        assert_eq!(&record["dst_endpoint"], endpoint, "{destination}");
        assert_eq!(problems(&record), Vec::<String>::new());
    }
}

#[test]
fn a_line_that_is_no_record_is_an_error_naming_what_is_wrong() {
    let error = |line: &str| to_ocsf(line).unwrap_err().to_string();
    let e = error(r#"{"event":"call","tool":"#);
    assert!(e.starts_with("not JSON (EOF while parsing"), "{e}");
    assert!(e.ends_with(r#": {"event":"call","tool":"#), "{e}");
    let e = error("[1, 2]");
    assert_eq!(
        e,
        "not a JSON object, as each line of the call log is: [1, 2]"
    );
    let e = error(r#"{"event":"call","ts_ms":1,"tool":"t","outcome":"success"}"#);
    assert_eq!(
        e,
        "a `call` line whose `call_id` is missing or not a string"
    );
    let e = to_ocsf(r#"{"event":"rollback","call_id":"c"}"#).unwrap_err();
    assert!(
        matches!(e, OcsfError::UnknownEvent(ref event) if event == "rollback"),
        "{e}"
    );
    assert!(matches!(to_ocsf(r#"{"ts_ms":1}"#), Err(OcsfError::NoEvent)));
}

/// The checker itself fails: a record that lacks what its class requires, or holds what the
/// schema does not list, is named.
#[test]
fn the_checker_names_a_missing_attribute_a_wrong_type_and_a_value_off_the_enum() {
    let line = r#"{"event":"call","ts_ms":1,"tool":"t","call_id":"c","outcome":"success"}"#;
    let good = to_ocsf(line).unwrap().unwrap();
    assert_eq!(problems(&good), Vec::<String>::new());

    let mut record = good.clone();
    record["api"].as_object_mut().unwrap().remove("operation");
    assert_eq!(problems(&record), ["api.operation: required, missing"]);

    let mut record = good.clone();
    record["time"] = json!("yesterday");
    record["status_id"] = json!(3);
    record["type_uid"] = json!(600301);
    record["actor"] = json!({});
    let found = problems(&record);
    for expected in [
        "time: not Int",
        "status_id: 3 is not",
        "type_uid: not",
        "actor: has none",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(expected)),
            "{expected}: {found:?}"
        );
    }

    let mut record = good;
    record["metadata"]["profiles"] = json!(["security_control"]);
    assert_eq!(problems(&record), ["action_id: required, missing"]);
}
