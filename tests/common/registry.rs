//! A real OCI registry for a test: Debian's `docker-registry` (CNCF distribution 2.8) on
//! 127.0.0.1, its storage in a temporary folder, stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's package puts the registry.
const PROGRAM: &str = "/usr/bin/docker-registry";

pub(crate) struct Registry {
    child: Child,
    pub(crate) port: u16,
    storage: tempfile::TempDir,
    /// It speaks TLS (curl here does not verify it: the test checks that warden does).
    tls: bool,
}

impl Registry {
    /// A registry, or `None` (said on stderr) when it is not installed and not under CI.
    pub(crate) fn start() -> Option<Registry> {
        Self::start_for(&[])
    }

    /// A registry that lets in only `users` (name, password) when there are any, by Basic
    /// authentication against an htpasswd file (bcrypt, written by apache2-utils' `htpasswd`).
    pub(crate) fn start_for(users: &[(&str, &str)]) -> Option<Registry> {
        Self::start_with(users, None)
    }

    /// A registry that speaks only TLS, with `identity`'s certificate.
    pub(crate) fn start_tls(identity: &warden_test_support::servers::Identity) -> Option<Registry> {
        Self::start_with(&[], Some(identity))
    }

    fn start_with(
        users: &[(&str, &str)],
        identity: Option<&warden_test_support::servers::Identity>,
    ) -> Option<Registry> {
        if !Path::new(PROGRAM).is_file() {
            assert!(
                !warden_test_support::under_ci(),
                "CI=true and {PROGRAM} is missing (.ci/run installs Debian's docker-registry)"
            );
            eprintln!("SKIPPED: {PROGRAM} is not installed (apt-get install docker-registry)");
            return None;
        }
        let storage = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = storage.path().join("config.yml");
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            storage.path().join("data").display()
        );
        if !users.is_empty() {
            let htpasswd = storage.path().join("htpasswd");
            let mut lines = String::new();
            for (user, password) in users {
                let out = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("htpasswd (apache2-utils) is installed");
                lines.push_str(String::from_utf8(out.stdout).unwrap().trim());
                lines.push('\n');
            }
            std::fs::write(&htpasswd, lines).unwrap();
            yaml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: warden-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        if let Some(identity) = identity {
            let (cert, key) = (
                storage.path().join("cert.pem"),
                storage.path().join("key.pem"),
            );
            std::fs::write(&cert, &identity.cert_pem).unwrap();
            std::fs::write(&key, &identity.key_pem).unwrap();
            yaml.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
        }
        std::fs::write(&config, yaml).unwrap();
        let child = Command::new(PROGRAM)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let registry = Registry {
            child,
            port,
            storage,
            tls: identity.is_some(),
        };
        let until = Instant::now() + Duration::from_secs(20);
        while !registry.answers() {
            assert!(
                Instant::now() < until,
                "the registry did not answer on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(registry)
    }

    /// PUTs `manifest` (JSON) at `path`, as a client that checks nothing would.
    pub(crate) fn put_manifest(&self, path: &str, manifest: &serde_json::Value) {
        self.put_manifest_bytes(path, manifest.to_string().as_bytes());
    }

    /// PUTs a manifest's exact bytes at `path` (its digest unchanged).
    pub(crate) fn put_manifest_bytes(&self, path: &str, manifest: &[u8]) {
        use std::io::Write as _;
        let mut curl = Command::new("curl")
            .args(["-skf", "-X", "PUT", "--data-binary", "@-", "-H"])
            .arg("Content-Type: application/vnd.oci.image.manifest.v1+json")
            .arg(format!("{}://127.0.0.1:{}{path}", self.scheme(), self.port))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = curl.stdin.take().unwrap();
        stdin.write_all(manifest).unwrap();
        drop(stdin);
        assert!(
            curl.wait().unwrap().success(),
            "the registry refused {path}"
        );
    }

    /// Whether it answers on `/v2/` (with 200, or 401 when it wants credentials).
    fn answers(&self) -> bool {
        let out = Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{}://127.0.0.1:{}/v2/", self.scheme(), self.port))
            .output()
            .unwrap();
        matches!(&out.stdout[..], b"200" | b"401")
    }

    /// `oci://` reference to `repository:tag` here.
    pub(crate) fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://127.0.0.1:{}/{repository_and_tag}", self.port)
    }

    /// The body of a GET of `path`, when it answers 2xx.
    pub(crate) fn get(&self, path: &str) -> Option<Vec<u8>> {
        let out = Command::new("curl")
            .args([
                "-sfL",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
            ])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .unwrap();
        out.status.success().then_some(out.stdout)
    }

    fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// Where the registry keeps the blob `sha256:HEX`.
    pub(crate) fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Stops it.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
