//! Ledgers written as a writer writes them, then attacked: every edit, removal, reordering,
//! insertion and cut is named by file, line and call.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

use std::path::{Path, PathBuf};
use warden_ledger::{Link, PublicKey, SEAL_EVERY, SealKey, chained, verify};

/// `n` call records, sealed by `key` every [`SEAL_EVERY`] lines and at the end, as lines.
fn ledger(n: u64, key: &SealKey) -> Vec<String> {
    let mut last = Link::GENESIS;
    let mut lines = Vec::new();
    let mut push = |mut line: String, last: &mut Link| {
        *last = chained(last, &mut line);
        lines.push(line);
    };
    for i in 1..=n {
        let record = format!(
            "{{\"event\":\"call\",\"ts_ms\":{i},\"tool\":\"add\",\"call_id\":\"c-{i}\",\"outcome\":\"success\",\"duration_ms\":0.4}}"
        );
        push(record, &mut last);
        if i % SEAL_EVERY == 0 || i == n {
            let seal = key.seal_line(&last, i);
            push(seal, &mut last);
        }
    }
    lines
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.concat()).unwrap();
    path
}

fn keys(dir: &Path, name: &str) -> (SealKey, PublicKey) {
    let key = SealKey::load_or_create(&dir.join(name)).unwrap();
    let public = PublicKey::read(&SealKey::public_path(&dir.join(name))).unwrap();
    assert_eq!(key.public(), public);
    (key, public)
}

/// The line number (from 1) of the record of call `c-{i}`.
fn line_of(lines: &[String], i: u64) -> usize {
    let id = format!("\"call_id\":\"c-{i}\"");
    lines.iter().position(|l| l.contains(&id)).unwrap() + 1
}

#[test]
fn an_untouched_log_of_a_hundred_thousand_records_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "seal.key");
    let lines = ledger(100_000, &key);
    let path = write(dir.path(), "calls.jsonl", &lines);
    let v = verify(&[path], Some(&public), None).unwrap();
    assert_eq!(v.problem, None);
    assert_eq!(v.records, lines.len() as u64);
    assert_eq!(v.seals, 100);
    assert_eq!(v.unsigned, 0, "it ends in a seal");
    assert_eq!(v.keys, vec![public.id()]);
}

#[test]
fn an_edit_a_removal_a_swap_and_an_insertion_are_each_named() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "seal.key");
    let lines = ledger(3000, &key);
    let at = line_of(&lines, 1500);
    let check = |lines: &[String]| {
        let path = write(dir.path(), "calls.jsonl", lines);
        verify(&[path], Some(&public), None)
            .unwrap()
            .problem
            .expect("a problem")
    };

    let mut edited = lines.clone();
    edited[at - 1] = edited[at - 1].replace("\"tool\":\"add\"", "\"tool\":\"adc\"");
    let p = check(&edited);
    assert_eq!((p.line, p.call_id.as_deref()), (at, Some("c-1500")), "{p}");
    assert!(p.what.starts_with("edited"), "{p}");

    let mut removed = lines.clone();
    removed.remove(at - 1);
    let p = check(&removed);
    assert_eq!((p.line, p.call_id.as_deref()), (at, Some("c-1501")), "{p}");
    assert!(p.what.contains("1 record(s) removed"), "{p}");

    let mut swapped = lines.clone();
    swapped.swap(at - 1, at);
    let p = check(&swapped);
    assert_eq!((p.line, p.call_id.as_deref()), (at, Some("c-1501")), "{p}");
    assert!(p.what.starts_with("reordered"), "{p}");

    let mut inserted = lines.clone();
    inserted.insert(at, "{\"event\":\"call\",\"call_id\":\"forged\"}\n".into());
    let p = check(&inserted);
    assert_eq!(
        (p.line, p.call_id.as_deref()),
        (at + 1, Some("forged")),
        "{p}"
    );
    assert!(p.what.starts_with("inserted"), "{p}");

    // A forged line that takes a real one's place in the chain: two lines claim it.
    let mut forged = lines.clone();
    let mut line = "{\"event\":\"call\",\"call_id\":\"forged\"}".to_owned();
    let (before, _) = Link::of(lines[at - 1].trim_end().as_bytes());
    chained(&before, &mut line);
    forged.insert(at, line);
    let p = check(&forged);
    assert_eq!(
        (p.line, p.call_id.as_deref()),
        (at + 1, Some("forged")),
        "{p}"
    );
    assert!(p.what.starts_with("inserted"), "{p}");
}

#[test]
fn a_problem_in_a_rotated_file_names_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "seal.key");
    let lines = ledger(2500, &key);
    let (old, new) = lines.split_at(1200);
    let rotated = write(dir.path(), "calls.jsonl.1", old);
    let current = write(dir.path(), "calls.jsonl", new);
    let files = [rotated.clone(), current.clone()];
    assert_eq!(verify(&files, Some(&public), None).unwrap().problem, None);

    // The new file's first line follows the old file's last: removing that is seen.
    let mut cut = new.to_vec();
    cut.remove(0);
    write(dir.path(), "calls.jsonl", &cut);
    let p = verify(&files, Some(&public), None)
        .unwrap()
        .problem
        .unwrap();
    assert_eq!((p.file.as_path(), p.line), (current.as_path(), 1), "{p}");
    assert!(p.what.contains("removed"), "{p}");

    let mut edited = old.to_vec();
    edited[10] = edited[10].replace("success", "timeout");
    write(dir.path(), "calls.jsonl", new);
    write(dir.path(), "calls.jsonl.1", &edited);
    let p = verify(&files, Some(&public), None)
        .unwrap()
        .problem
        .unwrap();
    assert_eq!((p.file.as_path(), p.line), (rotated.as_path(), 11), "{p}");
}

#[test]
fn a_log_cut_after_a_seal_is_caught_by_the_head_exported_before() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "seal.key");
    let lines = ledger(2500, &key);
    let path = write(dir.path(), "calls.jsonl", &lines);
    let head = verify(std::slice::from_ref(&path), Some(&public), None)
        .unwrap()
        .head
        .unwrap();
    let head = Link::parse(&head.to_text()).unwrap();

    // Cut right after the second seal: what is left verifies on its own...
    let cut_at = line_of(&lines, 2000) + 1;
    write(dir.path(), "calls.jsonl", &lines[..cut_at]);
    let v = verify(std::slice::from_ref(&path), Some(&public), None).unwrap();
    assert_eq!((v.problem, v.unsigned), (None, 0));
    // ...but not against the head exported before the cut.
    let p = verify(std::slice::from_ref(&path), Some(&public), Some(&head))
        .unwrap()
        .problem
        .unwrap();
    assert!(p.what.starts_with("cut short"), "{p}");

    // A tail after the last seal is counted as unsigned.
    write(dir.path(), "calls.jsonl", &lines[..cut_at + 10]);
    let v = verify(&[path], Some(&public), None).unwrap();
    assert_eq!((v.problem, v.unsigned), (None, 10));
}

#[test]
fn a_chain_rewritten_or_resealed_with_another_key_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "seal.key");
    let (other, other_public) = keys(dir.path(), "other.key");
    let path = write(dir.path(), "calls.jsonl", &ledger(1500, &other));
    // Whole and well sealed, by another key than the one pinned.
    assert_eq!(
        verify(std::slice::from_ref(&path), Some(&other_public), None)
            .unwrap()
            .problem,
        None
    );
    let p = verify(std::slice::from_ref(&path), Some(&public), None)
        .unwrap()
        .problem
        .unwrap();
    assert!(p.what.contains("not the pinned"), "{p}");

    // An edit, with every later line chained again (what one without the key can do): the
    // first seal after it no longer holds.
    let mut lines = ledger(1500, &key);
    lines[100] = lines[100].replace("success", "timeout");
    let mut last = Link::of(lines[99].trim_end().as_bytes()).0;
    for line in &mut lines[100..] {
        let mut text = line.trim_end().to_owned();
        let cut = text.rfind(",\"seq\":").unwrap();
        text.truncate(cut);
        text.push('}');
        last = chained(&last, &mut text);
        *line = text;
    }
    write(dir.path(), "calls.jsonl", &lines);
    let p = verify(&[path], Some(&public), None)
        .unwrap()
        .problem
        .unwrap();
    assert!(p.what.contains("signature does not hold"), "{p}");
    assert_eq!(p.line, line_of(&lines, 1000) + 1, "{p}");
}
