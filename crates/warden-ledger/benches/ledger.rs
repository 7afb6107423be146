//! What the ledger costs: a record appended as the call log appends it (the writers' lock
//! taken, the file's identity and size checked, the line chained, one `write`) beside the
//! plain `write` of the same record (the log before chaining); a seal; and `verify` of
//! 1,000,000 records. Not a test and not in CI: `cargo bench -p warden-ledger`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;
use warden_ledger::{Link, SealKey, chained, verify};

/// A call record as the call log writes one (a wasm tool's, with its usage).
const RECORD: &str = "{\"event\":\"call\",\"ts_ms\":1764950400000,\"tool\":\"add\",\"call_id\":\"3f9c2a71b0de-12345\",\"tool_call_id\":\"mcp-1-12345\",\"outcome\":\"success\",\"duration_ms\":0.412,\"attempts\":1,\"fuel\":null,\"usage\":{\"wall_ms\":0.41,\"cpu_ms\":0.38,\"memory_peak_bytes\":1179648},\"executor\":\"wasm\",\"policy_digest\":\"9a0f3c55e1b2d4a7\"}";

const RECORDS: usize = 200_000;

/// A new file at `path` (a round's file replaces the last round's), opened for appending.
fn append(path: &Path) -> File {
    let _ = std::fs::remove_file(path);
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// Nanoseconds a record, plain.
fn plain(dir: &Path) -> f64 {
    let mut file = append(&dir.join("plain.jsonl"));
    let start = Instant::now();
    for _ in 0..RECORDS {
        let mut line = RECORD.to_owned();
        line.push('\n');
        file.write_all(line.as_bytes()).unwrap();
    }
    start.elapsed().as_nanos() as f64 / RECORDS as f64
}

/// Nanoseconds a record, chained under the writers' lock.
fn chained_under_lock(dir: &Path) -> f64 {
    let path = dir.join("chained.jsonl");
    let mut file = append(&path);
    let lock = append(&dir.join("chained.jsonl.lock"));
    let (ino, mut bytes) = (file.metadata().unwrap().ino(), 0u64);
    let mut last = Link::GENESIS;
    let start = Instant::now();
    for _ in 0..RECORDS {
        lock.lock().unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert!(m.ino() == ino && m.len() == bytes, "one writer");
        let mut line = RECORD.to_owned();
        last = chained(&last, &mut line);
        file.write_all(line.as_bytes()).unwrap();
        bytes += line.len() as u64;
        lock.unlock().unwrap();
    }
    start.elapsed().as_nanos() as f64 / RECORDS as f64
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    println!("| per record | ns |\n|---|---|");
    for round in 0..3 {
        let (p, c) = (plain(dir.path()), chained_under_lock(dir.path()));
        println!("| round {round}: plain write (the floor) | {p:.0} |");
        println!(
            "| round {round}: chained, locked, checked | {c:.0} (+{:.0}) |",
            c - p
        );
    }
    let key = SealKey::load_or_create(&dir.path().join("k")).unwrap();
    let start = Instant::now();
    for _ in 0..1000 {
        std::hint::black_box(key.seal_line(&Link::GENESIS, 1));
    }
    println!(
        "| a seal line (signed) | {:.0} |",
        start.elapsed().as_nanos() as f64 / 1000.0
    );

    // 1,000,000 records in five files of 200,000, sealed every 1,000.
    let mut last = Link::GENESIS;
    let mut files = Vec::new();
    for f in 0..5 {
        let path = dir.path().join(format!("v.{f}"));
        let mut text = String::new();
        for i in 0..200_000 {
            let mut line = RECORD.to_owned();
            last = chained(&last, &mut line);
            text.push_str(&line);
            if i % 1000 == 999 {
                let mut seal = key.seal_line(&last, 1);
                last = chained(&last, &mut seal);
                text.push_str(&seal);
            }
        }
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    let bytes: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    for round in 0..3 {
        let start = Instant::now();
        let v = verify(&files, Some(&key.public()), None).unwrap();
        let took = start.elapsed().as_secs_f64();
        assert!(v.problem.is_none());
        println!(
            "| round {round}: verify {} records ({} MB) | {:.0} records/s ({took:.2} s) |",
            v.records,
            bytes / 1_000_000,
            v.records as f64 / took
        );
    }
}
