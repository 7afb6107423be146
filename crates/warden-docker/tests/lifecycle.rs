//! The engine's edges: no daemon, no image, and containers left by a warden that died.

use crate::common::{call, cmd, kind};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::RemoveContainerOptionsBuilder;
use std::collections::HashMap;
use warden_core::ErrorKind;
use warden_docker::{Engine, LABEL, OWNER_LABEL, SANDBOX_IMAGE};

#[tokio::test]
async fn an_unreachable_daemon_is_unavailable_and_says_how_to_start_it() {
    let engine = Engine::with_socket("/nonexistent/docker.sock");
    let Err(e) = engine.client().await else {
        panic!("no daemon there, yet a client came back");
    };
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(
        e.message.contains("unix:///nonexistent/docker.sock"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("systemctl start docker"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_missing_image_is_named_with_the_command_that_builds_it() {
    let h = docker_or_skip!();
    let policy = format!(
        "[executor]\nkind = \"docker\"\nname = \"sh\"\nimage = \"warden-absent:{}\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n",
        std::process::id()
    );
    let d = h.dispatcher("sh", &policy);
    let m = call(&d, "sh", cmd("true")).await;
    assert_eq!(kind(&m), "unavailable", "{}", m.content);
    let text = &m.error.as_ref().unwrap().message;
    assert!(text.contains("warden-absent:"), "{text}");
    assert!(text.contains("docker pull"), "{text}");
    assert!(text.contains("warden sandbox-image"), "{text}");
    h.assert_clean().await;
}

#[tokio::test]
async fn containers_of_a_dead_warden_are_removed_at_the_next_start() {
    let h = docker_or_skip!();
    let docker = h.engine().client().await.expect("engine");
    // A pid that was just used and is gone.
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead_pid = child.id();
    child.wait().expect("wait");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let dead_owner = format!("{}:{dead_pid}:1", boot.trim());
    let make = async |owner: &str| {
        let labels = HashMap::from([
            (LABEL.to_owned(), "1".to_owned()),
            (OWNER_LABEL.to_owned(), owner.to_owned()),
            (crate::common::TEST_LABEL.to_owned(), "lifecycle".to_owned()),
        ]);
        let body = ContainerCreateBody {
            image: Some(SANDBOX_IMAGE.into()),
            cmd: Some(vec!["sleep".into(), "300".into()]),
            labels: Some(labels),
            ..Default::default()
        };
        let id = docker
            .create_container(None, body)
            .await
            .expect("create")
            .id;
        docker.start_container(&id, None).await.expect("start");
        id
    };
    let orphan = make(&dead_owner).await;
    let alive = make(h.engine().owner()).await;
    // A new warden process's first contact with the engine.
    Engine::from_env().client().await.expect("engine");
    assert!(
        docker.inspect_container(&orphan, None).await.is_err(),
        "the dead warden's container is gone"
    );
    assert!(
        docker.inspect_container(&alive, None).await.is_ok(),
        "a live warden's container stays"
    );
    let force = RemoveContainerOptionsBuilder::new().force(true).build();
    docker
        .remove_container(&alive, Some(force))
        .await
        .expect("remove");
}
