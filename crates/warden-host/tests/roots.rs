//! Where a host command sees its roots: each mounted at its guest path (the host path unless
//! the grant names one) in the sandbox's own root, whatever folders lie above it on the host,
//! beside a private /tmp. Each test runs a tool per call (through a prepared sandbox) and one
//! in session mode: they must behave alike.

use crate::common::*;
use serde_json::json;
use std::sync::Arc;
use warden_core::{Backend, Executor, Limits, Output, Policy, SessionId, ToolError};

/// The tool of `text` per call, then in session mode, each with a session of its own.
fn modes(place: &Place, text: &str) -> Vec<(&'static str, ToolIn)> {
    ["", "session = true"]
        .into_iter()
        .map(|extra| {
            let text = text.replacen("[grants]", &format!("{extra}\n[grants]"), 1);
            let (tool, limits) = place.tool(&text);
            let mode = if extra.is_empty() { "call" } else { "session" };
            (mode, (tool, limits, SessionId::fresh()))
        })
        .collect()
}

/// A tool, its limits, and the session its calls run in.
type ToolIn = (Arc<dyn Executor>, Limits, SessionId);

async fn run(t: &ToolIn, command: &str) -> Result<Output, ToolError> {
    call_in(&t.0, &t.1, t.2, json!({ "command": command })).await
}

#[tokio::test]
async fn a_root_below_a_folder_its_user_cannot_pass_through_is_read_and_written() {
    let place = Place::new();
    // As `mktemp -d` makes it, or a home folder: the command's user (nobody) is kept out.
    place.folder("home", 0o700, None);
    let ws = place.folder("home/ws", 0o777, None);
    std::fs::write(ws.join("granted.txt"), "granted\n").unwrap();
    let policy = shell(
        "",
        "fs = [{ host = \"home/ws\", access = \"read-write\" }]",
        "",
    );
    for (mode, t) in modes(&place, &policy) {
        let command = format!(
            "cat granted.txt && echo {mode} > {mode}.txt && cd {} && pwd",
            ws.display()
        );
        let r = run(&t, &command).await;
        let expected = format!("granted\n{}\n", ws.display());
        assert!(text(&r).starts_with(&expected), "{mode}: {}", text(&r));
        assert_eq!(
            std::fs::read_to_string(ws.join(format!("{mode}.txt"))).unwrap(),
            format!("{mode}\n")
        );
    }
}

#[tokio::test]
async fn a_read_only_root_below_tmp_refuses_writes_while_tmp_is_private() {
    let place = Place::new();
    assert!(place.path("").starts_with("/tmp"), "the root is below /tmp");
    let ro = place.folder("ro", 0o777, None);
    std::fs::write(ro.join("data.txt"), "original\n").unwrap();
    chmod(&ro.join("data.txt"), 0o666);
    // A file of the host's /tmp that nobody could read, were it there.
    let host = tempfile::NamedTempFile::new_in("/tmp").unwrap();
    chmod(host.path(), 0o644);
    let policy = shell("", "fs = [{ host = \"ro\", access = \"read-only\" }]", "");
    for (mode, t) in modes(&place, &policy) {
        for command in [
            "echo x >> data.txt",
            "truncate -s 0 data.txt",
            "rm data.txt",
            "touch new.txt",
        ] {
            let r = run(&t, command).await;
            assert!(
                text(&r).contains("Read-only file system"),
                "{mode}: {command}: {}",
                text(&r)
            );
        }
        let r = run(&t, "echo own > /tmp/own && cat /tmp/own data.txt").await;
        assert!(
            text(&r).starts_with("own\noriginal\n"),
            "{mode}: {}",
            text(&r)
        );
        let isolation = &r.as_ref().unwrap().details["isolation"];
        assert_eq!(isolation["private_tmp"], true, "{mode}: {isolation}");
        assert_eq!(isolation["missing"], json!([]), "{mode}: {isolation}");
        let r = run(&t, &format!("cat {}", host.path().display())).await;
        assert!(text(&r).contains("No such file"), "{mode}: {}", text(&r));
    }
    assert_eq!(
        std::fs::read_to_string(ro.join("data.txt")).unwrap(),
        "original\n"
    );
    let names: Vec<_> = std::fs::read_dir(&ro)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["data.txt"]);
}

#[tokio::test]
async fn a_root_with_a_guest_is_seen_there_and_not_at_its_host_path() {
    let place = Place::new();
    let ws = place.folder("ws", 0o777, None);
    std::fs::write(ws.join("f"), "seen\n").unwrap();
    let policy = shell(
        "",
        "fs = [{ host = \"ws\", guest = \"/workspace\", access = \"read-write\" }]",
        "",
    );
    for (mode, t) in modes(&place, &policy) {
        let command = format!("pwd && cat /workspace/f && echo {mode} > /workspace/{mode}");
        let r = run(&t, &command).await;
        assert!(
            text(&r).starts_with("/workspace\nseen\n"),
            "{mode}: {}",
            text(&r)
        );
        assert_eq!(
            std::fs::read_to_string(ws.join(mode)).unwrap(),
            format!("{mode}\n")
        );
        let r = run(&t, &format!("ls {}", ws.display())).await;
        assert!(text(&r).contains("No such file"), "{mode}: {}", text(&r));
    }
}

#[tokio::test]
async fn a_root_its_user_cannot_enter_is_refused_at_load() {
    if !nix::unistd::Uid::effective().is_root() {
        // Then the command runs as warden's own user, the folder's owner.
        return;
    }
    let place = Place::new();
    place.folder("ws", 0o700, None);
    let path = place.path("tool.toml");
    let policy = shell("", "fs = [{ host = \"ws\", access = \"read-only\" }]", "");
    std::fs::write(&path, &policy).unwrap();
    let backend = backend();
    let e = Policy::load(&path, &[&backend])
        .and_then(|p| backend.load(&Arc::new(p)).map(|_| ()))
        .expect_err("refused");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("chmod o+rx"), "{e}");
    assert!(
        e.message.contains(&place.path("ws").display().to_string()),
        "{e}"
    );
}
