//! A wasm call as a transaction over its read-write root, end to end through `warden call`:
//! the guest writes through an overlay the host helper mounts for the call, so a call that
//! returns commits (its change set in the answer, undoable), one that traps halfway leaves
//! nothing behind, and one whose changes a person must review keeps nothing unreviewed.

use crate::common::toolbox::{Env, json, path_str};
use crate::common::wasm;
use serde_json::Value;
use std::path::PathBuf;

/// The hostile fixture with `../root` read-write at `/w` (`extra` adds tables), and the root
/// holding `a`.
fn hostile_over_a_root(extra: &str) -> (Env, PathBuf) {
    let env = Env::new();
    let root = env.dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a"), "alpha").unwrap();
    std::fs::write(
        env.toolbox().join("hostile.toml"),
        format!(
            "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n[grants]\n\
             fs = [{{ host = \"../root\", guest = \"/w\", access = \"read-write\" }}]\n{extra}",
            path_str(&wasm("hostile"))
        ),
    )
    .unwrap();
    (env, root)
}

fn call(env: &Env, tool: &str, args: &str) -> Value {
    json(&String::from_utf8_lossy(
        &env.warden(&["call", tool, args]).stdout,
    ))
}

#[test]
fn a_wasm_call_that_returns_commits_and_one_that_traps_leaves_nothing() {
    let (env, root) = hostile_over_a_root("");
    let m = call(&env, "write", r#"{"path": "/w/a", "contents": "changed"}"#);
    assert_eq!(m["status"], "success", "{m}");
    let changes = &m["artifact"]["changes"];
    assert_eq!(changes["count"], 1, "{m}");
    assert_eq!(changes["changes"][0]["path"], "a", "{m}");
    assert_eq!(changes["changes"][0]["change"], "modified", "{m}");
    assert_eq!(std::fs::read_to_string(root.join("a")).unwrap(), "changed");
    let committed = m["artifact"]["call_id"].as_str().unwrap().to_owned();

    // It wrote, then trapped: nothing of it reaches the root.
    let m = call(
        &env,
        "write-then-boom",
        r#"{"path": "/w/b", "contents": "half"}"#,
    );
    assert_eq!(m["error"]["kind"], "trap", "{m}");
    assert!(
        m["content"].as_str().unwrap().contains("Nothing it wrote"),
        "{m}"
    );
    assert_eq!(m["error"]["details"]["changes"]["discarded"], true, "{m}");
    assert!(!root.join("b").exists(), "a trapped call's write was kept");

    // A function's own error is its answer: what it wrote before is kept.
    let m = call(&env, "write", r#"{"path": "/w/no/such", "contents": "x"}"#);
    assert_eq!(m["error"]["kind"], "tool_error", "{m}");

    let out = env.warden(&["undo", &committed]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(root.join("a")).unwrap(), "alpha");
    let views = env.dir.path().join("home/transactions/views");
    let left = std::fs::read_dir(&views).map_or(0, Iterator::count);
    assert_eq!(left, 0, "a view is left in {}", views.display());
}

#[test]
fn a_wasm_calls_changes_under_review_are_not_kept_without_a_reviewer() {
    let (env, root) = hostile_over_a_root("[review]\nchanges = true\n");
    // No terminal to ask and no other reviewer: the changes are discarded, and said so.
    let m = call(
        &env,
        "write",
        r#"{"path": "/w/b", "contents": "unreviewed"}"#,
    );
    assert_eq!(m["error"]["kind"], "rejected", "{m}");
    assert!(
        m["content"].as_str().unwrap().contains("Nothing it wrote"),
        "{m}"
    );
    assert!(!root.join("b").exists(), "an unreviewed write was kept");
    assert_eq!(std::fs::read_to_string(root.join("a")).unwrap(), "alpha");
}
