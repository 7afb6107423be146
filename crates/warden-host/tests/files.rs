//! The filesystem boundary of a host command: the granted roots with their access, the
//! system folders to start programs, a private /tmp, nothing else (see also `roots`). Targets outside the roots are made
//! world-readable and world-writable, so only the sandbox can be what stops the command.

use crate::common::*;
use serde_json::json;
use warden_core::ErrorKind;

#[tokio::test]
async fn writing_outside_the_granted_roots_fails() {
    let place = Place::new();
    place.folder("w", 0o777, None);
    let outside = place.folder("outside", 0o777, None);
    let (tool, limits) = place.tool(&shell(
        "",
        "fs = [{ host = \"w\", access = \"read-write\" }]",
        "",
    ));
    for target in [
        outside.join("planted"),
        "/var/tmp/warden-host-escape".into(),
        "/dev/shm/warden-host-escape".into(),
    ] {
        let command = format!(
            "echo pwned > {0}; ln -s /etc {0}.lnk; touch {0}.t",
            target.display()
        );
        let r = call(&tool, &limits, json!({ "command": command })).await;
        let e = r.expect_err("every write must fail");
        assert_eq!(e.kind, ErrorKind::ExitStatus, "{}", e.message);
        // Landlock's refusal, or a folder the sandbox's root does not have.
        assert!(
            e.message.contains("Permission denied") || e.message.contains("nonexistent"),
            "{}",
            e.message
        );
        for suffix in ["", ".lnk", ".t"] {
            let p = format!("{}{suffix}", target.display());
            assert!(
                std::fs::symlink_metadata(&p).is_err(),
                "{p} was created outside the roots"
            );
        }
    }
    // The granted root itself takes writes: the denials above are the boundary, not a
    // broken sandbox.
    let ok = call(
        &tool,
        &limits,
        json!({"command": "echo kept > note && cat note"}),
    )
    .await;
    assert!(text(&ok).contains("kept"), "{}", text(&ok));
    assert_eq!(
        std::fs::read_to_string(place.path("w/note")).unwrap(),
        "kept\n"
    );
}

#[tokio::test]
async fn reading_a_secret_outside_the_roots_fails() {
    let place = Place::new();
    place.folder("w", 0o755, None);
    let secrets = place.folder("secrets", 0o755, None);
    let secret = secrets.join("token");
    std::fs::write(&secret, "MARKER-7f3a91\n").unwrap();
    chmod(&secret, 0o644);
    let (tool, limits) = place.tool(&shell(
        "",
        "fs = [{ host = \"w\", access = \"read-only\" }]",
        "",
    ));
    let attempts = [
        format!("cat {}", secret.display()),
        format!("cd {} && cat token", secrets.display()),
        format!("ls {}", secrets.display()),
        // `..` from inside the root and a symlink planted by the host both lead outside.
        "cat ../secrets/token".into(),
        "cat /etc/shadow /root/.bashrc /proc/1/environ".into(),
    ];
    for command in attempts {
        let r = call(&tool, &limits, json!({ "command": command })).await;
        let t = text(&r);
        assert!(
            !t.contains("MARKER-7f3a91"),
            "{command} read the secret: {t}"
        );
        assert!(!t.contains("token\n"), "{command} listed the secret: {t}");
        assert!(r.is_err(), "{command} should fail: {t}");
    }
    std::os::unix::fs::symlink(&secret, place.path("w/link")).unwrap();
    let r = call(&tool, &limits, json!({"command": "cat link"})).await;
    assert!(!text(&r).contains("MARKER-7f3a91"), "{}", text(&r));
    // Granting the folder makes the same read work: the refusal was the sandbox's.
    let (granted, limits) = place.tool(&shell(
        "",
        "fs = [{ host = \"w\", access = \"read-only\" }, { host = \"secrets\", access = \"read-only\" }]",
        "",
    ));
    let r = call(
        &granted,
        &limits,
        json!({"command": format!("cat {}", secret.display())}),
    )
    .await;
    assert!(text(&r).contains("MARKER-7f3a91"), "{}", text(&r));
}

#[tokio::test]
async fn a_read_only_root_refuses_every_kind_of_write() {
    let place = Place::new();
    // World-writable, so that Unix permissions would allow all of it.
    let w = place.folder("w", 0o777, None);
    std::fs::write(w.join("data.txt"), "original\n").unwrap();
    chmod(&w.join("data.txt"), 0o666);
    let (tool, limits) = place.tool(&shell(
        "",
        "fs = [{ host = \"w\", access = \"read-only\" }]",
        "",
    ));
    for command in [
        "echo x >> data.txt",
        "echo x > data.txt",
        "truncate -s 0 data.txt",
        "rm data.txt",
        "mv data.txt moved.txt",
        "touch new.txt",
        "mkdir sub",
        "ln -s data.txt l",
    ] {
        let r = call(&tool, &limits, json!({ "command": command })).await;
        assert!(r.is_err(), "{command} succeeded on a read-only root");
    }
    assert_eq!(
        std::fs::read_to_string(w.join("data.txt")).unwrap(),
        "original\n"
    );
    let names: Vec<_> = std::fs::read_dir(&w)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["data.txt"]);
    let r = call(&tool, &limits, json!({"command": "cat data.txt"})).await;
    assert!(text(&r).contains("original"), "{}", text(&r));
}

#[tokio::test]
async fn tmp_is_the_calls_own() {
    let place = Place::new();
    let (tool, limits) = place.tool(&shell("tmp = \"4MiB\"", "", ""));
    let marker = format!("warden-private-tmp-{}", std::process::id());
    let r = call(
        &tool,
        &limits,
        json!({"command": format!("echo kept > /tmp/{marker} && cat /tmp/{marker}")}),
    )
    .await;
    assert!(text(&r).contains("kept"), "{}", text(&r));
    // Not on the host's /tmp, and gone for the next call.
    assert!(!std::path::Path::new("/tmp").join(&marker).exists());
    let r = call(
        &tool,
        &limits,
        json!({"command": format!("cat /tmp/{marker}")}),
    )
    .await;
    assert!(r.is_err(), "the next call saw the file: {}", text(&r));
    // Its size is the policy's.
    let r = call(
        &tool,
        &limits,
        json!({"command": "head -c 8000000 /dev/zero > /tmp/big; echo status $?"}),
    )
    .await;
    assert!(text(&r).contains("No space left"), "{}", text(&r));
}
