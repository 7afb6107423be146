//! A second Docker engine, started by the tests: `dockerd` on a loopback TCP port with mutual
//! TLS (a CA, the engine's certificate and warden's client certificate made here), its own
//! data and exec roots, pidfile, containerd namespaces (Debian's dockerd starts a containerd of
//! its own under its exec root, or shares a system one: the namespaces keep it apart either
//! way), no iptables and no bridge.
//!
//! `--bridge=none` makes dockerd delete the interface `docker0` of its network namespace, which
//! on this machine's namespace is the first engine's bridge. So the second engine runs in a
//! network and mount namespace of its own (`unshare`), and a forwarder here carries TCP from
//! a port on this namespace's loopback to its port (each connection is made from a thread that
//! entered its namespace): warden dials 127.0.0.1 and speaks TLS end to end with the engine.
//! Its mounts go with its mount namespace.
//!
//! One engine per test process, shared by the tests that overlap, stopped (its containers
//! with it) and its folder removed when the last one ends; a folder left by a killed run is
//! cleaned up by the next one (its processes, found by the folder's path in their command
//! lines or by its containers' cgroups, killed by pid).

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use warden_docker::{CERT_FILES, Engine, EngineAddress};

/// Where the engines of all test processes live, one folder per test process id.
fn base() -> PathBuf {
    std::env::temp_dir().join("warden-test-engines")
}

/// The engine's port in its own namespace.
const INNER_PORT: u16 = 2376;
/// How long the engine may take to answer after its start (generous: a loaded machine).
const START_WAIT: Duration = Duration::from_secs(60);

/// The running second engine.
pub(crate) struct SecondEngine {
    dir: PathBuf,
    dockerd: Mutex<Child>,
    /// `tcp://127.0.0.1:PORT`, the forwarder's port.
    pub(crate) address: String,
    pub(crate) port: u16,
}

/// A client certificate folder (ca.pem, cert.pem, key.pem) for the engine.
pub(crate) struct Certs {
    /// Signed by the CA the engine trusts.
    pub(crate) good: PathBuf,
    /// A client certificate of a CA the engine does not trust.
    pub(crate) stranger: PathBuf,
    /// A good folder without cert.pem and key.pem.
    pub(crate) missing: PathBuf,
    /// Warden's good client certificate, but a ca.pem that did not sign the engine's.
    pub(crate) wrong_ca: PathBuf,
}

impl SecondEngine {
    /// The engine of this test process, started on first use; `None` (after saying why) when
    /// it cannot run here outside CI (under `CI=true` a missing capability fails).
    pub(crate) fn get() -> Option<Arc<SecondEngine>> {
        static SHARED: Mutex<Weak<SecondEngine>> = Mutex::new(Weak::new());
        let mut shared = SHARED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(engine) = shared.upgrade() {
            return Some(engine);
        }
        if !available() {
            return None;
        }
        clean_stale();
        let engine = Arc::new(SecondEngine::start());
        *shared = Arc::downgrade(&engine);
        Some(engine)
    }

    fn start() -> SecondEngine {
        let dir = base().join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("server")).expect("the engine's folder");
        make_certs(&dir);
        std::fs::write(dir.join("daemon.json"), "{}").expect("an empty daemon.json");
        let namespace = format!("warden-test-{}", std::process::id());
        let p = |name: &str| dir.join(name).display().to_string();
        let dockerd = format!(
            "ip link set lo up && exec dockerd --host tcp://127.0.0.1:{INNER_PORT} --tlsverify \
             --tlscacert {ca} --tlscert {cert} --tlskey {key} --data-root {data} --exec-root \
             {exec} --pidfile {pid} --config-file {config} --iptables=false --ip-masq=false \
             --bridge=none --containerd-namespace {namespace} --containerd-plugins-namespace \
             {namespace}-plugins",
            ca = p("server/ca.pem"),
            cert = p("server/cert.pem"),
            key = p("server/key.pem"),
            data = p("data"),
            exec = p("exec"),
            pid = p("dockerd.pid"),
            config = p("daemon.json"),
        );
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("the engine's log");
        let child = Command::new("unshare")
            .args(["--net", "--mount", "--propagation", "private", "sh", "-c"])
            .arg(&dockerd)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log"))
            .stderr(log)
            .spawn()
            .expect("unshare starts dockerd");
        // `unshare` and `sh` exec: the child is dockerd, in the namespaces.
        let netns = PathBuf::from(format!("/proc/{}/ns/net", child.id()));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("the forwarder's port");
        let port = listener.local_addr().expect("its address").port();
        let engine = SecondEngine {
            dockerd: Mutex::new(child),
            address: format!("tcp://127.0.0.1:{port}"),
            port,
            dir,
        };
        forward(listener, netns);
        engine.wait_until_up();
        engine
    }

    /// Waits until the engine answers over TLS, then gives it warden's sandbox image, built
    /// by `warden sandbox-image`'s code through the same engine selection.
    fn wait_until_up(&self) {
        // On a thread of its own: the caller may be inside a test's runtime.
        std::thread::scope(|s| {
            s.spawn(|| self.wait_on_own_runtime())
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e))
        });
    }

    fn wait_on_own_runtime(&self) {
        let started = Instant::now();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            loop {
                let engine = self.engine(&self.certs().good);
                match engine.client().await {
                    Ok(_) => break,
                    Err(e) if started.elapsed() > START_WAIT => panic!(
                        "the second engine did not answer in {START_WAIT:?}: {}; its log:\n{}",
                        e.message,
                        std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
                    ),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
                if let Ok(mut child) = self.dockerd.lock()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    panic!(
                        "the second engine's dockerd exited ({status}); its log:\n{}",
                        std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
                    );
                }
            }
            let engine = self.engine(&self.certs().good);
            warden_docker::build_sandbox_image(
                &engine,
                Path::new(warden_docker::BUSYBOX),
                warden_docker::SANDBOX_IMAGE,
            )
            .await
            .expect("the sandbox image builds on the second engine");
        });
    }

    /// An engine (a warden instance) reaching it with the client certificates in `certs`.
    pub(crate) fn engine(&self, certs: &Path) -> Engine {
        Engine::at(self.tls_address(certs))
    }

    pub(crate) fn tls_address(&self, certs: &Path) -> EngineAddress {
        EngineAddress::parse(&self.address, Some(certs.to_owned())).expect("a tcp address")
    }

    /// Its folder (named by this test process's id).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pid of its dockerd.
    pub(crate) fn pid(&self) -> u32 {
        self.dockerd
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .id()
    }

    pub(crate) fn certs(&self) -> Certs {
        let c = self.dir.join("client");
        Certs {
            good: c.join("good"),
            stranger: c.join("stranger"),
            missing: c.join("missing"),
            wrong_ca: c.join("wrong-ca"),
        }
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        let mut child = self
            .dockerd
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // SIGTERM: dockerd stops its containers and its containerd, then exits.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        sweep(&self.dir);
    }
}

/// True when the second engine can run here; else says why and answers false, outside CI
/// (under `CI=true` a missing capability fails).
pub(crate) fn available() -> bool {
    let Some(why) = missing_capability() else {
        return true;
    };
    assert!(!warden_test_support::under_ci(), "CI=true and {why}");
    eprintln!("SKIPPED: {why}");
    false
}

/// Why the second engine cannot run here, if it cannot.
fn missing_capability() -> Option<String> {
    if !warden_test_support::is_root() {
        return Some("the second Docker engine needs root (dockerd, namespaces)".into());
    }
    for tool in ["dockerd", "unshare", "ip"] {
        let found = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(tool).is_file()));
        if !found {
            return Some(format!(
                "`{tool}` is not installed, and the second engine needs it"
            ));
        }
    }
    None
}

/// Carries each connection to `listener` to the engine's port in the namespace `netns`.
fn forward(listener: TcpListener, netns: PathBuf) {
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let netns = netns.clone();
            // A thread of its own: `setns` changes only it, and it ends with the connection.
            std::thread::spawn(move || {
                let Ok(ns) = std::fs::File::open(&netns) else {
                    return;
                };
                if nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).is_err() {
                    return;
                }
                let Ok(engine) = TcpStream::connect((Ipv4Addr::LOCALHOST, INNER_PORT)) else {
                    return;
                };
                // A relay adds no delay of its own: small writes (a session's command line) go
                // out at once rather than waiting on the ACK of the one before (Nagle).
                let _ = (client.set_nodelay(true), engine.set_nodelay(true));
                let (Ok(mut up), Ok(mut down)) = (client.try_clone(), engine.try_clone()) else {
                    return;
                };
                let (mut client, mut engine) = (client, engine);
                let back = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut down, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut engine);
                let _ = engine.shutdown(std::net::Shutdown::Write);
                let _ = back.join();
            });
        }
    });
}

/// Cleans up the folders of test processes that are gone.
pub(crate) fn clean_stale() {
    let Ok(entries) = std::fs::read_dir(base()) else {
        return;
    };
    for entry in entries.flatten() {
        let alive = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            sweep(&entry.path());
        }
    }
}

/// Kills what an engine in `dir` left running (the processes of its containers, found by
/// their cgroups, then every process whose command line names `dir`: dockerd, containerd, the
/// shims), by pid, and removes the folder.
fn sweep(dir: &Path) {
    let kill = |pid: i32| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    if let Ok(containers) = std::fs::read_dir(dir.join("data/containers")) {
        for c in containers.flatten() {
            let id = c.file_name().to_string_lossy().into_owned();
            for cgroup in ["/sys/fs/cgroup/pids/docker", "/sys/fs/cgroup/docker"] {
                let procs = Path::new(cgroup).join(&id).join("cgroup.procs");
                for pid in std::fs::read_to_string(procs).unwrap_or_default().lines() {
                    if let Ok(pid) = pid.trim().parse() {
                        kill(pid);
                    }
                }
            }
        }
    }
    let needle = dir.display().to_string();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle)
                && pid != std::process::id() as i32
            {
                kill(pid);
            }
        }
    }
    // The engine's mounts were in its mount namespace, gone with its last process.
    for _ in 0..50 {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("cannot remove the second engine's folder {}", dir.display());
}

/// The engine's CA and certificate (IP 127.0.0.1), and the client folders of [`Certs`].
fn make_certs(dir: &Path) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca = |name: &str| {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a CA certificate");
        (cert.pem(), Issuer::new(params, key))
    };
    let leaf = |issuer: &Issuer<'_, KeyPair>, server: bool| {
        let key = KeyPair::generate().expect("a key");
        let names = if server {
            vec!["127.0.0.1".to_owned()]
        } else {
            Vec::new()
        };
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        params
            .distinguished_name
            .push(DnType::CommonName, if server { "engine" } else { "warden" });
        let cert = params.signed_by(&key, issuer).expect("a certificate");
        (cert.pem(), key.serialize_pem())
    };
    let write = |folder: &Path, files: [Option<&str>; 3]| {
        std::fs::create_dir_all(folder).expect("a certificate folder");
        for (name, text) in CERT_FILES.iter().zip(files) {
            if let Some(text) = text {
                std::fs::write(folder.join(name), text).expect("a certificate file");
            }
        }
    };
    let (ca_pem, issuer) = ca("warden test engine CA");
    let (stranger_pem, stranger) = ca("a CA the engine does not know");
    let (server_cert, server_key) = leaf(&issuer, true);
    write(
        &dir.join("server"),
        [Some(&ca_pem), Some(&server_cert), Some(&server_key)],
    );
    let (cert, key) = leaf(&issuer, false);
    let (stranger_cert, stranger_key) = leaf(&stranger, false);
    let client = dir.join("client");
    write(
        &client.join("good"),
        [Some(&ca_pem), Some(&cert), Some(&key)],
    );
    write(
        &client.join("stranger"),
        [Some(&ca_pem), Some(&stranger_cert), Some(&stranger_key)],
    );
    write(&client.join("missing"), [Some(&ca_pem), None, None]);
    write(
        &client.join("wrong-ca"),
        [Some(&stranger_pem), Some(&cert), Some(&key)],
    );
}
