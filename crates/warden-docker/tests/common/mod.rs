//! Real containers on a real engine. Without one the tests say they were skipped; under
//! `CI=true` a missing engine fails them.

#![allow(dead_code)]

use bollard::query_parameters::ListContainersOptionsBuilder;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use warden_core::{Dispatcher, Policy, ToolCall, ToolMessage, Toolbox};
use warden_docker::{BUSYBOX, DockerBackend, Engine, OWNER_LABEL, SANDBOX_IMAGE};

/// Every test container carries it, so a check after the suite finds any left behind; its
/// value tells one test's containers from another's.
pub(crate) const TEST_LABEL: &str = "warden.test";

pub(crate) struct Harness {
    pub dir: tempfile::TempDir,
    backend: DockerBackend,
    id: String,
}

/// The harness, or `None` (after saying why) when no engine answers outside CI.
pub(crate) async fn harness() -> Option<Harness> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let id = format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let engine = Engine::from_env().label(TEST_LABEL, id.clone());
    let docker = match engine.client().await {
        Ok(d) => d,
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and no Docker engine answers: {}", e.message);
            }
            eprintln!("SKIPPED: no Docker engine answers ({})", e.message);
            return None;
        }
    };
    if docker.inspect_image(SANDBOX_IMAGE).await.is_err() {
        eprintln!("building {SANDBOX_IMAGE} from {BUSYBOX}");
        warden_docker::build_sandbox_image(&engine, Path::new(BUSYBOX), SANDBOX_IMAGE)
            .await
            .expect("the sandbox image builds (apt-get install busybox-static)");
    }
    Some(Harness {
        dir: tempfile::tempdir().expect("a temp dir"),
        backend: DockerBackend::new(engine),
        id,
    })
}

/// Skips the test (returns) when there is no engine.
#[macro_export]
macro_rules! docker_or_skip {
    () => {
        match common::harness().await {
            Some(h) => h,
            None => return,
        }
    };
}

impl Harness {
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.backend.engine()
    }

    /// A folder in the temp dir, writable by the container user the plan will pick.
    pub(crate) fn folder(&self, name: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("create a folder");
        // As root the folder would be root's, which no container user may write.
        if is_root() {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        }
        path
    }

    /// A dispatcher over one policy written into the temp dir.
    pub(crate) fn dispatcher(&self, name: &str, policy: &str) -> Dispatcher {
        Dispatcher::new(Arc::new(
            self.toolbox(name, policy).expect("the policy loads"),
        ))
    }

    pub(crate) fn toolbox(&self, name: &str, policy: &str) -> Result<Toolbox, String> {
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, policy).expect("write the policy");
        let policy = Policy::load(&path, &[&self.backend]).map_err(|e| e.to_string())?;
        let mut toolbox = Toolbox::default();
        toolbox
            .add_policy(Arc::new(policy), &[&self.backend])
            .map_err(|e| e.to_string())?;
        Ok(toolbox)
    }

    /// The containers of this harness still on the engine.
    pub(crate) async fn containers(&self) -> Vec<String> {
        let docker = self.engine().client().await.expect("engine");
        let owner = format!("{OWNER_LABEL}={}", self.engine().owner());
        let mine = format!("{TEST_LABEL}={}", self.id);
        let filters: HashMap<&str, Vec<&str>> =
            HashMap::from([("label", vec![owner.as_str(), mine.as_str()])]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        docker
            .list_containers(Some(options))
            .await
            .expect("list containers")
            .into_iter()
            .filter_map(|c| c.id)
            .collect()
    }

    /// Fails when a container of this process outlived its call or session. Removal after a
    /// dropped call happens in a spawned task: give it a moment.
    pub(crate) async fn assert_clean(&self) {
        for _ in 0..50 {
            if self.containers().await.is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("containers left behind: {:?}", self.containers().await);
    }
}

pub(crate) fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// One call through the dispatcher.
pub(crate) async fn call(d: &Dispatcher, tool: &str, args: Value) -> ToolMessage {
    d.call(ToolCall::new("c1", tool, &args)).await
}

/// `{"command": …}`.
pub(crate) fn cmd(command: &str) -> Value {
    json!({ "command": command })
}

/// The shell policy used by most tests, with extra `[executor]` lines and a `[limits]` body.
pub(crate) fn shell_policy(executor_extra: &str, grants: &str, limits: &str) -> String {
    format!(
        "[executor]\nkind = \"docker\"\nname = \"sh\"\nimage = \"{SANDBOX_IMAGE}\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n{executor_extra}\n\
         [grants]\n{grants}\n[limits]\n{limits}\n"
    )
}

/// The error kind of a message, or "success".
pub(crate) fn kind(m: &ToolMessage) -> String {
    m.error
        .as_ref()
        .map_or("success".into(), |e| e.kind.as_str().to_owned())
}
