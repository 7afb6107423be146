//! Roots copied into containers instead of mounted, as for an engine on another machine: the
//! local engine in copy mode (`WARDEN_DOCKER_FILES=copy`), with nothing of the host mounted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test panics on what it cannot go on without"
)]

mod common;

use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use common::{Harness, call, cmd, kind};
use futures::StreamExt;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden_core::{Status, ToolCall, ToolMessage};

/// The harness with its engine copying roots, as `WARDEN_DOCKER_FILES=copy` makes it.
async fn copying() -> Option<Harness> {
    // SAFETY: files.rs is a test binary of its own (Cargo.toml), so every test of the process
    // wants this one value; under `cargo test` another of its threads may read the environment
    // meanwhile, but none writes it.
    unsafe { std::env::set_var(warden_docker::FILES_ENV, "copy") };
    let h = common::harness().await?;
    assert_eq!(h.engine().files(), warden_docker::Files::Copied);
    Some(h)
}

macro_rules! copying_or_skip {
    () => {
        match copying().await {
            Some(h) => h,
            None => return,
        }
    };
}

/// [`copying_or_skip`] with a transaction store: the harness, and the store.
macro_rules! transacted_or_skip {
    () => {{
        let mut h = copying_or_skip!();
        let store = h.transactions();
        (h, store)
    }};
}

/// A session shell whose workdir `/rw` is `rw`, copied in and written back.
fn copy_back_session(h: &Harness, rw: &Path, limits: &str) -> warden_core::Dispatcher {
    let grants = format!("fs = [{}]", root(rw, "/rw", "read-write"));
    let executor = "session = true\ncopy_back = true\nworkdir = \"/rw\"";
    h.dispatcher("sh", &h.shell_policy(executor, &grants, limits))
}

/// A tool with a container per call whose `/rw` is `rw`, copied in and back.
fn copy_back_tool(h: &Harness, rw: &Path, limits: &str) -> warden_core::Dispatcher {
    let grants = format!("fs = [{}]", root(rw, "/rw", "read-write"));
    h.dispatcher("sh", &h.shell_policy("copy_back = true", &grants, limits))
}

/// A call of `d` that writes `partial` to `/rw/keep.txt`, then sleeps past its timeout: its
/// answer, once the container held the write.
async fn timed_out_mid_write(h: &Harness, d: &warden_core::Dispatcher) -> ToolMessage {
    let running = call(d, "sh", cmd("echo partial > /rw/keep.txt; sleep 100"));
    let (m, _) = tokio::join!(
        running,
        wait_for_in_container(h, "/rw/keep.txt", b"partial\n")
    );
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    m
}

fn root(host: &Path, guest: &str, access: &str) -> String {
    format!(
        "{{ host = \"{}\", guest = \"{guest}\", access = \"{access}\" }}",
        host.display()
    )
}

/// The mounts of a container, as the engine reports them: (type, source, destination).
async fn mounts_of(h: &Harness, id: &str) -> (Vec<(String, String, String)>, Vec<String>) {
    let docker = h.engine().client().await.unwrap();
    let c = docker.inspect_container(id, None).await.unwrap();
    let mounts = c
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.typ.unwrap_or_default(),
                m.source.unwrap_or_default(),
                m.destination.unwrap_or_default(),
            )
        })
        .collect();
    let binds = c.host_config.and_then(|h| h.binds).unwrap_or_default();
    (mounts, binds)
}

#[tokio::test]
async fn a_read_only_root_is_copied_in_unwritable_and_nothing_is_mounted() {
    // With a transaction store: a session with no read-write root has no transaction.
    let (h, _store) = transacted_or_skip!();
    let ro = h.folder("ro");
    std::fs::write(ro.join("keep.txt"), "original").unwrap();
    std::fs::create_dir(ro.join("sub")).unwrap();
    std::fs::write(ro.join("sub/deep.txt"), "deep").unwrap();
    std::os::unix::fs::symlink("sub/deep.txt", ro.join("inside")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ro.join("absolute")).unwrap();
    std::os::unix::fs::symlink("../outside.txt", ro.join("climbs")).unwrap();
    std::fs::write(h.dir.path().join("outside.txt"), "outside").unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(ro.join("fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let grants = format!("fs = [{}]", root(&ro, "/ro", "read-only"));
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("session = true\nworkdir = \"/\"", &grants, ""),
    );
    let m = call(
        &d,
        "sh",
        cmd("cat /ro/keep.txt; echo; cat /ro/inside; echo; ls -a /ro; \
             echo x > /ro/keep.txt || echo FILE-REFUSED; \
             touch /ro/new || echo NEW-REFUSED; \
             mkdir /ro/sub/dir || echo DIR-REFUSED; \
             chmod 777 /ro/keep.txt || echo CHMOD-REFUSED; \
             rm -f /ro/sub/deep.txt || echo RM-REFUSED; \
             cat /ro/keep.txt; echo; grep ' /ro ' /proc/mounts"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert_eq!(
        common::changes(&m),
        serde_json::Value::Null,
        "no change set"
    );
    let out = &m.content;
    assert!(out.starts_with("original\ndeep\n"), "{out}");
    for refused in [
        "FILE-REFUSED",
        "NEW-REFUSED",
        "DIR-REFUSED",
        "CHMOD-REFUSED",
        "RM-REFUSED",
    ] {
        assert!(out.contains(refused), "{refused}: {out}");
    }
    assert!(out.contains("\noriginal\n"), "unchanged inside: {out}");
    // What leads out of the root, and what is not a file, stay behind.
    for left in ["absolute", "climbs", "fifo"] {
        assert!(!out.contains(left), "{left} was copied: {out}");
    }
    assert!(out.contains(" /ro tmpfs "), "a tmpfs of its own: {out}");
    // The container holds no mount of the host's folders.
    let ids = h.containers().await;
    assert_eq!(ids.len(), 1);
    let (mounts, binds) = mounts_of(&h, &ids[0]).await;
    assert!(binds.is_empty(), "{binds:?}");
    assert!(
        mounts.iter().all(|(typ, source, _)| typ == "volume"
            && !source.starts_with(&h.dir.path().display().to_string())),
        "{mounts:?}"
    );
    assert!(
        mounts.iter().any(|(_, _, dest)| dest == "/ro"),
        "{mounts:?}"
    );
    d.close().await;
    assert_eq!(
        std::fs::read_to_string(ro.join("keep.txt")).unwrap(),
        "original"
    );
    h.assert_clean().await;
}

/// A policy's `files = "mount"` mounts its tool's roots whatever the engine's way: a
/// read-write root needs no write-back, and a write lands in the folder as it is made.
#[tokio::test]
async fn a_tool_whose_policy_mounts_its_roots_writes_the_folder_itself() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    let grants = format!("fs = [{}]", root(&rw, "/rw", "read-write"));
    let d = h.dispatcher("sh", &h.shell_policy("files = \"mount\"", &grants, ""));
    let m = call(&d, "sh", cmd("echo mounted > /rw/f")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert_eq!(std::fs::read_to_string(rw.join("f")).unwrap(), "mounted\n");
    let e = h
        .toolbox("sh", &h.shell_policy("files = \"nfs\"", &grants, ""))
        .err()
        .unwrap_or_default();
    assert!(e.contains("files must be \"copy\""), "{e}");
    h.assert_clean().await;
}

#[tokio::test]
async fn a_read_write_root_without_copy_back_is_refused_at_load() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    let grants = format!("fs = [\n{}\n]", root(&rw, "/rw", "read-write"));
    let e = h
        .toolbox("sh", &h.shell_policy("", &grants, ""))
        .err()
        .expect("refused");
    // The grant's line in the policy written by the harness: [grants] is line 7, fs line 8,
    // the root line 9.
    assert!(e.contains("sh.toml:9"), "{e}");
    for words in ["read-write root", "copy_back = true", "read-only"] {
        assert!(e.contains(words), "{words}: {e}");
    }
    let off = h
        .toolbox("sh", &h.shell_policy("copy_back = false", &grants, ""))
        .err()
        .expect("refused");
    assert!(off.contains("line 6 sets it to false"), "{off}");
    assert!(
        h.toolbox("sh", &h.shell_policy("copy_back = true", &grants, ""))
            .is_ok()
    );
}

#[tokio::test]
async fn a_call_writes_its_changes_back_and_the_audit_says_how() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("edit.txt"), "before").unwrap();
    std::fs::write(rw.join("gone.txt"), "bye").unwrap();
    std::fs::write(rw.join("same.txt"), "same").unwrap();
    std::fs::create_dir(rw.join("old")).unwrap();
    std::fs::write(rw.join("old/x"), "x").unwrap();
    std::fs::create_dir(rw.join("keep")).unwrap();
    let same_before = std::fs::metadata(rw.join("same.txt"))
        .unwrap()
        .modified()
        .unwrap();
    let grants = format!("fs = [{}]", root(&rw, "/rw", "read-write"));
    let policy = h.shell_policy("copy_back = true", &grants, "");
    let toolbox = h.toolbox("sh", &policy).unwrap();
    let lines: Vec<String> = toolbox
        .policies()
        .iter()
        .flat_map(|p| {
            p.report
                .lines
                .iter()
                .map(|l| format!("{} {}", l.label, l.text))
        })
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("root ") && l.contains("copied in, written back at the end")),
        "{lines:?}"
    );
    let d = h.dispatcher("sh", &policy);
    let m = call(
        &d,
        "sh",
        cmd(
            "echo after > /rw/edit.txt; rm /rw/gone.txt; rm -r /rw/old; \
             mkdir -p /rw/new/deeper; echo made > /rw/new/deeper/file; \
             ln -s new/deeper/file /rw/link; ln -s /etc/passwd /rw/escape; cat /rw/same.txt; \
             echo shared > /rw/shared.txt; chmod 666 /rw/shared.txt; chmod 700 /rw/keep; \
             chmod 777 /rw/new; mkdir /rw/sealed; echo s > /rw/sealed/f; chmod 555 /rw/sealed",
        ),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.contains("written back to"), "{}", m.content);
    assert!(
        m.content.contains("escape"),
        "the escaping link is named: {}",
        m.content
    );
    let read = |p: &str| std::fs::read_to_string(rw.join(p)).unwrap();
    assert_eq!(read("edit.txt"), "after\n");
    assert_eq!(read("new/deeper/file"), "made\n");
    assert_eq!(
        std::fs::read_link(rw.join("link")).unwrap(),
        Path::new("new/deeper/file")
    );
    assert!(!rw.join("gone.txt").exists() && !rw.join("old").exists());
    assert!(std::fs::symlink_metadata(rw.join("escape")).is_err());
    assert_eq!(
        std::fs::metadata(rw.join("same.txt"))
            .unwrap()
            .modified()
            .unwrap(),
        same_before,
        "an unchanged file is not rewritten"
    );
    // Modes as the container left them, whatever warden's umask: a file's, a new folder's,
    // a folder's that only its mode changed, one's made unwritable after its file.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |p: &str| std::fs::metadata(rw.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        ["shared.txt", "new", "keep", "sealed"].map(mode),
        [0o666, 0o777, 0o700, 0o555]
    );
    assert_eq!(read("sealed/f"), "s\n");
    // Written as the folder's owner, as a mount would have it; no temp file left.
    let owner = std::fs::metadata(&rw).unwrap().uid();
    assert_eq!(
        std::fs::metadata(rw.join("new/deeper/file")).unwrap().uid(),
        owner
    );
    let names: Vec<_> = std::fs::read_dir(&rw)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".warden-")),
        "{names:?}"
    );
    h.assert_clean().await;
}

#[tokio::test]
async fn a_session_writes_back_at_its_end_only() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    let d = copy_back_session(&h, &rw, "");
    let m = call(&d, "sh", cmd("echo one > made.txt && cat made.txt")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(
        !rw.join("made.txt").exists(),
        "a copy, not the host's folder"
    );
    d.close().await;
    assert_eq!(
        std::fs::read_to_string(rw.join("made.txt")).unwrap(),
        "one\n"
    );
    h.assert_clean().await;
}

/// A tar of one file, for the engine's archive upload.
fn tar_of(name: &str, text: &str) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append_data(&mut header, name, text.as_bytes()).unwrap();
    b.into_inner().unwrap()
}

/// Once the container of this harness holds `path` with `text`, makes the host's change
/// (`meanwhile`), then puts the file `go` into the container's copy of `dir`: the word its
/// command waits for.
async fn go_once_seen(h: &Harness, path: &str, text: &[u8], meanwhile: impl FnOnce(), dir: &str) {
    let id = wait_for_in_container(h, path, text).await;
    meanwhile();
    let docker = h.engine().client().await.unwrap();
    let options = UploadToContainerOptionsBuilder::new().path(dir).build();
    docker
        .upload_to_container(
            &id,
            Some(options),
            bollard::body_full(tar_of("go", "").into()),
        )
        .await
        .unwrap();
}

/// A per-call tool over two read-write roots, `rw` (`both.txt` and `mine.txt`) and `other`
/// (`other.txt`), every file `original`, whose call changes all three; the host changes
/// `both.txt` too while the call waits, and the call then prints `done`. Answers the roots
/// and the call's answer.
async fn two_roots_changed_by_both(h: &Harness) -> (PathBuf, PathBuf, ToolMessage) {
    let rw = h.folder("rw");
    std::fs::write(rw.join("both.txt"), "original").unwrap();
    std::fs::write(rw.join("mine.txt"), "original").unwrap();
    let other = h.folder("other");
    std::fs::write(other.join("other.txt"), "original").unwrap();
    let grants = format!(
        "fs = [{}, {}]",
        root(&rw, "/rw", "read-write"),
        root(&other, "/other", "read-write")
    );
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("copy_back = true", &grants, "timeout = \"60s\""),
    );
    let command = "echo container > /rw/both.txt; echo container > /rw/mine.txt; \
                   echo container > /other/other.txt; \
                   until [ -e /rw/go ]; do sleep 0.1; done; echo done";
    let running = d.call(ToolCall::new("c1", "sh", &json!({ "command": command })));
    let host = || std::fs::write(rw.join("both.txt"), "host").unwrap();
    let seen = go_once_seen(h, "/rw/mine.txt", b"container\n", host, "/rw");
    let (m, ()) = tokio::join!(running, seen);
    (rw, other, m)
}

#[tokio::test]
async fn a_conflict_refuses_the_whole_write_back_and_keeps_the_containers_copy() {
    let h = copying_or_skip!();
    // A second root, changed only by the container: refused with the first.
    let (rw, other, m) = two_roots_changed_by_both(&h).await;
    assert_eq!(kind(&m), "tool_error", "{}", m.content);
    let e = m.error.as_ref().unwrap();
    assert!(
        e.message.contains("nothing was written back"),
        "{}",
        e.message
    );
    assert!(e.message.contains("both.txt"), "{}", e.message);
    assert_eq!(
        e.details["conflicts"],
        json!([rw.join("both.txt").display().to_string()]),
        "{:?}",
        e.details
    );
    assert!(
        e.details["shell"]["stdout"]
            .as_str()
            .unwrap()
            .contains("done"),
        "{:?}",
        e.details
    );
    // Nothing written: the host's change stays, the container's other change is not applied.
    let read = |p: &str| std::fs::read_to_string(rw.join(p)).unwrap();
    assert_eq!(read("both.txt"), "host");
    assert_eq!(read("mine.txt"), "original");
    assert!(!rw.join("go").exists());
    assert_eq!(
        std::fs::read_to_string(other.join("other.txt")).unwrap(),
        "original"
    );
    assert_eq!(
        e.details["kept"].as_array().unwrap().len(),
        2,
        "{:?}",
        e.details
    );
    // The container's copy is kept where the error says.
    let kept = e.details["kept"][0].as_str().unwrap();
    let mut archive = tar::Archive::new(std::fs::File::open(kept).unwrap());
    let mut found = String::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().ends_with("both.txt") {
            std::io::Read::read_to_string(&mut entry, &mut found).unwrap();
        }
    }
    assert_eq!(found, "container\n");
    for kept in e.details["kept"].as_array().unwrap() {
        std::fs::remove_file(kept.as_str().unwrap()).unwrap();
    }
    h.assert_clean().await;
}

#[tokio::test]
async fn roots_past_the_copy_limit_are_refused_naming_the_root_its_size_and_the_setting() {
    let h = copying_or_skip!();
    let small = h.folder("small");
    let big = h.folder("big");
    std::fs::write(small.join("a"), vec![b'a'; 600 << 10]).unwrap();
    std::fs::write(big.join("b"), vec![b'b'; 600 << 10]).unwrap();
    let grants = format!(
        "fs = [{}, {}]",
        root(&small, "/small", "read-only"),
        root(&big, "/big", "read-only")
    );
    let d = h.dispatcher("sh", &h.shell_policy("copy_limit = \"1MiB\"", &grants, ""));
    let m = call(&d, "sh", cmd("echo never")).await;
    assert_eq!(kind(&m), "limit_exceeded", "{}", m.content);
    let e = m.error.as_ref().unwrap();
    assert!(
        e.message.contains(&big.display().to_string()),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("600KiB") && e.message.contains("1MiB"),
        "{}",
        e.message
    );
    assert!(e.message.contains("copy_limit = \"2MiB\""), "{}", e.message);
    // Within the limit, both are there.
    let d = h.dispatcher("sh", &h.shell_policy("copy_limit = \"2MiB\"", &grants, ""));
    let m = call(&d, "sh", cmd("wc -c /small/a /big/b")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.contains("1228800 total"), "{}", m.content);
    h.assert_clean().await;
}

#[tokio::test]
async fn a_container_that_ends_before_its_write_back_changes_and_deletes_nothing() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("keep.txt"), "original").unwrap();
    let d = copy_back_tool(&h, &rw, "");
    // The command kills the shell that holds the container open: the container stops, and
    // its copy with it, before warden reads it back. Read then, the engine would hand over
    // an empty folder, which must not empty the host's.
    let m = call(
        &d,
        "sh",
        cmd("echo changed > /rw/keep.txt; echo new > /rw/new.txt; kill -9 $PPID; sleep 5"),
    )
    .await;
    assert_eq!(kind(&m), "tool_error", "{}", m.content);
    assert!(
        m.content.contains("ended before warden could read back"),
        "{}",
        m.content
    );
    assert_eq!(
        std::fs::read_to_string(rw.join("keep.txt")).unwrap(),
        "original"
    );
    assert!(!rw.join("new.txt").exists());
    h.assert_clean().await;
}

#[tokio::test]
async fn a_session_reset_answers_how_its_write_back_went() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("both.txt"), "original").unwrap();
    std::fs::write(rw.join("mine.txt"), "original").unwrap();
    let d = copy_back_session(&h, &rw, "");
    let m = call(
        &d,
        "sh",
        cmd("echo container > both.txt; echo container > mine.txt"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    std::fs::write(rw.join("both.txt"), "host").unwrap();
    // `restart` ends the container: its write-back is refused, and the answer says why.
    let m = call(&d, "sh", json!({ "restart": true })).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.contains("not written back"), "{}", m.content);
    assert!(m.content.contains("both.txt"), "{}", m.content);
    let read = |p: &str| std::fs::read_to_string(rw.join(p)).unwrap();
    assert_eq!(
        (read("both.txt"), read("mine.txt")),
        ("host".into(), "original".into())
    );
    let kept = m
        .content
        .split("kept in ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    std::fs::remove_file(kept).unwrap();
    // The fresh container has the host's files; `exit` stops it before anything is read
    // back, and the answer says so.
    let m = call(&d, "sh", cmd("cat both.txt; echo again > mine.txt; exit 3")).await;
    assert!(m.content.contains("\nhost\n"), "{}", m.content);
    assert!(m.content.contains("shell ended"), "{}", m.content);
    assert!(
        m.content.contains("ended before warden could read back"),
        "{}",
        m.content
    );
    assert_eq!(read("mine.txt"), "original");
    d.close().await;
    h.assert_clean().await;
}

/// Waits until the container of this harness holds `path` with `text` in it: its command
/// ran that far.
async fn wait_for_in_container(h: &Harness, path: &str, text: &[u8]) -> String {
    let docker = h.engine().client().await.unwrap();
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never saw {path}"
        );
        if let Some(id) = h.containers().await.into_iter().next() {
            let options = DownloadFromContainerOptionsBuilder::new()
                .path(path)
                .build();
            let mut tar = Vec::new();
            let mut s = docker.download_from_container(&id, Some(options));
            while let Some(Ok(chunk)) = s.next().await {
                tar.extend_from_slice(&chunk);
            }
            if tar.windows(text.len()).any(|w| w == text) {
                return id;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_timed_out_call_writes_nothing_back() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    let d = copy_back_tool(&h, &rw, "timeout = \"5s\"");
    // The command did write, inside, before its deadline.
    let m = timed_out_mid_write(&h, &d).await;
    // The executor's own answer says so, when it beats the dispatcher's deadline.
    if m.content.contains("its container was killed") {
        assert!(
            m.content.contains("nothing was written back"),
            "{}",
            m.content
        );
    }
    assert!(!rw.join("keep.txt").exists());
    h.assert_clean().await;
}

#[tokio::test]
async fn a_session_reset_by_a_timeout_still_writes_back_what_the_session_wrote() {
    let h = copying_or_skip!();
    let rw = h.folder("rw");
    let d = copy_back_session(&h, &rw, "timeout = \"5s\"");
    // Big enough that reading it back outlasts what is left of the timed-out call's time.
    let m = call(
        &d,
        "sh",
        cmd("head -c 40000000 /dev/urandom > big; echo kept > kept.txt"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    // A loop of the shell's own builtins: the timeout takes the shell down.
    let m = call(&d, "sh", cmd("while :; do :; done")).await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    // Written back at the reset, in a task of its own when the call's time ran out first.
    let started = Instant::now();
    while !rw.join("kept.txt").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never written back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        std::fs::read_to_string(rw.join("kept.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(std::fs::metadata(rw.join("big")).unwrap().len(), 40_000_000);
    d.close().await;
    h.assert_clean().await;
}

/// Every entry below `root`: its content (or link target, or "dir") and mode.
fn tree(root: &Path) -> std::collections::BTreeMap<String, (String, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut tree = std::collections::BTreeMap::new();
    let mut folders = vec![root.to_owned()];
    while let Some(dir) = folders.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let seen = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                folders.push(path.clone());
                "dir".to_owned()
            } else {
                std::fs::read_to_string(&path).unwrap()
            };
            tree.insert(rel, (seen, meta.mode() & 0o7777));
        }
    }
    tree
}

/// With a transaction store, a per-call container's copies are a transaction: what the copy
/// changed is the call's change set, committed once read back (a failing status too), and
/// undone byte-exact. A policy may have its changes reviewed.
#[tokio::test]
async fn a_copied_call_is_a_transaction_its_changes_listed_committed_and_undone() {
    let (h, store) = transacted_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("edit.txt"), "before").unwrap();
    std::fs::write(rw.join("gone.txt"), "bye").unwrap();
    std::fs::write(rw.join("same.txt"), "same").unwrap();
    std::fs::create_dir(rw.join("old")).unwrap();
    std::fs::write(rw.join("old/x"), "x").unwrap();
    std::fs::create_dir(rw.join("keep")).unwrap();
    let before = tree(&rw);
    let grants = format!("fs = [{}]", root(&rw, "/rw", "read-write"));
    let policy = h.shell_policy("copy_back = true", &grants, "");
    let reviewed = format!("{policy}[review]\nchanges = true\n");
    assert!(
        h.toolbox("sh", &reviewed).is_ok(),
        "its changes can be reviewed"
    );
    let d = h.dispatcher("sh", &policy);
    let m = call(
        &d,
        "sh",
        cmd(
            "echo after > /rw/edit.txt; chmod 600 /rw/edit.txt; rm /rw/gone.txt; rm -r /rw/old; \
             mkdir -p /rw/new/deeper; echo made > /rw/new/deeper/file; \
             ln -s new/deeper/file /rw/link; ln -s /etc/passwd /rw/escape; \
             chmod 700 /rw/keep; chmod 777 /rw/new",
        ),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert_eq!(
        common::paths(&common::changes(&m)),
        [
            ("old/x", "removed"),
            ("old", "removed"),
            ("gone.txt", "removed"),
            ("edit.txt", "modified"),
            ("keep", "modified"),
            ("link", "added"),
            ("new", "added"),
            ("new/deeper", "added"),
            ("new/deeper/file", "added"),
        ]
        .map(|(p, c)| (p.to_owned(), c.to_owned()))
    );
    assert!(
        m.content.contains("escape"),
        "the escaping link is named: {}",
        m.content
    );
    let after = tree(&rw);
    assert_eq!(after["edit.txt"], ("after\n".into(), 0o600));
    assert_eq!((after["keep"].1, after["new"].1), (0o700, 0o777));
    assert_eq!(after["new/deeper/file"].0, "made\n");
    assert_eq!(after["link"].0, "-> new/deeper/file");
    assert!(!after.contains_key("gone.txt") && !after.contains_key("old"));
    assert!(!after.contains_key("escape"));
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&rw).unwrap().uid();
    assert_eq!(
        std::fs::metadata(rw.join("new/deeper/file")).unwrap().uid(),
        owner
    );

    let call_id = store.records().unwrap().pop().unwrap().call_id;
    store.undo(&call_id).unwrap();
    assert_eq!(tree(&rw), before, "undone byte-exact");

    // A failing exit status is the command's own end: it commits.
    let m = call(&d, "sh", cmd("echo failed > /rw/f; exit 3")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    assert_eq!(std::fs::read_to_string(rw.join("f")).unwrap(), "failed\n");
    h.assert_clean().await;
}

/// With a transaction store, a per-call container whose copy changed a path the host changed
/// meanwhile is a `conflict`: nothing of it applied, in any root, its command's answer quoted.
#[tokio::test]
async fn a_copied_call_that_changed_what_the_host_changed_meanwhile_is_a_conflict() {
    let (h, _store) = transacted_or_skip!();
    let (rw, other, m) = two_roots_changed_by_both(&h).await;
    assert_eq!(kind(&m), "conflict", "{}", m.content);
    assert!(m.content.contains("both.txt"), "{}", m.content);
    assert!(
        m.content.contains("done"),
        "its command's answer: {}",
        m.content
    );
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&rw.join("both.txt")), "host");
    assert_eq!(read(&rw.join("mine.txt")), "original");
    assert_eq!(read(&other.join("other.txt")), "original");
    assert!(!rw.join("go").exists());
    h.assert_clean().await;
}

/// With a transaction store, a per-call container warden ends leaves nothing of its copies
/// behind: its timeout, or its shell killed before its copies were read back.
#[tokio::test]
async fn a_copied_call_warden_ends_leaves_nothing_and_says_so() {
    let (h, _store) = transacted_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("keep.txt"), "original").unwrap();
    let before = tree(&rw);
    let d = copy_back_tool(&h, &rw, "timeout = \"5s\"");
    let m = timed_out_mid_write(&h, &d).await;
    // The executor's own answer says so, when it beats the dispatcher's deadline.
    if m.content.contains("its container was killed") {
        assert!(m.content.contains("Nothing it wrote"), "{}", m.content);
        assert_eq!(common::changes(&m), json!({ "discarded": true }));
    }
    assert_eq!(tree(&rw), before);

    let m = call(
        &d,
        "sh",
        cmd("echo changed > /rw/keep.txt; echo new > /rw/new.txt; kill -9 $PPID; sleep 5"),
    )
    .await;
    assert_eq!(kind(&m), "tool_error", "{}", m.content);
    assert!(
        m.content.contains("ended before warden could read back"),
        "{}",
        m.content
    );
    assert_eq!(common::changes(&m), json!({ "discarded": true }));
    assert_eq!(tree(&rw), before);
    h.assert_clean().await;
}

/// With a transaction store, a session's commands over copied roots are transactions: each
/// command's changes reach the host as it ends, listed in its answer and undoable. Roots
/// changed otherwise (an undo) give the next command fresh copies; a change the host made
/// while a command ran, to a path it changed, is a `conflict`, and the session starts afresh
/// from the host's files.
#[tokio::test]
async fn a_copied_sessions_commands_are_committed_each_as_it_ends() {
    let (h, store) = transacted_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("shared.txt"), "original").unwrap();
    let d = copy_back_session(&h, &rw, "timeout = \"60s\"");
    let read = |p: &str| std::fs::read_to_string(rw.join(p)).ok();
    let m = call(&d, "sh", cmd("echo one > made.txt; cd /tmp")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert_eq!(
        common::paths(&common::changes(&m)),
        [("made.txt".to_owned(), "added".to_owned())]
    );
    assert_eq!(
        read("made.txt").as_deref(),
        Some("one\n"),
        "committed as it ended"
    );

    // The shell lives on (its `cd` kept); only what changed since the last answer is listed.
    let m = call(
        &d,
        "sh",
        cmd("pwd; echo two >> /rw/made.txt; echo x > /rw/x"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.starts_with("/tmp"), "{}", m.content);
    assert_eq!(
        common::paths(&common::changes(&m)),
        [("made.txt", "modified"), ("x", "added")].map(|(p, c)| (p.to_owned(), c.to_owned()))
    );

    // Undone, the roots are no longer what the copies hold: the next command runs with fresh
    // ones, and says so.
    let second = store.records().unwrap().pop().unwrap().call_id;
    store.undo(&second).unwrap();
    assert_eq!(read("made.txt").as_deref(), Some("one\n"));
    let m = call(&d, "sh", cmd("pwd; cat made.txt; ls")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.contains("out of date"), "{}", m.content);
    assert!(
        m.content.contains("/rw\none\n"),
        "fresh copies: {}",
        m.content
    );
    assert!(!m.content.contains("\nx\n"), "{}", m.content);
    // Unchanged roots keep the shell.
    let m = call(&d, "sh", cmd("cd /tmp")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let m = call(&d, "sh", cmd("pwd")).await;
    assert!(m.content.starts_with("/tmp"), "{}", m.content);

    // The host changes a file while a command that changes it too runs: refused, and the
    // session starts afresh with the host's files.
    let command = "echo session > /rw/shared.txt; echo y > /rw/y; \
                   until [ -e /rw/go ]; do sleep 0.1; done";
    let running = call(&d, "sh", cmd(command));
    let host = || std::fs::write(rw.join("shared.txt"), "host").unwrap();
    let (m, ()) = tokio::join!(running, go_once_seen(&h, "/rw/y", b"y\n", host, "/rw"));
    assert_eq!(kind(&m), "conflict", "{}", m.content);
    assert!(m.content.contains("shared.txt"), "{}", m.content);
    assert!(m.content.contains("session was reset"), "{}", m.content);
    assert_eq!(read("shared.txt").as_deref(), Some("host"));
    assert_eq!(read("y"), None);
    assert_eq!(read("go"), None);
    let m = call(&d, "sh", cmd("pwd; cat shared.txt; ls")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(
        m.content.starts_with("/rw\nhost"),
        "a fresh shell and copy: {}",
        m.content
    );
    assert!(!m.content.contains("\ny\n"), "{}", m.content);
    d.close().await;
    h.assert_clean().await;
}

/// With a transaction store, a session's command that its timeout ended leaves nothing of
/// what it wrote, on the host or in the session's next sandbox.
#[tokio::test]
async fn a_copied_sessions_command_ended_by_its_timeout_leaves_nothing() {
    let (h, _store) = transacted_or_skip!();
    let rw = h.folder("rw");
    std::fs::write(rw.join("keep.txt"), "original").unwrap();
    let d = copy_back_session(&h, &rw, "timeout = \"5s\"");
    let m = call(&d, "sh", cmd("echo kept > kept.txt")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let running = call(
        &d,
        "sh",
        cmd("echo partial > keep.txt; echo new > new.txt; sleep 100"),
    );
    let (m, _) = tokio::join!(
        running,
        wait_for_in_container(&h, "/rw/keep.txt", b"partial\n")
    );
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    let read = |p: &str| std::fs::read_to_string(rw.join(p)).ok();
    assert_eq!(read("keep.txt").as_deref(), Some("original"));
    assert_eq!(read("new.txt"), None);
    assert_eq!(read("kept.txt").as_deref(), Some("kept\n"));
    let m = call(&d, "sh", cmd("cat keep.txt; ls")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert!(m.content.starts_with("original"), "{}", m.content);
    assert!(!m.content.contains("new.txt"), "{}", m.content);
    d.close().await;
    assert_eq!(read("keep.txt").as_deref(), Some("original"));
    h.assert_clean().await;
}
