//! Real containers on a real engine. Without one the tests say they were skipped; under
//! `CI=true` a missing engine fails them.

#![allow(
    dead_code,
    reason = "shared by two test binaries (files.rs has its own), each using a part"
)]

use bollard::query_parameters::ListContainersOptionsBuilder;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use warden_core::{Dispatcher, Policy, ToolCall, ToolMessage, Toolbox};
use warden_docker::{
    BOOTSTRAP_TOOL, BUSYBOX, DEBIAN_IMAGE, DEBIAN_REPOSITORY, DebianRecipe, DockerBackend, Engine,
    OWNER_LABEL, Progress, SANDBOX_IMAGE,
};

pub(crate) mod second_engine;

/// Every test container carries it, so a check after the suite finds any left behind; its
/// value tells one test's containers from another's.
pub(crate) const TEST_LABEL: &str = "warden.test";

/// The sandbox a test runs in: warden's busybox image, its Debian image, or the Debian image
/// under gVisor (the engine's `runsc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sandbox {
    Busybox,
    Debian,
    Gvisor,
}

/// The name the tests' engine registers gVisor under (`.ci/run` does, with `--network=host`).
pub(crate) const RUNSC: &str = "runsc";

impl Sandbox {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Sandbox::Busybox => SANDBOX_IMAGE,
            Sandbox::Debian | Sandbox::Gvisor => DEBIAN_IMAGE,
        }
    }

    /// Its `[executor]` line naming the runtime, if it names one.
    pub(crate) fn runtime_line(self) -> &'static str {
        match self {
            Sandbox::Gvisor => "runtime = \"runsc\"\n",
            Sandbox::Busybox | Sandbox::Debian => "",
        }
    }
}

pub(crate) struct Harness {
    pub dir: tempfile::TempDir,
    backend: DockerBackend,
    id: String,
    sandbox: Sandbox,
}

pub(crate) use warden_test_support::{is_root, kind, under_ci};

/// The harness, or `None` (after saying why) when no engine answers outside CI.
pub(crate) async fn harness() -> Option<Harness> {
    harness_in(Sandbox::Busybox).await
}

/// The harness for tests in `sandbox`; `None` (after saying why) when no engine answers, when
/// the Debian image is missing and cannot be built here, or when the engine has no gVisor,
/// outside CI.
pub(crate) async fn harness_in(sandbox: Sandbox) -> Option<Harness> {
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
            if under_ci() {
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
    if sandbox != Sandbox::Busybox && !debian_image(&engine, &docker).await {
        return None;
    }
    if sandbox == Sandbox::Gvisor && !has_runsc(&docker).await {
        return None;
    }
    Some(Harness {
        dir: tempfile::tempdir().expect("a temp dir"),
        backend: DockerBackend::new(engine).egress(warden_net::Egress::new(test_names())),
        id,
        sandbox,
    })
}

/// True when the Debian image is on the engine, after building it if it was not (minutes;
/// `.ci/run` builds it before the tests). Without mmdebstrap: skipped, or a failure under CI.
async fn debian_image(engine: &Engine, docker: &bollard::Docker) -> bool {
    if docker.inspect_image(DEBIAN_IMAGE).await.is_ok() {
        return true;
    }
    if !mmdebstrap_installed() {
        let why = format!(
            "the Debian image {DEBIAN_IMAGE} is not built and {BOOTSTRAP_TOOL} is not \
             installed (`apt-get install {BOOTSTRAP_TOOL}`, then `warden sandbox-image --debian`)"
        );
        assert!(!under_ci(), "CI=true and {why}");
        eprintln!("SKIPPED: {why}");
        return false;
    }
    eprintln!("building {DEBIAN_IMAGE} (warden sandbox-image --debian: a minute or more)");
    let recipe = DebianRecipe::from_machine().expect("this machine's apt sources");
    warden_docker::build_debian_image(engine, &recipe, DEBIAN_REPOSITORY, false, &show)
        .await
        .expect("the Debian image builds");
    true
}

/// True when the engine has gVisor's runtime; else skipped, or a failure under CI.
async fn has_runsc(docker: &bollard::Docker) -> bool {
    let info = docker.info().await.expect("the engine's info");
    if info.runtimes.is_some_and(|r| r.contains_key(RUNSC)) {
        return true;
    }
    let why = format!(
        "the Docker engine has no runtime `{RUNSC}` (apt-get install runsc, and register it in \
         daemon.json with \"runtimeArgs\": [\"--network=host\"], as .ci/run does)"
    );
    assert!(!under_ci(), "CI=true and {why}");
    eprintln!("SKIPPED: {why}");
    false
}

/// A build's progress, on the test's stderr.
pub(crate) fn show(p: Progress<'_>) {
    match p {
        Progress::Step(line) | Progress::Bootstrap(line) => eprintln!("{line}"),
        Progress::Import { .. } => {}
    }
}

pub(crate) fn mmdebstrap_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(BOOTSTRAP_TOOL).is_file()))
}

/// Skips the test (returns) when there is no engine (or, given a sandbox, no Debian image and
/// no way to build it, or no gVisor).
#[macro_export]
macro_rules! docker_or_skip {
    () => {
        match $crate::common::harness().await {
            Some(h) => h,
            None => return,
        }
    };
    ($sandbox:expr) => {
        match $crate::common::harness_in($sandbox).await {
            Some(h) => h,
            None => return,
        }
    };
}

/// Each check named runs in the Debian image under runc (`runc::…`) and under gVisor
/// (`gvisor::…`).
#[macro_export]
macro_rules! under_runc_and_gvisor {
    ($($check:ident),* $(,)?) => {
        mod runc {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check($crate::common::Sandbox::Debian).await;
                }
            )*
        }
        mod gvisor {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check($crate::common::Sandbox::Gvisor).await;
                }
            )*
        }
    };
}

/// Test names resolve to this machine's loopback, where the tests' servers listen.
fn test_names() -> warden_net::Resolver {
    let names = ["api.test", "other.test", "bad.test"].map(|n| format!("{n}:127.0.0.1"));
    warden_net::Resolver::with_overrides(names).expect("overrides")
}

impl Harness {
    /// Also trusts the CA certificate `pem` when warden speaks TLS upstream.
    pub(crate) fn trust_upstream(&mut self, pem: &str) {
        let egress = warden_net::Egress::new(test_names())
            .with_roots_pem(pem.as_bytes())
            .expect("a PEM certificate");
        self.backend = self.backend.clone().egress(egress);
    }

    /// Makes the calls of the policies loaded from now on transactions, their views and
    /// records in the store this answers (in the temp dir).
    pub(crate) fn transactions(&mut self) -> Arc<warden_tx::Store> {
        let store = warden_tx::Store::at(&self.dir.path().join("home/transactions"));
        self.backend = self.backend.clone().transactions(store.clone());
        store
    }

    /// The backend this harness loads policies with (its containers carry its label).
    pub(crate) fn backend(&self) -> &DockerBackend {
        &self.backend
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.backend.engine()
    }

    /// The sandbox this harness's tests run in.
    pub(crate) fn sandbox(&self) -> Sandbox {
        self.sandbox
    }

    /// [`shell_policy`] in this harness's sandbox.
    pub(crate) fn shell_policy(&self, executor_extra: &str, grants: &str, limits: &str) -> String {
        shell_policy_in(self.sandbox, executor_extra, grants, limits)
    }

    /// An HTTP server on this machine where a container on Docker's default bridge would reach
    /// it: on the bridge's gateway address (a container's 127.0.0.1 is its own).
    pub(crate) async fn host_server(&self) -> HostServer {
        HostServer::start(self.bridge_gateway().await)
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

    /// The address of Docker's default bridge on this machine: how a container on the bridge
    /// reaches host services, and what a container without it must not reach.
    pub(crate) async fn bridge_gateway(&self) -> std::net::Ipv4Addr {
        let docker = self.engine().client().await.expect("engine");
        let bridge = docker
            .inspect_network("bridge", None)
            .await
            .expect("Docker's default bridge network");
        let config = bridge
            .ipam
            .and_then(|i| i.config)
            .and_then(|c| c.into_iter().next())
            .expect("the bridge's address configuration");
        config
            .gateway
            .filter(|g| !g.is_empty())
            .map(|g| g.parse().expect("a gateway address"))
            .unwrap_or_else(|| {
                // Docker gives the bridge the first address of its subnet.
                let subnet = config.subnet.expect("the bridge's subnet");
                let base: std::net::Ipv4Addr = subnet
                    .split('/')
                    .next()
                    .unwrap()
                    .parse()
                    .expect("an IPv4 subnet");
                std::net::Ipv4Addr::from(u32::from(base) + 1)
            })
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
        self.containers_on(&docker).await
    }

    /// The containers of this harness on the engine `docker` reaches.
    pub(crate) async fn containers_on(&self, docker: &bollard::Docker) -> Vec<String> {
        let owner = format!("{OWNER_LABEL}={}", self.engine().owner());
        let mine = self.test_label();
        labelled(docker, &[&owner, &mine]).await
    }

    /// `warden.test=ID`, this harness's label.
    pub(crate) fn test_label(&self) -> String {
        format!("{TEST_LABEL}={}", self.id)
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

/// The ids of the containers (running or not) carrying every one of `labels` (`key=value`).
pub(crate) async fn labelled(docker: &bollard::Docker, labels: &[&str]) -> Vec<String> {
    listed(docker, &HashMap::from([("label", labels.to_vec())])).await
}

/// The ids of the containers (running or not) that `filters` let through, as the engine's
/// list filters them (`label`, `status`, …).
pub(crate) async fn listed(
    docker: &bollard::Docker,
    filters: &HashMap<&str, Vec<&str>>,
) -> Vec<String> {
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .expect("list containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
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
    shell_policy_in(Sandbox::Busybox, executor_extra, grants, limits)
}

/// The same in `sandbox`.
pub(crate) fn shell_policy_in(
    sandbox: Sandbox,
    executor_extra: &str,
    grants: &str,
    limits: &str,
) -> String {
    format!(
        "[executor]\nkind = \"docker\"\nname = \"sh\"\nimage = \"{}\"\n\
         argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n{}{executor_extra}\n\
         [grants]\n{grants}\n[limits]\n{limits}\n",
        sandbox.tag(),
        sandbox.runtime_line()
    )
}

/// A small HTTP server answering every request with its marker, counting them.
pub(crate) struct HostServer {
    pub url: String,
    pub marker: String,
    hits: Arc<std::sync::atomic::AtomicUsize>,
}

impl HostServer {
    /// Listens on `address` (on every address when this machine does not hold it: an engine
    /// in a VM, say), on a port of the kernel's choosing.
    fn start(address: std::net::Ipv4Addr) -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind((address, 0))
            .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", 0)))
            .expect("a listening socket");
        let port = listener.local_addr().expect("its address").port();
        let marker = format!("warden-reached-{}-{port}", std::process::id());
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (answer, count) = (marker.clone(), Arc::clone(&hits));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        Self {
            url: format!("http://{address}:{port}/"),
            marker,
            hits,
        }
    }

    /// The requests it answered so far.
    pub(crate) fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What a call used, as its message carries it: `artifact.usage`, or `error.details.usage`.
pub(crate) fn usage(m: &ToolMessage) -> Value {
    let holder = match &m.error {
        Some(e) => Some(&e.details),
        None => m.artifact.as_ref(),
    };
    holder
        .and_then(|h| h.get("usage"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// A shell command that spins until the shell itself has used half a second of CPU (50
/// ticks of `/proc/self/stat`'s utime and stime), with builtins only, then prints `spun`: the
/// same work under any load, and no Python in busybox.
pub(crate) const HALF_A_SECOND_OF_CPU: &str = "u=0 s=0; until [ $((u + s)) -ge 50 ]; do \
     read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ </proc/self/stat; done; echo spun";

/// Runs a command whose `tail` holds one 50 MB line in memory, and checks the answer shows
/// a peak of at least that.
pub(crate) async fn holds_fifty_mb(d: &Dispatcher) {
    let m = call(
        d,
        "sh",
        cmd("head -c 50000000 /dev/zero | tail -n 1 | wc -c"),
    )
    .await;
    assert!(m.content.starts_with("50000000\n"), "{}", m.content);
    let used = usage(&m);
    assert!(
        used["peak_memory_bytes"].as_u64().unwrap() >= 50_000_000,
        "{used}"
    );
}

/// The change set of an answer: its artifact's, or its error's details'.
pub(crate) fn changes(m: &ToolMessage) -> Value {
    match &m.error {
        Some(e) => e.details.get("changes").cloned().unwrap_or(Value::Null),
        None => m
            .artifact
            .as_ref()
            .map_or(Value::Null, |a| a["changes"].clone()),
    }
}

pub(crate) fn paths(changes: &Value) -> Vec<(String, String)> {
    changes["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (field("path"), field("change"))
        })
        .collect()
}
