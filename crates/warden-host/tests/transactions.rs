//! A host call as a transaction over its read-write root, through the real helper: a command
//! that ends on its own commits (its change set in the answer), one warden ends leaves
//! nothing, two calls writing one file side by side commit once and conflict once, and an
//! undo puts the root back byte-exact.

use crate::common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_core::{
    Denials, ErrorKind, Executor, Invocation, Limits, Meter, Output, SessionId, ToolError,
};
use warden_tx::Store;

/// A place with a read-write root `ws` (holding `a`), a read-only `ctl` the test drives calls
/// through, and a tool over them whose calls are transactions in `home/transactions`.
struct Setup {
    place: Place,
    ws: PathBuf,
    ctl: PathBuf,
    store: Arc<Store>,
    tool: Arc<dyn Executor>,
    limits: Limits,
}

/// `prepared`: sandboxes the tool keeps set up ahead of its calls (each with a view).
fn setup(limits: &str, prepared: usize) -> Setup {
    let place = Place::new();
    let ws = place.folder("ws", 0o777, None);
    let ctl = place.folder("ctl", 0o755, None);
    std::fs::write(ws.join("a"), "alpha\n").unwrap();
    chmod(&ws.join("a"), 0o666);
    let store = Store::at(&place.path("home/transactions"));
    let grants = "fs = [{ host = \"ws\", guest = \"/ws\", access = \"read-write\" }, \
                  { host = \"ctl\", guest = \"/ctl\", access = \"read-only\" }]";
    let (tool, limits) = place.tool_on(
        &shell("", grants, limits),
        backend().prepared(prepared).transactions(store.clone()),
    );
    Setup {
        ws: ws.canonicalize().unwrap(),
        ctl,
        place,
        store,
        tool,
        limits,
    }
}

/// Call `id` of `command`, in a session of its own.
fn invocation(id: &str, command: &str, limits: Limits) -> Invocation {
    Invocation {
        call_id: id.into(),
        arguments: json!({ "command": command }),
        limits,
        deadline: std::time::Instant::now() + limits.timeout,
        denials: Denials::default(),
        session: SessionId::fresh(),
        usage: Meter::default(),
        output: None,
        caller_env: Default::default(),
        image: None,
        hold: None,
    }
}

impl Setup {
    async fn call(&self, id: &str, command: &str) -> Result<Output, ToolError> {
        self.tool
            .execute(invocation(id, command, self.limits))
            .await
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.ws.join(name)).ok()
    }
}

fn changes(r: &Result<Output, ToolError>) -> Value {
    match r {
        Ok(o) => o.details.get("changes").cloned().unwrap_or(Value::Null),
        Err(e) => e.details.get("changes").cloned().unwrap_or(Value::Null),
    }
}

fn paths(changes: &Value) -> Vec<(String, String)> {
    changes["changes"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (field("path"), field("change"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_command_that_ends_commits_and_one_warden_ends_leaves_nothing() {
    let s = setup("timeout = \"3s\"", 0);
    let r = s
        .call(
            "t1-1",
            "cd /ws && echo changed > a && mkdir d && echo n > d/n && rm -f gone",
        )
        .await;
    assert!(r.is_ok(), "{}", text(&r));
    let listed = paths(&changes(&r));
    assert_eq!(
        listed,
        [("a", "modified"), ("d", "added"), ("d/n", "added")]
            .map(|(p, c)| (p.to_owned(), c.to_owned()))
    );
    assert_eq!(s.read("a").as_deref(), Some("changed\n"));
    assert_eq!(s.read("d/n").as_deref(), Some("n\n"));

    // A failing exit status is the command's own end: it commits.
    let r = s.call("t1-2", "echo failed > /ws/f && exit 3").await;
    assert_eq!(
        r.as_ref().map_err(|e| e.kind).err(),
        Some(ErrorKind::ExitStatus)
    );
    assert_eq!(s.read("f").as_deref(), Some("failed\n"));

    // Ended by its timeout mid-write: nothing of it remains.
    let r = s
        .call(
            "t1-3",
            "echo half > /ws/a; echo more > /ws/new; rm /ws/f; sleep 30",
        )
        .await;
    let e = r.as_ref().expect_err("a timeout");
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.message.contains("Nothing it wrote"), "{}", e.message);
    assert_eq!(changes(&r), json!({ "discarded": true }));
    assert_eq!(s.read("a").as_deref(), Some("changed\n"));
    assert_eq!(s.read("new"), None);
    assert_eq!(s.read("f").as_deref(), Some("failed\n"));
    let views = s.place.path("home/transactions/views");
    assert_eq!(
        std::fs::read_dir(views).unwrap().count(),
        0,
        "no view is left"
    );
}

#[tokio::test]
async fn two_calls_writing_one_file_side_by_side_commit_once_and_conflict_once() {
    let s = setup("", 1);
    let go = s.ctl.join("go");
    // The second call writes, then waits (on the read-only root, seen live) for the test.
    let waiting = {
        let tool = s.tool.clone();
        let limits = s.limits;
        let command = "echo second > /ws/a; echo mine > /ws/only-second; \
                       while ! test -e /ctl/go; do sleep 0.05; done";
        tokio::spawn(async move { tool.execute(invocation("t2-2", command, limits)).await })
    };
    // Once its write is in its view, the first call writes the same file and commits.
    let upper = s.place.path("home/transactions/views");
    wait_for(|| written_in_a_view(&upper, "only-second")).await;
    let first = s.call("t2-1", "echo first > /ws/a").await;
    assert!(first.is_ok(), "{}", text(&first));
    std::fs::write(&go, "").unwrap();
    let second = waiting.await.unwrap();
    let e = second.as_ref().expect_err("a conflict");
    assert_eq!(e.kind, ErrorKind::Conflict, "{}", e.message);
    assert!(
        e.message.contains(&s.ws.join("a").display().to_string()),
        "{}",
        e.message
    );
    assert_eq!(s.read("a").as_deref(), Some("first\n"));
    assert_eq!(s.read("only-second"), None, "nothing of the second applied");
}

#[tokio::test]
async fn an_undo_puts_the_root_back_byte_exact_and_refuses_after_a_later_change() {
    let s = setup("", 1);
    let before = tree(&s.ws);
    let r = s
        .call(
            "t3-1",
            "cd /ws && echo new > a && echo m > m && chmod 600 m && mkdir -p x/y && \
             echo z > x/y/z && ln -s /etc/shadow s",
        )
        .await;
    assert!(r.is_ok(), "{}", text(&r));
    s.store.undo("t3-1").unwrap();
    assert_eq!(tree(&s.ws), before);

    let r = s.call("t3-2", "echo two > /ws/a").await;
    assert!(r.is_ok(), "{}", text(&r));
    let r = s.call("t3-3", "echo three > /ws/a").await;
    assert!(r.is_ok(), "{}", text(&r));
    match s.store.undo("t3-2") {
        Err(warden_tx::TxError::Conflict { paths, .. }) => {
            assert_eq!(paths, vec![s.ws.join("a")]);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let undone = s.store.rewind("t3-1").unwrap();
    assert_eq!(undone.len(), 2);
    assert_eq!(tree(&s.ws), before);
}

async fn wait_for(done: impl Fn() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < until, "it never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True when some view's upper layer holds `name`.
fn written_in_a_view(views: &Path, name: &str) -> bool {
    std::fs::read_dir(views)
        .into_iter()
        .flatten()
        .flatten()
        .any(|view| view.path().join("0/upper").join(name).exists())
}

/// Every entry below `dir`: content (or link target, or "dir") and mode.
fn tree(dir: &Path) -> Vec<(PathBuf, String, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_owned();
            let what = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".into()
            } else {
                std::fs::read_to_string(&path).unwrap()
            };
            out.push((rel, what, meta.mode() & 0o7777));
        }
    }
    out.sort();
    out
}
