//! warden's Debian image on a real engine: real tools (python3, pip, git, curl) as nobody under a
//! read-only root, the network closed unless opened — proved with a client that reaches a server
//! of the test's once the network is open — and the build's cache and its errors. The hardening
//! checks shared with the busybox image are in `docker.rs` (`debian::…`).

use crate::common::{Sandbox, call, cmd, kind};
use warden_core::Status;
use warden_docker::{DEBIAN_IMAGE, DEBIAN_REPOSITORY, DebianRecipe, ImageError};

/// A commit by the model's agent, as git wants one.
const GIT_IDENTITY: &str = "export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid \
                            GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid";

#[tokio::test]
async fn python_pip_git_and_curl_run_as_nobody_under_a_read_only_root() {
    let h = docker_or_skip!(Sandbox::Debian);
    let d = h.dispatcher("sh", &h.shell_policy("workdir = \"/tmp\"", "", ""));
    let m = call(
        &d,
        "sh",
        cmd(&format!(
            "set -e; id -u; echo \"HOME=$HOME\"; \
             python3 -c 'import json, sys; print(json.dumps({{\"python\": sys.version_info[0]}}))'; \
             pip --version; curl --version | head -n 1; wget --version | head -n 1; \
             bash -c 'echo \"bash ${{BASH_VERSINFO[0]}}\"'; \
             python3 -m venv /tmp/venv && /tmp/venv/bin/python -c 'print(\"venv ok\")'; \
             {GIT_IDENTITY}; git init -q scratch && cd scratch && echo one > f && git add f && \
             git commit -qm in-tmp && git log --format=%s"
        )),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    for expected in [
        "65534\n",
        "HOME=/tmp\n",
        "{\"python\": 3}\n",
        "pip ",
        "curl ",
        "GNU Wget",
        "bash 5\n",
        "venv ok\n",
        "in-tmp\n",
    ] {
        assert!(m.content.contains(expected), "{expected}: {}", m.content);
    }

    // The image's own files stay as they are, and nobody stays nobody.
    let m = call(
        &d,
        "sh",
        cmd("touch /usr/bin/evil || echo ROOT-REFUSED; \
             python3 -c 'import os; os.setuid(0)' 2>&1 | tail -n 1; \
             su -c id 2>&1 </dev/null | tail -n 1; id -u"),
    )
    .await;
    assert!(m.content.contains("ROOT-REFUSED"), "{}", m.content);
    assert!(m.content.contains("Read-only file system"), "{}", m.content);
    assert!(m.content.contains("PermissionError"), "{}", m.content);
    assert!(!m.content.contains("uid=0"), "{}", m.content);
    assert!(m.content.contains("failure\n65534\n"), "{}", m.content);
    h.assert_clean().await;
}

#[tokio::test]
async fn git_commits_in_a_granted_read_write_root() {
    let h = docker_or_skip!(Sandbox::Debian);
    let work = h.folder("work");
    let grants = format!(
        "fs = [{{ host = \"{}\", guest = \"/work\", access = \"read-write\" }}]",
        work.display()
    );
    let d = h.dispatcher("sh", &h.shell_policy("workdir = \"/work\"", &grants, ""));
    let m = call(
        &d,
        "sh",
        cmd(&format!(
            "set -e; {GIT_IDENTITY}; git init -q && echo two > g && git add g && \
             git commit -qm in-work && git log --format=%s"
        )),
    )
    .await;
    assert_eq!(m.content, "in-work\n[exit code 0]");
    // The repository is on the host, in the granted folder.
    assert!(work.join(".git/HEAD").exists());
    h.assert_clean().await;
}

/// The shell's network tests: the same two clients (curl, python) that reach a server of the
/// test's with `network = "unrestricted"` do not reach it without, so an open network would
/// fail the test rather than pass unseen.
#[tokio::test]
async fn the_network_is_closed_unless_opened_and_the_same_client_reaches_a_server_once_open() {
    let h = docker_or_skip!(Sandbox::Debian);
    let server = h.host_server().await;
    let probe = format!(
        "curl -sS -m 5 {url}; echo \" curl=$?\"; \
         python3 -c 'import urllib.request as u; print(u.urlopen(\"{url}\", timeout=5).read().decode())' \
         2>&1 | tail -n 1; echo \"net: $(ls /sys/class/net | tr '\\n' ' ')\"",
        url = server.url
    );

    let open = h.dispatcher(
        "sh",
        &h.shell_policy("network = \"unrestricted\"", "", "timeout = \"20s\""),
    );
    let m = call(&open, "sh", cmd(&probe)).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    assert_eq!(
        m.content.matches(&server.marker).count(),
        2,
        "both clients reach the server once the network is open: {}",
        m.content
    );
    assert!(m.content.contains(" curl=0"), "{}", m.content);
    assert_eq!(server.hits(), 2);

    for mode in ["", "session = true"] {
        let closed = h.dispatcher("sh", &h.shell_policy(mode, "", "timeout = \"20s\""));
        let m = call(&closed, "sh", cmd(&probe)).await;
        assert_eq!(m.status, Status::Success, "{mode}: {}", m.content);
        assert!(
            !m.content.contains(&server.marker),
            "{mode}: reached: {}",
            m.content
        );
        // curl's "couldn't connect": no route, not a slow refusal.
        assert!(m.content.contains(" curl=7"), "{mode}: {}", m.content);
        assert!(m.content.contains("URLError"), "{mode}: {}", m.content);
        assert!(
            m.content.contains("net: lo \n"),
            "{mode}: only loopback: {}",
            m.content
        );
        closed.close().await;
    }
    assert_eq!(server.hits(), 2, "no request arrived without the network");
    h.assert_clean().await;
}

#[tokio::test]
async fn a_second_build_of_the_same_recipe_is_skipped() {
    let h = docker_or_skip!(Sandbox::Debian);
    let recipe = DebianRecipe::from_machine().expect("this machine's apt sources");
    let tag = format!("{DEBIAN_REPOSITORY}:{}", recipe.digest());
    let docker = h.engine().client().await.unwrap();
    if docker.inspect_image(&tag).await.is_err() && !crate::common::mmdebstrap_installed() {
        // The image on the engine is of another recipe, and this one cannot be built here.
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true and mmdebstrap is not installed"
        );
        eprintln!("SKIPPED: {tag} is not built and mmdebstrap is not installed");
        return;
    }
    let build = || {
        warden_docker::build_debian_image(
            h.engine(),
            &recipe,
            DEBIAN_REPOSITORY,
            false,
            &crate::common::show,
        )
    };
    let first = build().await.expect("the Debian image builds or is there");
    let again = build().await.expect("the Debian image is there");
    assert!(again.built.is_none(), "rebuilt: {again:?}");
    assert_eq!(again.id, first.id);
    assert_eq!(again.tag, tag);
    assert_eq!(again.latest, DEBIAN_IMAGE);
    let latest = docker.inspect_image(DEBIAN_IMAGE).await.unwrap();
    assert_eq!(latest.id.as_deref(), Some(first.id.as_str()));
    let labels = latest.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(
        labels.get("warden.image").map(String::as_str),
        Some("debian")
    );
    assert_eq!(labels.get("warden.recipe"), Some(&recipe.digest()));
}

#[tokio::test]
async fn a_failed_package_fetch_names_the_fix() {
    let Some(h) = crate::common::harness().await else {
        return;
    };
    if !crate::common::mmdebstrap_installed() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true and mmdebstrap is not installed"
        );
        eprintln!("SKIPPED: mmdebstrap is not installed");
        return;
    }
    // A mirror that refuses every connection.
    let recipe = DebianRecipe {
        suite: "bookworm".into(),
        sources: vec!["deb http://127.0.0.1:1/debian bookworm main".into()],
        packages: vec!["python3".into()],
    };
    let repository = format!("warden-test-unfetchable-{}", std::process::id());
    let e = warden_docker::build_debian_image(h.engine(), &recipe, &repository, false, &|_| {})
        .await
        .expect_err("nothing to fetch from");
    assert!(matches!(e, ImageError::Fetch { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("apt-get update"), "{text}");
    assert!(text.contains("127.0.0.1:1"), "{text}");
    let docker = h.engine().client().await.unwrap();
    assert!(
        docker
            .inspect_image(&format!("{repository}:latest"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_shell_session_in_the_debian_image_keeps_its_state() {
    let h = docker_or_skip!(Sandbox::Debian);
    let d = h.dispatcher(
        "sh",
        &h.shell_policy("session = true\nworkdir = \"/tmp\"", "", ""),
    );
    let m = call(
        &d,
        "sh",
        cmd("mkdir -p proj && cd proj && export V=kept && python3 -c 'open(\"x.py\", \"w\").write(\"print(6 * 7)\")'"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let m = call(&d, "sh", cmd("pwd; echo $V; python3 x.py")).await;
    assert_eq!(m.content, "/tmp/proj\nkept\n42\n[exit code 0]");
    let m = call(&d, "sh", cmd("python3 -c 'import sys; sys.exit(3)'")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    d.close().await;
    h.assert_clean().await;
}
