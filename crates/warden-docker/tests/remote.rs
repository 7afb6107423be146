//! Docker engines elsewhere: a second engine on a loopback TCP port with mutual TLS
//! (`crate::common::second_engine`), certificates it refuses, what a remote engine cannot
//! do, and the leases that let any warden remove what a gone one left there.

use crate::common::second_engine::SecondEngine;
use crate::common::{TEST_LABEL, call, cmd, kind, labelled, usage};
use bollard::Docker;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_core::{Backend, Dispatcher, ErrorKind, Policy, Toolbox};
use warden_docker::{DockerBackend, Engine, INSTANCE_LABEL, LEASE_LABEL};

/// The lease of the tests' wardens: short, so an expiry is seen in seconds.
const SHORT_LEASE: Duration = Duration::from_secs(3);
/// How long a test waits for a leftover to be removed: many leases.
const REAP_WAIT: Duration = Duration::from_secs(60);

macro_rules! second_engine_or_skip {
    () => {
        match SecondEngine::get() {
            Some(e) => e,
            None => return,
        }
    };
}

/// `[executor]` lines naming the second engine with the client certificates in `certs`.
fn engine_lines(e2: &SecondEngine, certs: &Path) -> String {
    format!(
        "engine = \"{}\"\nengine_certs = \"{}\"\n",
        e2.address,
        certs.display()
    )
}

/// A bollard client of the second engine, for looking (no warden instance, no reaping).
fn look(e2: &SecondEngine) -> Docker {
    let certs = e2.certs().good;
    Docker::connect_with_ssl(
        &e2.address,
        &certs.join("key.pem"),
        &certs.join("cert.pem"),
        &certs.join("ca.pem"),
        60,
        bollard::API_DEFAULT_VERSION,
    )
    .expect("a client")
}

#[tokio::test]
async fn the_shell_runs_on_the_engine_its_policy_names_and_not_on_this_one() {
    let h = docker_or_skip!();
    let e2 = second_engine_or_skip!();
    let docker2 = look(&e2);
    let policy = h.shell_policy(
        &format!("session = true\n{}", engine_lines(&e2, &e2.certs().good)),
        "",
        "",
    );
    let d = h.dispatcher("sh", &policy);
    let m = call(&d, "sh", cmd("echo $((6 * 7)); cd /tmp")).await;
    assert_eq!(kind(&m), "success", "{}", m.content);
    assert!(m.content.starts_with("42\n"), "{}", m.content);
    assert_eq!(
        h.containers_on(&docker2).await.len(),
        1,
        "the session's container is on the second engine"
    );
    assert!(
        h.containers().await.is_empty(),
        "and not on this machine's engine"
    );
    let m = call(&d, "sh", cmd("pwd")).await;
    assert!(
        m.content.starts_with("/tmp\n"),
        "the session lives on: {}",
        m.content
    );
    // Its pids are not this machine's: no figures rather than a stranger's.
    let used = usage(&m);
    assert!(
        used.get("cpu_ms").is_none_or(Value::is_null),
        "no CPU figure from a remote engine: {used}"
    );
    d.close().await;
    for _ in 0..50 {
        if h.containers_on(&docker2).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        h.containers_on(&docker2).await.is_empty(),
        "the closed session's container is gone from the second engine"
    );
    h.assert_clean().await;
}

#[tokio::test]
async fn policies_naming_one_engine_share_its_connection_and_lease() {
    let h = docker_or_skip!();
    let e2 = second_engine_or_skip!();
    let docker2 = look(&e2);
    let extra = format!("session = true\n{}", engine_lines(&e2, &e2.certs().good));
    let path = |name: &str| h.dir.path().join(format!("{name}.toml"));
    let mut toolbox = Toolbox::default();
    let backend = h.backend();
    for name in ["one", "two"] {
        let text = h
            .shell_policy(&extra, "", "")
            .replace("name = \"sh\"", &format!("name = \"{name}\""));
        std::fs::write(path(name), text).unwrap();
        let policy = Policy::load(&path(name), &[backend]).unwrap();
        toolbox.add_policy(Arc::new(policy), &[backend]).unwrap();
    }
    let d = Dispatcher::new(Arc::new(toolbox));
    for name in ["one", "two"] {
        let m = call(&d, name, cmd("echo up")).await;
        assert!(m.content.starts_with("up\n"), "{}", m.content);
    }
    let mine = labelled(&docker2, &[&h.test_label()]).await;
    assert_eq!(mine.len(), 2, "a session of each tool on the second engine");
    let mut instances = std::collections::BTreeSet::new();
    for id in &mine {
        let c = docker2.inspect_container(id, None).await.unwrap();
        let labels = c.config.and_then(|c| c.labels).unwrap();
        instances.insert(labels[INSTANCE_LABEL].clone());
    }
    assert_eq!(instances.len(), 1, "one instance, one lease: {instances:?}");
    let instance = instances.pop_first().unwrap();
    let markers = labelled(&docker2, &[&format!("{LEASE_LABEL}={instance}")]).await;
    assert_eq!(markers.len(), 1, "one lease marker for both");
    d.close().await;
}

/// A warden whose engine is `DOCKER_HOST`'s, as the lease tests' child is: it runs one
/// command and prints its output. The env is its parent's choice.
#[tokio::test]
#[ignore = "run by docker_host_with_tls_verify_names_the_engine with its env"]
async fn env_warden() {
    if std::env::var_os("WARDEN_TEST_ID").is_none() {
        return;
    }
    let engine = Engine::from_env().label(TEST_LABEL, std::env::var("WARDEN_TEST_ID").unwrap());
    let backend = DockerBackend::new(engine);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sh.toml");
    std::fs::write(&path, crate::common::shell_policy("", "", "")).unwrap();
    let policy = Policy::load(&path, &[&backend]).unwrap();
    let mut toolbox = Toolbox::default();
    toolbox.add_policy(Arc::new(policy), &[&backend]).unwrap();
    let d = Dispatcher::new(Arc::new(toolbox));
    let m = call(&d, "sh", cmd("echo ran-on-$(hostname)")).await;
    println!("ANSWER {}", m.content.replace('\n', " "));
}

/// Runs [`env_warden`] with `env` and answers its answer, on one line.
fn env_warden_says(env: &[(&str, &str)]) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["remote::env_warden", "--exact", "--ignored", "--nocapture"])
        .env("WARDEN_TEST_ID", format!("env-{}", std::process::id()))
        .env_remove("DOCKER_HOST")
        .env_remove("DOCKER_TLS_VERIFY")
        .env_remove("DOCKER_CERT_PATH");
    for (k, v) in env {
        child.env(k, v);
    }
    let out = child.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("ANSWER ").map(str::to_owned))
        .unwrap_or_else(|| panic!("the child warden answered nothing: {out:?}"))
}

#[tokio::test]
async fn docker_host_with_tls_verify_names_the_engine() {
    let e2 = second_engine_or_skip!();
    let certs = e2.certs().good.display().to_string();
    let there = env_warden_says(&[
        ("DOCKER_HOST", &e2.address),
        ("DOCKER_TLS_VERIFY", "1"),
        ("DOCKER_CERT_PATH", &certs),
    ]);
    assert!(there.starts_with("ran-on-"), "{there}");
    // Without DOCKER_TLS_VERIFY the same address is plain HTTP, which the engine refuses.
    let plain = env_warden_says(&[("DOCKER_HOST", &e2.address), ("DOCKER_CERT_PATH", &certs)]);
    assert!(plain.contains("the engine speaks TLS"), "{plain}");
}

#[tokio::test]
async fn the_audit_names_the_engine_a_tool_runs_on() {
    let h = docker_or_skip!();
    let e2 = second_engine_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let backend = DockerBackend::new(Engine::from_env());
    let load = |name: &str, extra: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, h.shell_policy(extra, "", "")).unwrap();
        let policy = Arc::new(Policy::load(&path, &[&backend]).unwrap());
        backend.load(&policy).unwrap().report
    };
    let remote = load("remote", &engine_lines(&e2, &e2.certs().good));
    assert_eq!(remote.settings["engine"], e2.address.as_str());
    let line = remote.lines.iter().find(|l| l.label == "engine").unwrap();
    assert!(line.text.contains("mutual TLS"), "{}", line.text);
    assert!(
        remote.flags.iter().any(|f| f.contains("engine elsewhere")),
        "{:?}",
        remote.flags
    );
    let local = load("local", "");
    let line = local.lines.iter().find(|l| l.label == "engine").unwrap();
    assert!(line.text.contains("(this machine)"), "{}", line.text);
}

#[tokio::test]
async fn wrong_or_missing_client_certificates_are_refused_with_a_clear_error() {
    let e2 = second_engine_or_skip!();
    let certs = e2.certs();
    // The engine works with the good ones.
    e2.engine(&certs.good)
        .client()
        .await
        .expect("the good certificates reach the engine");
    for (folder, words) in [
        (&certs.stranger, "TLS handshake failed"),
        (&certs.wrong_ca, "TLS handshake failed"),
        (&certs.missing, "cert.pem"),
    ] {
        let Err(e) = e2.engine(folder).client().await else {
            panic!("{} reached the engine", folder.display());
        };
        eprintln!("{}: {}", folder.display(), e.message);
        assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
        assert!(
            e.message.contains(words),
            "{}: {}",
            folder.display(),
            e.message
        );
        assert!(e.message.contains(&e2.address), "{}", e.message);
    }
    // Plain HTTP to the TLS port is no way round.
    let plain = warden_docker::EngineAddress::parse(&e2.address, None).unwrap();
    let Err(e) = Engine::at(plain).client().await else {
        panic!("plain HTTP reached a TLS engine");
    };
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("the engine speaks TLS"), "{}", e.message);
    // A policy naming a folder without them does not load, and says which line.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sh.toml");
    let policy = crate::common::shell_policy(&engine_lines(&e2, &certs.missing), "", "");
    std::fs::write(&path, &policy).unwrap();
    let backend = DockerBackend::new(Engine::from_env());
    let e = Policy::load(&path, &[&backend])
        .map(Arc::new)
        .and_then(|p| backend.load(&p).map(|_| ()))
        .unwrap_err();
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.message.contains("cert.pem is missing"), "{e}");
}

#[tokio::test]
async fn an_engine_that_does_not_answer_is_unavailable_naming_its_address() {
    // Port 1 on loopback: nothing listens there.
    let address = warden_docker::EngineAddress::parse("tcp://127.0.0.1:1", None).unwrap();
    let Err(e) = Engine::at(address).client().await else {
        panic!("an engine answered on port 1");
    };
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("tcp://127.0.0.1:1"), "{}", e.message);
    assert!(e.message.contains("listens there"), "{}", e.message);
}

#[test]
fn what_an_engine_elsewhere_cannot_do_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    for f in warden_docker::CERT_FILES {
        std::fs::write(certs.join(f), "").unwrap();
    }
    let backend = DockerBackend::new(Engine::from_env());
    let load = |extra: &str, grants: &str| {
        let path = dir.path().join("sh.toml");
        std::fs::write(&path, crate::common::shell_policy(extra, grants, "")).unwrap();
        Policy::load(&path, &[&backend])
            .map(Arc::new)
            .and_then(|p| backend.load(&p).map(|_| ()))
    };
    let tls = format!(
        "engine = \"tcp://engine.example:2376\"\nengine_certs = \"{}\"\n",
        certs.display()
    );
    assert!(load(&tls, "").is_ok(), "mutual TLS elsewhere loads");
    let e = load(&tls, "net = [\"api.example.org\"]").unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("need a local engine"), "{e}");
    assert!(e.message.contains("network = \"unrestricted\""), "{e}");
    // Even on loopback: nothing proves its namespaces are this machine's.
    let e = load(
        "engine = \"tcp://127.0.0.1:2375\"\n",
        "net = [\"api.example.org\"]",
    )
    .unwrap_err();
    assert!(e.message.contains("need a local engine"), "{e}");
    // The explicit opt-in to every host is the way.
    assert!(load(&format!("{tls}network = \"unrestricted\"\n"), "").is_ok());
    let e = load("engine = \"tcp://10.1.2.3:2375\"\n", "").unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("without TLS is refused"), "{e}");
    let e = load("engine_certs = \"certs\"\n", "").unwrap_err();
    assert!(e.message.contains("without `engine`"), "{e}");
    // Its machine does not hold this one's folders: a read-write root needs the write-back.
    let rw = format!(
        "fs = [{{ host = \"{}\", guest = \"/w\", access = \"read-write\" }}]",
        certs.display()
    );
    let e = load(&tls, &rw).unwrap_err();
    assert!(e.message.contains("copy_back = true"), "{e}");
    assert!(load(&format!("{tls}copy_back = true\n"), &rw).is_ok());
    // Nor can its containers mount them, whatever the policy asks.
    let e = load(&format!("{tls}files = \"mount\"\n"), "").unwrap_err();
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("runs elsewhere"), "{e}");
    assert!(load(&format!("{tls}files = \"copy\"\n"), "").is_ok());
}

#[tokio::test]
async fn a_read_only_root_is_copied_to_the_engine_elsewhere() {
    let h = docker_or_skip!();
    let e2 = second_engine_or_skip!();
    let root = h.folder("data");
    std::fs::write(root.join("hello.txt"), "hello from this machine\n").unwrap();
    let policy = h.shell_policy(
        &engine_lines(&e2, &e2.certs().good),
        &format!(
            "fs = [{{ host = \"{}\", guest = \"/data\", access = \"read-only\" }}]",
            root.display()
        ),
        "",
    );
    let d = h.dispatcher("sh", &policy);
    let m = call(&d, "sh", cmd("cat /data/hello.txt; echo x > /data/new")).await;
    assert_eq!(
        kind(&m),
        "exit_status",
        "the write is refused: {}",
        m.content
    );
    assert!(m.content.contains("Permission denied"), "{}", m.content);
    assert!(
        m.content.contains("hello from this machine"),
        "the root's file is there: {}",
        m.content
    );
    assert!(!root.join("new").exists(), "nothing came back");
    d.close().await;
    h.assert_clean().await;
}

/// A read-write root copied to the engine elsewhere is a transaction: what the container's
/// copy changed is committed once read back, listed in the answer, and undone.
#[tokio::test]
async fn a_read_write_root_copied_to_the_engine_elsewhere_is_a_transaction() {
    let mut h = docker_or_skip!();
    let e2 = second_engine_or_skip!();
    let store = h.transactions();
    let root = h.folder("work");
    std::fs::write(root.join("notes.txt"), "before\n").unwrap();
    let policy = h.shell_policy(
        &format!("copy_back = true\n{}", engine_lines(&e2, &e2.certs().good)),
        &format!(
            "fs = [{{ host = \"{}\", guest = \"/work\", access = \"read-write\" }}]",
            root.display()
        ),
        "",
    );
    let d = h.dispatcher("sh", &policy);
    let m = call(
        &d,
        "sh",
        cmd("echo after > /work/notes.txt; echo new > /work/new.txt"),
    )
    .await;
    assert_eq!(kind(&m), "success", "{}", m.content);
    assert_eq!(
        crate::common::paths(&crate::common::changes(&m)),
        [("new.txt", "added"), ("notes.txt", "modified")]
            .map(|(p, c)| (p.to_owned(), c.to_owned()))
    );
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    assert_eq!(read("notes.txt").as_deref(), Some("after\n"));
    let call_id = store.records().unwrap().pop().unwrap().call_id;
    store.undo(&call_id).unwrap();
    assert_eq!(read("notes.txt").as_deref(), Some("before\n"));
    assert_eq!(read("new.txt"), None);
    d.close().await;
    h.assert_clean().await;
}

/// The warden the lease tests stop or kill: it runs `sleep 600` in a container on the
/// engine of `WARDEN_TEST_ENGINE` and says `READY <instance>` once the sleep runs. Not a
/// session: a session's shell ends (and the engine removes its container) when the attach of
/// a killed warden closes, which would hide what the lease does.
#[tokio::test]
#[ignore = "run by the lease tests as the warden they stop and kill"]
async fn child_warden() {
    let (Ok(address), Ok(certs), Ok(label)) = (
        std::env::var("WARDEN_TEST_ENGINE"),
        std::env::var("WARDEN_TEST_CERTS"),
        std::env::var("WARDEN_TEST_ID"),
    ) else {
        return;
    };
    let address = warden_docker::EngineAddress::parse(&address, Some(certs.into())).unwrap();
    let engine = Engine::at(address)
        .label(TEST_LABEL, label)
        .lease_length(SHORT_LEASE);
    let instance = engine.instance().to_owned();
    let backend = DockerBackend::new(engine);
    let docker = backend.engine().client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sh.toml");
    std::fs::write(
        &path,
        crate::common::shell_policy("", "", "timeout = \"15m\""),
    )
    .unwrap();
    let policy = Policy::load(&path, &[&backend]).unwrap();
    let mut toolbox = Toolbox::default();
    toolbox.add_policy(Arc::new(policy), &[&backend]).unwrap();
    let d = Dispatcher::new(Arc::new(toolbox));
    tokio::spawn(async move { call(&d, "sh", cmd("sleep 600")).await });
    let mine = format!("{INSTANCE_LABEL}={instance}");
    loop {
        for id in labelled(&docker, &[&mine]).await {
            let top = docker
                .top_processes(&id, None::<bollard::query_parameters::TopOptions>)
                .await;
            let sleeping = top
                .ok()
                .and_then(|t| t.processes)
                .is_some_and(|p| p.iter().flatten().any(|field| field.contains("sleep 600")));
            if sleeping {
                println!("READY {instance}");
                std::future::pending::<()>().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A warden process of its own ([`child_warden`]) with a session on the second engine, and
/// its instance id.
fn start_child(e2: &SecondEngine) -> (std::process::Child, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "remote::child_warden",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("WARDEN_TEST_ENGINE", &e2.address)
        .env("WARDEN_TEST_CERTS", &e2.certs().good)
        .env("WARDEN_TEST_ID", format!("child-{}", std::process::id()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let instance = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("READY ").map(str::to_owned))
        .expect("the child warden opened its session");
    (child, instance)
}

/// The containers and the lease marker of `instance` on the second engine.
async fn left_by(docker: &Docker, instance: &str) -> (Vec<String>, Vec<String>) {
    (
        labelled(docker, &[&format!("{INSTANCE_LABEL}={instance}")]).await,
        labelled(docker, &[&format!("{LEASE_LABEL}={instance}")]).await,
    )
}

/// Waits until `instance` left nothing on the engine.
async fn until_gone(docker: &Docker, instance: &str) {
    let deadline = Instant::now() + REAP_WAIT;
    loop {
        let left = left_by(docker, instance).await;
        if left.0.is_empty() && left.1.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {REAP_WAIT:?}, the gone warden still has {left:?} on the engine"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn signal(child: &std::process::Child, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
}

#[tokio::test]
async fn a_killed_wardens_containers_are_removed_by_the_next_warden() {
    let e2 = second_engine_or_skip!();
    let docker2 = look(&e2);
    let (mut child, instance) = start_child(&e2);
    let (containers, markers) = left_by(&docker2, &instance).await;
    assert_eq!(
        (containers.len(), markers.len()),
        (1, 1),
        "its session and its lease"
    );
    signal(&child, nix::sys::signal::Signal::SIGKILL);
    child.wait().unwrap();
    assert_eq!(
        left_by(&docker2, &instance).await.0.len(),
        1,
        "kill -9 left it"
    );
    // The next warden to reach the engine.
    let next = e2.engine(&e2.certs().good).lease_length(SHORT_LEASE);
    next.client().await.expect("the engine");
    until_gone(&docker2, &instance).await;
}

#[tokio::test]
async fn a_frozen_wardens_containers_are_removed_once_its_lease_ends_and_a_live_ones_stay() {
    let e2 = second_engine_or_skip!();
    let docker2 = look(&e2);
    // This process's warden, renewing its lease, with a session it keeps.
    let engine = Engine::from_env()
        .label(TEST_LABEL, format!("live-{}", std::process::id()))
        .lease_length(SHORT_LEASE);
    let backend = DockerBackend::new(engine);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sh.toml");
    let extra = format!("session = true\n{}", engine_lines(&e2, &e2.certs().good));
    std::fs::write(&path, crate::common::shell_policy(&extra, "", "")).unwrap();
    let policy = Policy::load(&path, &[&backend]).unwrap();
    let mut toolbox = Toolbox::default();
    toolbox.add_policy(Arc::new(policy), &[&backend]).unwrap();
    let d = Dispatcher::new(Arc::new(toolbox));
    let m = call(&d, "sh", cmd("KEPT=yes; echo set")).await;
    assert!(m.content.starts_with("set\n"), "{}", m.content);
    // A warden whose process lives on but renews nothing, as one on a machine that froze or
    // lost the network: its pid says nothing, its lease decides.
    let (mut child, instance) = start_child(&e2);
    signal(&child, nix::sys::signal::Signal::SIGSTOP);
    let reaper = e2.engine(&e2.certs().good).lease_length(SHORT_LEASE);
    reaper.client().await.expect("the engine");
    until_gone(&docker2, &instance).await;
    // The child's lease ended after this process's own had begun: this one lives because it
    // was renewed. A new warden's first contact reaps again, and leaves it.
    let another = e2.engine(&e2.certs().good).lease_length(SHORT_LEASE);
    another.client().await.expect("the engine");
    let m = call(&d, "sh", cmd("echo $KEPT")).await;
    assert!(
        m.content.starts_with("yes\n"),
        "the live warden's session survived every reaping: {}",
        m.content
    );
    signal(&child, nix::sys::signal::Signal::SIGKILL);
    child.wait().unwrap();
    d.close().await;
}

/// A test process that starts the second engine, runs a container there and is then killed:
/// prints `READY <engine folder> <dockerd pid> <container id>`.
#[tokio::test]
#[ignore = "run by a_killed_runs_engine_is_cleaned_up_by_the_next as the run it kills"]
async fn engine_holder() {
    if std::env::var_os("WARDEN_TEST_HOLDER").is_none() {
        return;
    }
    let e2 = SecondEngine::get().unwrap();
    let docker = look(&e2);
    let body = bollard::models::ContainerCreateBody {
        image: Some(warden_docker::SANDBOX_IMAGE.into()),
        cmd: Some(vec!["sleep".into(), "600".into()]),
        host_config: Some(bollard::models::HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker.create_container(None, body).await.unwrap().id;
    docker.start_container(&id, None).await.unwrap();
    println!("READY {} {} {id}", e2.dir().display(), e2.pid());
    std::future::pending::<()>().await;
}

/// True while `pid` runs (a zombie no longer does).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn a_killed_runs_engine_is_cleaned_up_by_the_next() {
    if !crate::common::second_engine::available() {
        return;
    }
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args([
            "remote::engine_holder",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("WARDEN_TEST_HOLDER", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(holder.stdout.take().unwrap());
    let ready = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("READY ").map(str::to_owned))
        .expect("the holder started its engine");
    let mut words = ready.split(' ');
    let (dir, dockerd, id) = (
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
    );
    let sleepers = || {
        std::fs::read_to_string(format!("/sys/fs/cgroup/pids/docker/{id}/cgroup.procs"))
            .or_else(|_| {
                std::fs::read_to_string(format!("/sys/fs/cgroup/docker/{id}/cgroup.procs"))
            })
            .unwrap_or_default()
            .lines()
            .filter(|p| running(p))
            .count()
    };
    assert_eq!(sleepers(), 1, "the container's sleep runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    holder.wait().unwrap();
    assert!(
        running(&dockerd),
        "kill -9 of the run left its engine running"
    );
    crate::common::second_engine::clean_stale();
    assert!(!Path::new(&dir).exists(), "its folder is removed");
    assert!(!running(&dockerd), "its dockerd is stopped");
    assert_eq!(sleepers(), 0, "its container's processes are gone");
}
