//! The call log as a ledger, end to end: each `warden` process chains its records and seals
//! them when it ends; `warden log verify` names what was edited, cut or sealed by another
//! key, and a head sent to syslog catches a log cut short.

use crate::common::toolbox::{Env, json, path_str};
use crate::common::wasm;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

/// A toolbox with the trivial tool, three calls made, each by a process of its own, their
/// seals' heads sent to the socket the test listens on; the socket's receiving end.
fn three_calls() -> (Env, UnixDatagram) {
    let env = Env::new();
    env.ok(&["add", path_str(&wasm("trivial"))]);
    let socket = env.dir.path().join("syslog.sock");
    let syslog = UnixDatagram::bind(&socket).unwrap();
    for a in 1..=3 {
        let args = format!("{{\"a\": {a}, \"b\": 1}}");
        env.ok(&["--ledger-syslog", path_str(&socket), "call", "add", &args]);
    }
    syslog.set_nonblocking(true).unwrap();
    (env, syslog)
}

fn log(env: &Env) -> PathBuf {
    env.dir.path().join("home/calls.jsonl")
}

/// `warden log verify --json ARGS`: its report and whether it exited 0.
fn verify(env: &Env, args: &[&str]) -> (serde_json::Value, bool) {
    let out = env.warden(&[&["log", "verify", "--json"], args].concat());
    (
        json(&String::from_utf8_lossy(&out.stdout)),
        out.status.success(),
    )
}

#[test]
fn each_process_seals_its_records_and_an_edit_is_named() {
    let (env, _syslog) = three_calls();
    let (report, ok) = verify(&env, &[]);
    assert!(ok, "{report}");
    assert_eq!(
        (report["seals"].as_u64(), report["unsigned"].as_u64()),
        (Some(3), Some(0))
    );
    assert!(
        report["pinned_key"]
            .as_str()
            .unwrap()
            .ends_with("ledger.key.pub")
    );

    let text = std::fs::read_to_string(log(&env)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("\"event\":\"call\""))
        .unwrap();
    let call_id = json(lines[at])["call_id"].as_str().unwrap().to_owned();
    std::fs::write(
        log(&env),
        text.replacen("\"outcome\":\"success\"", "\"outcome\":\"timeout\"", 1),
    )
    .unwrap();
    let out = env.warden(&["log", "verify"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    let place = format!("calls.jsonl:{} (call {call_id}): edited", at + 1);
    assert!(
        said.starts_with("broken: ") && said.contains(&place),
        "{said}"
    );
}

#[test]
fn a_log_cut_after_a_seal_is_caught_against_the_head_syslog_got() {
    let (env, syslog) = three_calls();
    let mut heads = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = syslog.recv(&mut buf) {
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        heads.push(line.rsplit(' ').next().unwrap().to_owned());
    }
    assert_eq!(heads.len(), 3, "a seal a process: {heads:?}");
    // The last call's records, its seal included, cut off: what is left is whole and sealed.
    let text = std::fs::read_to_string(log(&env)).unwrap();
    let second_seal = text.match_indices("{\"event\":\"seal\"").nth(1).unwrap().0;
    let end = second_seal + text[second_seal..].find('\n').unwrap() + 1;
    std::fs::write(log(&env), &text[..end]).unwrap();
    let (report, ok) = verify(&env, &[]);
    assert!(ok && report["unsigned"] == 0, "{report}");
    let (report, ok) = verify(&env, &["--head", &heads[2]]);
    assert!(!ok, "{report}");
    assert!(
        report["problem"]["what"]
            .as_str()
            .unwrap()
            .starts_with("cut short"),
        "{report}"
    );
}

#[test]
fn a_log_sealed_by_another_key_fails_the_pinned_key() {
    let (env, _syslog) = three_calls();
    let pinned = env.dir.path().join("pinned.pub");
    std::fs::copy(env.dir.path().join("home/ledger.key.pub"), &pinned).unwrap();
    // Another key takes the home's place, and the log is written again under it.
    std::fs::remove_file(env.dir.path().join("home/ledger.key")).unwrap();
    std::fs::remove_file(log(&env)).unwrap();
    env.ok(&[
        "--ledger-syslog",
        "none",
        "call",
        "add",
        "{\"a\": 1, \"b\": 1}",
    ]);
    let (report, ok) = verify(&env, &[]);
    assert!(ok, "whole under the home's new key: {report}");
    let (report, ok) = verify(&env, &["--key", path_str(&pinned)]);
    assert!(!ok, "{report}");
    assert!(
        report["problem"]["what"]
            .as_str()
            .unwrap()
            .contains("not the pinned"),
        "{report}"
    );
}

/// `warden log export --format ocsf`: one API Activity record for each call, none for the
/// policy and seal lines, each carrying its line's hash; a line that is not a record is named
/// on stderr, the rest are still exported, and the export exits 1.
#[test]
fn the_log_exports_as_ocsf_with_each_lines_hash_and_names_a_line_it_cannot() {
    let (env, _syslog) = three_calls();
    let text = std::fs::read_to_string(log(&env)).unwrap();
    let out = env.warden(&["log", "export", "--format", "ocsf"]);
    assert!(out.status.success(), "{out:?}");
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(json)
        .collect();
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"event\":\"call\""))
        .collect();
    assert_eq!((records.len(), calls.len()), (3, 3), "{records:?}");
    for (record, line) in records.iter().zip(&calls) {
        assert_eq!(record["class_uid"], 6003);
        assert_eq!(record["api"]["operation"], "add");
        assert_eq!(record["status_id"], 1);
        // The chain's own hash of the line, as `SEQ:HEX`.
        let link = warden_ledger::Link::of(line.as_bytes()).0.to_text();
        let hash = link.split_once(':').unwrap().1;
        assert_eq!(record["metadata"]["uid"], hash);
        assert_eq!(record["api"]["request"]["uid"], json(line)["call_id"]);
    }

    std::fs::write(log(&env), format!("{text}not a record\n")).unwrap();
    let out = env.warden(&["log", "export", "--format", "ocsf"]);
    let said = String::from_utf8_lossy(&out.stderr);
    let at = format!(
        "calls.jsonl:{}: cannot export this line: not JSON",
        text.lines().count() + 1
    );
    assert!(!out.status.success() && said.contains(&at), "{said}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
}
