//! Tools that travel: `warden push` to a real registry (Debian's docker-registry on
//! 127.0.0.1), `warden add oci://…` back, signatures checked by digest, and every refusal
//! leaving nothing in the toolbox or the store.

use crate::common::hostile::{Hostile, Reply, Seen};
use crate::common::registry::Registry;
use crate::common::terminal::Terminal;
use crate::common::wasm;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// A publisher's toolbox (units added, with grants and limits to suggest), a consumer's
/// empty one, and a key pair, in one temp folder.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let env = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        for side in ["publisher", "consumer"] {
            std::fs::create_dir_all(env.dir.path().join(side).join("policies")).unwrap();
        }
        env.ok("publisher", &["add", wasm("units").to_str().unwrap()]);
        let policy = env.dir.path().join("publisher/policies/units.toml");
        let text = std::fs::read_to_string(&policy).unwrap().replace(
            "[grants]\n",
            "[grants]\nenv = { UNITS_SYSTEM = \"metric\" }\n",
        );
        std::fs::write(
            &policy,
            text.replace("timeout = \"30s\"", "timeout = \"7s\""),
        )
        .unwrap();
        env.ok(
            "publisher",
            &["keygen", "--out", env.key("signer").to_str().unwrap()],
        );
        env
    }

    fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn warden(&self, side: &str, args: &[&str]) -> Output {
        self.warden_with(side, args, &[])
    }

    /// `warden ARGS` with `vars` set; no registry credentials but those.
    fn warden_with(&self, side: &str, args: &[&str], vars: &[(&str, &str)]) -> Output {
        self.command(side, args, vars)
            .output()
            .expect("warden runs")
    }

    /// The command `warden ARGS` on `side`, with `vars` set.
    fn command(&self, side: &str, args: &[&str], vars: &[(&str, &str)]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .args(args)
            .env(
                "WARDEN_TOOLBOX",
                self.dir.path().join(side).join("policies"),
            )
            .env("WARDEN_HOME", self.dir.path().join(side).join("home"))
            .env("DOCKER_CONFIG", self.dir.path().join(side).join("docker"))
            .env_remove("WARDEN_REGISTRY")
            .env_remove("WARDEN_REGISTRY_USERNAME")
            .env_remove("WARDEN_REGISTRY_PASSWORD")
            .env_remove("RUST_LOG")
            .envs(vars.iter().copied());
        command
    }

    /// `warden ARGS` on `side`, refused: its error.
    fn fails(&self, side: &str, args: &[&str]) -> String {
        let out = self.warden(side, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "warden {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stderr)
    }

    /// Empties the consumer's toolbox and store, for a refusal to be seen to store nothing.
    fn clear_consumer(&self) {
        for folder in ["consumer/policies", "consumer/home/store"] {
            let _ = std::fs::remove_dir_all(self.dir.path().join(folder));
        }
        std::fs::create_dir(self.dir.path().join("consumer/policies")).unwrap();
    }

    fn ok(&self, side: &str, args: &[&str]) -> String {
        let out = self.warden(side, args);
        assert!(
            out.status.success(),
            "warden {args:?} failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `warden add ARGS` on the consumer's side, refused: its error, with nothing left behind.
    fn refused(&self, args: &[&str]) -> String {
        let out = self.warden("consumer", args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "warden {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(self.files("consumer/policies"), Vec::<String>::new());
        assert_eq!(self.files("consumer/home/store"), Vec::<String>::new());
        text(&out.stderr)
    }

    fn files(&self, folder: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join(folder))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn consumer_policy(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("consumer/policies/units.toml")).unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The digest warden shows with a publisher's suggestion: `(--accept-grants=sha256:… writes
/// them)`.
fn suggestion_digest(said: &str) -> String {
    digest_after(said, "(--accept-grants=")
}

/// The `sha256:…` digest right after `marker` in `said`.
fn digest_after(said: &str, marker: &str) -> String {
    let at = said
        .find(&format!("{marker}sha256:"))
        .unwrap_or_else(|| panic!("no digest after `{marker}` in {said}"));
    said[at + marker.len()..]
        .chars()
        .take("sha256:".len() + 64)
        .collect()
}

/// The JSON at `path` in the registry.
fn json_at(registry: &Registry, path: &str) -> Value {
    serde_json::from_slice(&registry.get(path).unwrap_or_else(|| panic!("{path}"))).unwrap()
}

#[test]
fn a_signed_tool_travels_and_answers_pinned_to_its_layer() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    let reference = registry.reference("tools/units:1.0");
    let signer = env.key("signer.key");
    let pushed = env.ok(
        "publisher",
        &["push", "units", &reference, "--sign", path(&signer)],
    );
    assert!(pushed.contains("signed by sha256:"), "{pushed}");

    // The standard layout, byte for byte where it is fixed.
    let manifest = json_at(&registry, "/v2/tools/units/manifests/1.0");
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    let layer = layers[0]["digest"].as_str().unwrap().to_owned();
    let component = std::fs::read(wasm("units")).unwrap();
    assert_eq!(layers[0]["size"], component.len());
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    let config = json_at(&registry, &format!("/v2/tools/units/blobs/{config_digest}"));
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], layer.as_str());
    let exports = config["component"]["exports"].to_string();
    assert!(exports.contains("convert"), "{config}");

    // Default: the publisher's grants are shown, not written, with the digest that takes them.
    let added = env.ok(
        "consumer",
        &["add", &reference, "--key", path(&env.key("signer.pub"))],
    );
    assert!(added.contains("UNITS_SYSTEM"), "{added}");
    let suggestion = suggestion_digest(&added);
    let policy = env.consumer_policy();
    let pin = format!("sha256 = \"{}\"", layer.strip_prefix("sha256:").unwrap());
    assert!(policy.contains(&pin), "{policy}");
    assert!(
        policy.contains("\n[origin]\nreference = \"oci://"),
        "{policy}"
    );
    assert!(policy.contains("\nsigned_by = \"sha256:"), "{policy}");
    let audit = env.ok("consumer", &["audit"]);
    assert!(audit.contains("origin    oci://"), "{audit}");
    assert!(audit.contains("signed by sha256:"), "{audit}");
    assert!(policy.contains("#   env = { UNITS_SYSTEM"), "{policy}");
    assert!(!policy.contains("\nenv = "), "{policy}");
    let answer: Value = serde_json::from_str(&env.ok(
        "consumer",
        &[
            "call",
            "convert",
            r#"{"quantity": {"value": 1, "unit": "kilometer"}, "to": "meter"}"#,
        ],
    ))
    .unwrap();
    assert_eq!(answer["content"], "1000.0", "{answer}");

    // --accept-grants=DIGEST writes them.
    env.ok(
        "consumer",
        &[
            "add",
            &reference,
            "--key",
            path(&env.key("signer.pub")),
            "--force",
            &format!("--accept-grants={suggestion}"),
        ],
    );
    let policy = env.consumer_policy();
    assert!(
        policy.contains("\nenv = { UNITS_SYSTEM = \"metric\" }"),
        "{policy}"
    );
    assert!(policy.contains("timeout = \"7s\""), "{policy}");
}

/// A tool whose policy names a WIT folder takes its docs along: the consumer's tool has the
/// publisher's descriptions, from the files written beside its policy.
#[test]
fn a_tools_wit_docs_travel_with_its_policy() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    let wit = crate::common::root().join("guest-sdk/tools/units/wit");
    env.ok(
        "publisher",
        &["add", path(&wasm("units")), "--force", "--wit", path(&wit)],
    );
    let reference = registry.reference("tools/units:docs");
    let pushed = env.ok("publisher", &["push", "units", &reference]);
    assert!(
        pushed.contains("its WIT docs with them: world.wit"),
        "{pushed}"
    );
    let added = env.ok("consumer", &["add", &reference, "--allow-unsigned"]);
    assert!(added.contains("units"), "{added}");
    assert_eq!(env.files("consumer/policies/units.wit"), ["world.wit"]);
    assert_eq!(
        std::fs::read(env.dir.path().join("consumer/policies/units.wit/world.wit")).unwrap(),
        std::fs::read(wit.join("world.wit")).unwrap()
    );
    assert!(
        env.consumer_policy().contains("\nwit = \"units.wit\"\n"),
        "{}",
        env.consumer_policy()
    );
    let descriptions = |side: &str| -> Vec<(String, String)> {
        let tools: Value = serde_json::from_str(&env.ok(side, &["tools", "--json"])).unwrap();
        let mut d: Vec<(String, String)> = tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].to_string(), t["description"].to_string()))
            .collect();
        d.sort();
        d
    };
    let published = descriptions("publisher");
    assert!(
        published
            .iter()
            .any(|(_, d)| d.contains("Converts a length")),
        "{published:?}"
    );
    assert_eq!(descriptions("consumer"), published);
}

/// `warden pull` of a new version brings its docs: the folder `add` wrote is replaced, the old
/// one gone.
#[test]
fn pull_brings_a_new_versions_docs() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    let wit = env.dir.path().join("publisher/units-wit");
    std::fs::create_dir_all(&wit).unwrap();
    let world = crate::common::root().join("guest-sdk/tools/units/wit/world.wit");
    std::fs::copy(&world, wit.join("world.wit")).unwrap();
    env.ok(
        "publisher",
        &["add", path(&wasm("units")), "--force", "--wit", path(&wit)],
    );
    let reference = registry.reference("tools/units:latest");
    env.ok("publisher", &["push", "units", &reference]);
    env.ok("consumer", &["add", &reference, "--allow-unsigned"]);

    // Version 2: the same code with a custom section more (so another digest), its docs
    // reworded.
    let text = std::fs::read_to_string(wit.join("world.wit")).unwrap();
    assert!(text.contains("Converts a length"), "{text}");
    std::fs::write(
        wit.join("world.wit"),
        text.replace("Converts a length", "Turns a length"),
    )
    .unwrap();
    let mut component = std::fs::read(wasm("units")).unwrap();
    component.extend_from_slice(&[0, 7, 4, b'n', b'o', b't', b'e', b'v', b'2']);
    let stored = env.dir.path().join("publisher/policies/units-v2.wasm");
    std::fs::write(&stored, component).unwrap();
    let policy = env.dir.path().join("publisher/policies/units.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    let old_component = text
        .lines()
        .find_map(|l| l.strip_prefix("component = "))
        .unwrap()
        .to_owned();
    std::fs::write(
        &policy,
        text.replace(
            &format!("component = {old_component}"),
            &format!("component = {:?}", path(&stored)),
        ),
    )
    .unwrap();
    env.ok("publisher", &["pin", "units"]);
    env.ok("publisher", &["push", "units", &reference]);

    let said = env.ok("consumer", &["pull", "units", "--allow-unsigned"]);
    assert!(said.contains("units: oci://"), "{said}");
    let docs = env.dir.path().join("consumer/policies/units.wit/world.wit");
    let docs = std::fs::read_to_string(docs).unwrap();
    assert!(docs.contains("Turns a length"), "{docs}");
    assert_eq!(
        env.files("consumer/policies"),
        ["units.toml", "units.wasm", "units.wit"]
    );
    let tools = env.ok("consumer", &["tools"]);
    assert!(tools.contains("Turns a length"), "{tools}");
}

/// Plain HTTP follows the address dialled, never the name. A name pinned to 127.0.0.1 is
/// reached over plain HTTP as loopback is, and its origin says nothing of it. Pinned to
/// 0.0.0.0 (not a loopback address, though Linux dials it as this machine, so nothing leaves
/// it) the registry is refused, naming `--insecure-registry`; with it, it is reached, and the
/// tool's origin and audit say it came over plain HTTP.
#[test]
fn plain_http_off_loopback_only_with_insecure_registry_and_flagged() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    let name = format!("registry.test:{}", registry.port);
    let reference = format!("oci://{name}/tools/units:1");
    let loopback = "--resolve=registry.test:127.0.0.1";
    env.ok("publisher", &[loopback, "push", "units", &reference]);
    env.ok(
        "consumer",
        &[loopback, "add", &reference, "--allow-unsigned"],
    );
    let policy = env.consumer_policy();
    assert!(!policy.contains("plain_http"), "{policy}");
    let audit = env.ok("consumer", &["audit"]);
    assert!(!audit.contains("PLAIN HTTP"), "{audit}");
    env.clear_consumer();

    let off = "--resolve=registry.test:0.0.0.0";
    let said = env.fails("publisher", &[off, "push", "units", &reference]);
    assert!(said.contains("answers plain HTTP, not HTTPS"), "{said}");
    assert!(said.contains("dialled at 0.0.0.0"), "{said}");
    assert!(
        said.contains(&format!("--insecure-registry {name}")),
        "{said}"
    );
    let insecure = format!("--insecure-registry={name}");
    env.ok("publisher", &[off, "push", "units", &reference, &insecure]);
    let refused = env.refused(&[off, "add", &reference, "--allow-unsigned"]);
    assert!(refused.contains("--insecure-registry"), "{refused}");
    env.ok(
        "consumer",
        &[off, "add", &reference, "--allow-unsigned", &insecure],
    );
    let policy = env.consumer_policy();
    assert!(policy.contains("\nplain_http = true"), "{policy}");
    let audit = env.ok("consumer", &["audit"]);
    assert!(audit.contains("over PLAIN HTTP"), "{audit}");
    assert!(
        audit.contains("plain HTTP: fetched from a registry off this machine"),
        "{audit}"
    );
}

/// The review's attack: `--resolve localhost:ADDRESS` off loopback once got plain HTTP by the
/// name. Pinned to 0.0.0.0 (not loopback, though Linux dials it as this machine: no test
/// sends traffic off it), a registry on 127.0.0.1 that answers plain HTTP is refused and sees
/// no plain request, only TLS handshakes.
#[test]
fn plain_http_follows_the_address_dialled_never_the_name() {
    let recorder = Hostile::start(|seen| match seen.tls {
        true => Reply::status(400, b"plain HTTP here"),
        false => Reply::status(404, b"{}"),
    });
    let env = Env::new();
    let name = format!("localhost:{}", recorder.port);
    let reference = format!("oci://{name}/tools/units:1");
    let err = env.refused(&[
        "--resolve=localhost:0.0.0.0",
        "add",
        &reference,
        "--allow-unsigned",
    ]);
    assert!(err.contains("answers plain HTTP, not HTTPS"), "{err}");
    assert!(err.contains("localhost is dialled at 0.0.0.0"), "{err}");
    assert!(
        err.contains(&format!("--insecure-registry {name}")),
        "{err}"
    );
    let seen = recorder.seen();
    assert!(!seen.is_empty() && seen.iter().all(|s| s.tls), "{seen:?}");
}

/// A registry that answers plain HTTP (its TLS handshakes get a 400, as a plain server's do),
/// each request as `script` says.
fn plain(script: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Hostile {
    Hostile::start(move |seen| match seen.tls {
        true => Reply::status(400, b"plain HTTP here"),
        false => script(seen),
    })
}

/// A registry that never finishes its TLS handshake, one that sends nothing once asked, one
/// that trickles a byte every 4 s, one that trickles faster but never ends, and one whose blob
/// comes slower than the least rate: each is ended by the bound it breaks (set small by its
/// flag, far from what the registry does), the error names the flag, and nothing is stored.
#[test]
fn a_registry_that_stalls_or_trickles_is_ended_by_the_bound_it_breaks() {
    let env = Env::new();
    let stalls = Hostile::start(|_| Reply::Stall);
    let reference = stalls.reference("tools/units:1");
    let connect = "--registry-connect-timeout=1s";
    let err = env.refused(&["add", &reference, "--allow-unsigned", connect]);
    assert!(err.contains("could not be connected to within 1s"), "{err}");
    assert!(
        err.contains("--registry-connect-timeout sets this bound"),
        "{err}"
    );
    assert!(err.contains("nothing was stored"), "{err}");
    let err = env.fails("publisher", &["push", "units", &reference, connect]);
    assert!(
        err.contains("--registry-connect-timeout sets this bound"),
        "{err}"
    );

    let idle = "--registry-idle-timeout=1s";
    let silent = plain(|_| Reply::Stall);
    let err = env.refused(&[
        "add",
        &silent.reference("tools/units:1"),
        "--allow-unsigned",
        idle,
    ]);
    assert!(err.contains("sent nothing for 1s"), "{err}");
    assert!(
        err.contains(&format!(
            "GET http://127.0.0.1:{}/v2/tools/units/manifests/1",
            silent.port
        )),
        "{err}"
    );
    assert!(
        err.contains("--registry-idle-timeout sets this bound"),
        "{err}"
    );
    let trickles = plain(|_| Reply::Trickle {
        length: 1000,
        every: Duration::from_secs(4),
    });
    let err = env.refused(&[
        "add",
        &trickles.reference("tools/units:1"),
        "--allow-unsigned",
        idle,
    ]);
    assert!(
        err.contains("--registry-idle-timeout sets this bound"),
        "{err}"
    );

    let endless = plain(|_| Reply::Trickle {
        length: 100_000,
        every: Duration::from_millis(50),
    });
    let err = env.refused(&[
        "add",
        &endless.reference("tools/units:1"),
        "--allow-unsigned",
        "--registry-timeout=1s",
    ]);
    assert!(err.contains("did not finish answering within 1s"), "{err}");
    assert!(err.contains("--registry-timeout sets this bound"), "{err}");

    // A manifest at once, no signature, and blobs at 20 bytes a second where 1 MiB/s is the
    // least.
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.wasm.config.v0+json",
            "digest": format!("sha256:{}", "a".repeat(64)),
            "size": 600,
        },
        "layers": [{
            "mediaType": "application/wasm",
            "digest": format!("sha256:{}", "b".repeat(64)),
            "size": 50_000,
        }],
    })
    .to_string();
    let slow_blobs = plain(move |seen| {
        if seen.path.ends_with("/manifests/1") {
            Reply::status(200, manifest.as_bytes())
        } else if seen.path.contains("/blobs/") {
            Reply::Trickle {
                length: 600,
                every: Duration::from_millis(50),
            }
        } else {
            Reply::status(404, b"{}")
        }
    });
    let err = env.refused(&[
        "add",
        &slow_blobs.reference("tools/units:1"),
        "--allow-unsigned",
        "--registry-timeout=1s",
        "--registry-min-rate=1MiB",
    ]);
    assert!(err.contains("did not finish moving a blob within"), "{err}");
    assert!(err.contains("--registry-min-rate"), "{err}");

    let err = env.refused(&["add", &reference, "--registry-min-rate=0"]);
    assert!(err.contains("--registry-min-rate is 0"), "{err}");
}

#[test]
fn what_no_trusted_key_signed_or_the_registry_changed_is_refused_and_nothing_kept() {
    let Some(mut registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    env.ok(
        "publisher",
        &["keygen", "--out", path(&env.key("stranger"))],
    );
    let signed = registry.reference("tools/units:signed");
    env.ok(
        "publisher",
        &[
            "push",
            "units",
            &signed,
            "--sign",
            path(&env.key("signer.key")),
        ],
    );
    let public = env.key("signer.pub");

    // A key that did not sign it.
    let err = env.refused(&["add", &signed, "--key", path(&env.key("stranger.pub"))]);
    assert!(err.contains("none by a trusted key"), "{err}");
    // No key at all.
    let err = env.refused(&["add", &signed]);
    assert!(err.contains("pass --key"), "{err}");
    // Unsigned (another component: a signature belongs to a digest, whatever tag names it).
    env.ok(
        "publisher",
        &["add", path(&wasm("wordcount")), "--name", "other"],
    );
    let unsigned = registry.reference("tools/units:unsigned");
    env.ok("publisher", &["push", "other", &unsigned]);
    let err = env.refused(&["add", &unsigned, "--key", path(&public)]);
    assert!(err.contains("is not signed"), "{err}");
    // ... unless asked for, which the policy says.
    env.ok("consumer", &["add", &unsigned, "--allow-unsigned"]);
    let audit = env.ok("consumer", &["audit"]);
    assert!(audit.contains("UNSIGNED"), "{audit}");
    assert!(
        audit.contains("! unsigned: added from a registry"),
        "{audit}"
    );
    for file in ["consumer/policies", "consumer/home/store"] {
        std::fs::remove_dir_all(env.dir.path().join(file)).unwrap();
    }
    std::fs::create_dir(env.dir.path().join("consumer/policies")).unwrap();

    // A tag moved, after signing, to a component nobody signed.
    env.ok("publisher", &["push", "other", &signed]);
    let err = env.refused(&["add", &signed, "--key", path(&public)]);
    assert!(err.contains("is not signed"), "{err}");

    // A blob changed in the registry's storage.
    let tampered = registry.reference("tools/units:tampered");
    env.ok(
        "publisher",
        &[
            "push",
            "units",
            &tampered,
            "--sign",
            path(&env.key("signer.key")),
        ],
    );
    let manifest = json_at(&registry, "/v2/tools/units/manifests/tampered");
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let blob = registry.blob_file(layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let err = env.refused(&["add", &tampered, "--key", path(&public)]);
    assert!(err.contains("does not match its digest"), "{err}");

    // A layer that says it is larger than warden reads of a component: refused before a byte
    // of it is fetched.
    let mut oversize = json_at(&registry, "/v2/tools/units/manifests/signed");
    oversize["layers"][0]["size"] = serde_json::json!(200_000_000);
    registry.put_manifest("/v2/tools/units/manifests/oversize", &oversize);
    let err = env.refused(&[
        "add",
        &registry.reference("tools/units:oversize"),
        "--allow-unsigned",
    ]);
    assert!(err.contains("is larger than"), "{err}");

    // No such tag; then a stopped registry.
    let err = env.refused(&[
        "add",
        &registry.reference("tools/units:nope"),
        "--key",
        path(&public),
    ]);
    assert!(err.contains("is not in the registry"), "{err}");
    registry.stop();
    let err = env.refused(&["add", &signed, "--key", path(&public)]);
    assert!(err.contains("is not reachable"), "{err}");
}

#[test]
fn bad_references_and_keys_are_refused_with_the_fix() {
    let env = Env::new();
    let err = env.refused(&["add", "oci://Registry/UPPER:x"]);
    assert!(err.contains("lowercase"), "{err}");
    let err = env.refused(&["add", "oci://r.example/a@sha256:12"]);
    assert!(err.contains("not a sha256 digest"), "{err}");
    std::fs::write(env.key("bad.pub"), "not a key").unwrap();
    let err = env.refused(&[
        "add",
        "oci://127.0.0.1:1/a:b",
        "--key",
        path(&env.key("bad.pub")),
    ]);
    assert!(err.contains("not PEM"), "{err}");
    // Plain HTTP is for this machine's loopback only: a push elsewhere goes over TLS.
    let out = env.warden("publisher", &["push", "units", "oci://r.invalid/a:b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("https://") || text(&out.stderr).contains("not reachable"));
    // A key is never overwritten.
    let out = env.warden("publisher", &["keygen", "--out", path(&env.key("signer"))]);
    assert!(
        text(&out.stderr).contains("exists"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_import_its_grants_refuse_is_said_at_add_and_in_the_audit() {
    let env = Env::new();
    let added = env.ok("consumer", &["add", path(&wasm("fetch"))]);
    let flag = "imports wasi:http but the policy grants no hosts: every request will be refused";
    assert!(added.contains(flag), "{added}");
    let audit = env.ok("consumer", &["audit"]);
    assert!(audit.contains(flag), "{audit}");
    assert!(
        audit.contains("imports   wasi:cli, wasi:http, wasi:io"),
        "{audit}"
    );
}

#[test]
fn a_registry_that_wants_credentials_gets_them_from_the_environment_or_dockers_config() {
    let Some(registry) = Registry::start_for(&[("alice", "s3cret-9f2")]) else {
        return;
    };
    let env = Env::new();
    let reference = registry.reference("tools/units:1.0");
    let signer = path(&env.key("signer.key")).to_owned();
    let push = ["push", "units", &reference, "--sign", &signer];
    let err = env.fails("publisher", &push);
    assert!(err.contains("needs credentials"), "{err}");
    let alice = [
        ("WARDEN_REGISTRY_USERNAME", "alice"),
        ("WARDEN_REGISTRY_PASSWORD", "s3cret-9f2"),
    ];
    // Credentials for no registry in particular are not sent, and a user is told.
    let out = env.warden_with("publisher", &push, &alice);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("needs credentials"), "{err}");
    assert!(
        err.contains("WARDEN_REGISTRY_USERNAME and WARDEN_REGISTRY_PASSWORD are ignored"),
        "{err}"
    );
    // Nor are those for another registry.
    let elsewhere = [&alice[..], &[("WARDEN_REGISTRY", "registry.example")]].concat();
    let out = env.warden_with("publisher", &push, &elsewhere);
    assert!(
        text(&out.stderr).contains("needs credentials"),
        "{}",
        text(&out.stderr)
    );
    let here = format!("registry.example,127.0.0.1:{}", registry.port);
    let scoped = [&alice[..], &[("WARDEN_REGISTRY", here.as_str())]].concat();
    let out = env.warden_with("publisher", &push, &scoped);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let public = path(&env.key("signer.pub")).to_owned();
    let err = env.refused(&["add", &reference, "--key", &public]);
    assert!(err.contains("needs credentials"), "{err}");
    // A wrong password is refused as none is.
    let docker = env.dir.path().join("consumer/docker");
    std::fs::create_dir_all(&docker).unwrap();
    let auth = |password: &str| {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("alice:{password}"));
        format!(
            "{{\"auths\": {{\"127.0.0.1:{}\": {{\"auth\": \"{encoded}\"}}}}}}",
            registry.port
        )
    };
    std::fs::write(docker.join("config.json"), auth("wrong")).unwrap();
    let err = env.refused(&["add", &reference, "--key", &public]);
    assert!(err.contains("needs credentials"), "{err}");
    std::fs::write(docker.join("config.json"), auth("s3cret-9f2")).unwrap();
    env.ok("consumer", &["add", &reference, "--key", &public]);
}

/// The review's attack: a registry answers 401 naming a token service of its choosing, and
/// the environment's credentials once went there as Basic, over plain HTTP, to another host.
/// Now a token service on the registry's own address gets them (as its Basic challenge
/// would); one elsewhere over plain HTTP never does, named in `WARDEN_REGISTRY` or not.
#[test]
fn registry_credentials_go_to_a_token_service_only_where_they_are_scoped() {
    let tokens = Hostile::start(|_| Reply::status(200, br#"{"token": "t0k3n"}"#));
    let realm = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let named = realm.clone();
    let registry = plain(move |seen| {
        let bearer = seen.header("authorization") == Some("Bearer t0k3n");
        if seen.path.starts_with("/token") {
            match seen.header("authorization") {
                Some(a) if a.starts_with("Basic ") => Reply::status(200, br#"{"token": "t0k3n"}"#),
                _ => Reply::status(401, b"{}"),
            }
        } else if bearer {
            Reply::status(404, b"{}")
        } else {
            Reply::Answer {
                status: 401,
                headers: vec![(
                    "WWW-Authenticate".into(),
                    format!(
                        "Bearer realm=\"{}\",service=\"test\"",
                        named.lock().unwrap()
                    ),
                )],
                body: b"{}".to_vec(),
            }
        }
    });
    let env = Env::new();
    let reference = registry.reference("tools/units:1");
    let add = ["add", reference.as_str(), "--allow-unsigned"];
    let scope = |hosts: &str| {
        vec![
            ("WARDEN_REGISTRY", hosts.to_owned()),
            ("WARDEN_REGISTRY_USERNAME", "alice".to_owned()),
            ("WARDEN_REGISTRY_PASSWORD", "s3cret".to_owned()),
        ]
    };
    let refused = |vars: &[(&str, String)]| {
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = env.warden_with("consumer", &add, &vars);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
        assert!(env.files("consumer/policies").is_empty());
        text(&out.stderr)
    };

    *realm.lock().unwrap() = format!("http://127.0.0.1:{}/token", tokens.port);
    let here = format!("127.0.0.1:{}", registry.port);
    let err = refused(&scope(&here));
    assert!(err.contains("do not go: it is plain HTTP"), "{err}");
    let both = format!("{here},127.0.0.1:{}", tokens.port);
    let err = refused(&scope(&both));
    assert!(err.contains("do not go: it is plain HTTP"), "{err}");
    assert!(tokens.seen().is_empty(), "{:?}", tokens.seen());

    // Its own address: the token is asked for with the credentials, and then used.
    *realm.lock().unwrap() = format!("http://127.0.0.1:{}/token", registry.port);
    let err = refused(&scope(&here));
    assert!(err.contains("is not in the registry"), "{err}");
    let basic = |seen: &Seen| {
        seen.header("authorization")
            .is_some_and(|a| a.starts_with("Basic "))
    };
    assert_eq!(registry.seen().iter().filter(|s| basic(s)).count(), 1);
    // Credentials scoped to another registry are not sent there.
    let err = refused(&scope("registry.example"));
    assert!(err.contains("needs credentials"), "{err}");
    assert_eq!(registry.seen().iter().filter(|s| basic(s)).count(), 1);
}

#[test]
fn pull_takes_a_new_version_signed_as_before_and_refuses_any_other() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    env.ok(
        "publisher",
        &["keygen", "--out", path(&env.key("stranger"))],
    );
    env.ok(
        "publisher",
        &["add", path(&wasm("wordcount")), "--name", "other"],
    );
    let stable = registry.reference("tools/units:stable");
    let (signer, stranger) = (env.key("signer.key"), env.key("stranger.key"));
    env.ok(
        "publisher",
        &["push", "units", &stable, "--sign", path(&signer)],
    );
    // The consumer trusts both keys for the registry's `tools/` in its trust.toml.
    let home = env.dir.path().join("consumer/home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("trust.toml"),
        format!(
            "[trust]\n\"127.0.0.1:{}/tools\" = [{:?}, {:?}]\n",
            registry.port,
            env.key("signer.pub"),
            env.key("stranger.pub")
        ),
    )
    .unwrap();
    env.ok("consumer", &["add", &stable]);
    let first = env.consumer_policy();
    let said = env.ok("consumer", &["pull", "units"]);
    assert!(said.contains("nothing to do"), "{said}");

    // Moved to a component another trusted key signed: refused, the old one kept.
    env.ok(
        "publisher",
        &["push", "other", &stable, "--sign", path(&stranger)],
    );
    let out = env.warden("consumer", &["pull", "units"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not by sha256:"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(env.consumer_policy(), first);
    // Moved to one nobody signed: refused.
    let unsigned_version = registry.reference("tools/units:stable");
    std::fs::write(
        env.dir.path().join("publisher/policies/other.toml"),
        std::fs::read_to_string(env.dir.path().join("publisher/policies/other.toml"))
            .unwrap()
            .replace("timeout = \"30s\"", "timeout = \"9s\""),
    )
    .unwrap();
    env.ok("publisher", &["push", "other", &unsigned_version]);
    let out = env.warden("consumer", &["pull", "units"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(env.consumer_policy(), first);

    // Signed as before: taken, the consumer's grants kept and the publisher's new ones shown.
    env.ok(
        "publisher",
        &["push", "other", &stable, "--sign", path(&signer)],
    );
    let said = env.ok("consumer", &["pull", "units"]);
    assert!(said.contains("signed by sha256:"), "{said}");
    assert!(said.contains("timeout = \"9s\""), "{said}");
    let policy = env.consumer_policy();
    assert_ne!(policy, first);
    assert!(policy.contains("timeout = \"30s\""), "{policy}");
    let sha = |p: &str| {
        p.lines()
            .find(|l| l.starts_with("sha256 = "))
            .unwrap()
            .to_owned()
    };
    assert_ne!(sha(&policy), sha(&first));
    let component = std::fs::read(env.dir.path().join("consumer/policies/units.wasm")).unwrap();
    assert_eq!(component, std::fs::read(wasm("wordcount")).unwrap());
}

#[test]
fn a_registry_over_tls_is_verified_against_the_roots_warden_trusts() {
    let identity = warden_test_support::servers::Identity::new(&["127.0.0.1"]);
    let Some(registry) = Registry::start_tls(&identity) else {
        return;
    };
    let env = Env::new();
    let reference = registry.reference("tools/units:1.0");
    let signer = path(&env.key("signer.key")).to_owned();
    // Its CA is no root warden trusts: refused, never downgraded to plain HTTP.
    let out = env.warden(
        "publisher",
        &["push", "units", &reference, "--sign", &signer],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("certificate is not trusted") && err.contains("--upstream-roots"),
        "{err}"
    );
    // Trusted with --upstream-roots: pushed and added over TLS.
    let roots = env.dir.path().join("ca.pem");
    std::fs::write(&roots, &identity.ca_pem).unwrap();
    let trusting = ["--upstream-roots", path(&roots)];
    let push = [
        &trusting[..],
        &["push", "units", &reference, "--sign", &signer],
    ]
    .concat();
    env.ok("publisher", &push);
    let public = path(&env.key("signer.pub")).to_owned();
    let add = [&trusting[..], &["add", &reference, "--key", &public]].concat();
    let added = env.ok("consumer", &add);
    assert!(added.contains("signed by sha256:"), "{added}");
    // Or in the system's store (here SSL_CERT_FILE, as OpenSSL reads it): a registry is
    // reached as any program on the machine reaches it.
    let store = [("SSL_CERT_FILE", path(&roots))];
    let again = [
        "add", &reference, "--key", &public, "--force", "--name", "units",
    ];
    let out = env.warden_with("consumer", &again, &store);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The trust file of the consumer: `keys` trusted for the registry's `tools/`.
fn trust(env: &Env, registry: &Registry, keys: &[&str]) {
    let home = env.dir.path().join("consumer/home");
    std::fs::create_dir_all(&home).unwrap();
    let keys: Vec<String> = keys.iter().map(|k| format!("{:?}", env.key(k))).collect();
    std::fs::write(
        home.join("trust.toml"),
        format!(
            "[trust]\n\"127.0.0.1:{}/tools\" = [{}]\n",
            registry.port,
            keys.join(", ")
        ),
    )
    .unwrap();
}

/// The review's attack: a tag moved back to an older release its publisher signed, which
/// `warden pull` once took in silence. The manifest carries its creation time (signed with
/// it); an older one is refused naming --allow-downgrade, and taken with it, flagged in the
/// pull's output, the origin and the audit, until a newer version replaces it.
#[test]
fn pull_refuses_a_tag_moved_back_to_an_older_version_unless_allowed_and_flagged() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    env.ok(
        "publisher",
        &["add", path(&wasm("wordcount")), "--name", "other"],
    );
    let stable = registry.reference("tools/units:stable");
    let signer = env.key("signer.key");
    env.ok(
        "publisher",
        &["push", "units", &stable, "--sign", path(&signer)],
    );
    let tag = "/v2/tools/units/manifests/stable";
    let v1 = registry.get(tag).unwrap();
    let v1_manifest: Value = serde_json::from_slice(&v1).unwrap();
    let made = v1_manifest["annotations"]["org.opencontainers.image.created"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(made.ends_with('Z'), "{v1_manifest}");
    // Creation times are to the second: the next version is a second later.
    let next_second = || std::thread::sleep(Duration::from_millis(1100));
    next_second();
    env.ok(
        "publisher",
        &["push", "other", &stable, "--sign", path(&signer)],
    );
    trust(&env, &registry, &["signer.pub"]);
    env.ok("consumer", &["add", &stable]);
    let in_use = env.consumer_policy();
    assert!(in_use.contains("\ncreated = \""), "{in_use}");
    assert!(
        !in_use.contains(&format!("created = \"{made}\"")),
        "{in_use}"
    );

    // The tag moved back to version 1's very manifest (its signature still good).
    registry.put_manifest_bytes(tag, &v1);
    let err = env.fails("consumer", &["pull", "units"]);
    assert!(err.contains("older than the version in use"), "{err}");
    assert!(err.contains(&made), "{err}");
    assert!(err.contains("--allow-downgrade"), "{err}");
    assert_eq!(env.consumer_policy(), in_use);

    let said = env.ok("consumer", &["pull", "units", "--allow-downgrade"]);
    assert!(
        said.contains("DOWNGRADE, taken with --allow-downgrade"),
        "{said}"
    );
    let policy = env.consumer_policy();
    let reference_in_use = in_use
        .lines()
        .find_map(|l| l.strip_prefix("reference = "))
        .unwrap();
    assert!(
        policy.contains(&format!("\ndowngraded_from = {reference_in_use}")),
        "{policy}"
    );
    assert!(
        policy.contains(&format!("\ncreated = \"{made}\"")),
        "{policy}"
    );
    let audit = env.ok("consumer", &["audit"]);
    assert!(
        audit.contains("downgrade: pulled with --allow-downgrade, older than oci://"),
        "{audit}"
    );

    // A newer version after it is no downgrade, and the flag goes.
    next_second();
    env.ok(
        "publisher",
        &["push", "other", &stable, "--sign", path(&signer)],
    );
    let said = env.ok("consumer", &["pull", "units"]);
    assert!(!said.contains("DOWNGRADE"), "{said}");
    assert!(!env.consumer_policy().contains("downgraded_from"));
    assert!(!env.ok("consumer", &["audit"]).contains("downgrade:"));
}

/// The review's attack: `--accept-grants` wrote whatever the registry served at that moment.
/// Now a suggestion is shown with its digest, `--accept-grants=DIGEST` writes only a
/// suggestion with that digest (another is refused, shown with its own, nothing stored), and a
/// bare `--accept-grants` asks at a terminal, or is refused without one; for `add` and `pull`.
#[test]
fn accept_grants_writes_only_the_suggestion_shown_by_its_digest() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let env = Env::new();
    let reference = registry.reference("tools/units:1.0");
    let signer = path(&env.key("signer.key")).to_owned();
    env.ok(
        "publisher",
        &["push", "units", &reference, "--sign", &signer],
    );
    trust(&env, &registry, &["signer.pub"]);
    let added = env.ok("consumer", &["add", &reference]);
    let shown = suggestion_digest(&added);
    assert!(
        env.consumer_policy()
            .contains(&format!("--accept-grants={shown}")),
        "{}",
        env.consumer_policy()
    );
    env.clear_consumer();

    // The publisher's grants change in the registry after the operator read them.
    let policy = env.dir.path().join("publisher/policies/units.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, text.replace("\"metric\"", "\"imperial\"")).unwrap();
    env.ok(
        "publisher",
        &["push", "units", &reference, "--sign", &signer],
    );
    let err = env.refused(&["add", &reference, &format!("--accept-grants={shown}")]);
    let served = digest_after(&err, "now is ");
    assert_ne!(served, shown);
    assert!(err.contains("nothing was stored"), "{err}");
    assert!(err.contains("UNITS_SYSTEM = \"imperial\""), "{err}");
    assert!(err.contains(&format!("--accept-grants={served}")), "{err}");
    // Bare, with no terminal to ask at: refused, showing what it would take.
    let err = env.refused(&["add", &reference, "--accept-grants"]);
    assert!(err.contains("asks at a terminal"), "{err}");
    assert!(err.contains("UNITS_SYSTEM = \"imperial\""), "{err}");
    assert!(err.contains(&format!("--accept-grants={served}")), "{err}");
    // At a terminal, after seeing them.
    let asking = Terminal::start(
        env.command("consumer", &["add", &reference, "--accept-grants"], &[]),
        24,
        100,
    );
    asking.wait_for("[y/N]");
    assert!(asking.screen().contains(&served), "{}", asking.screen());
    asking.type_keys(b"y\n");
    let (code, screen) = asking.wait();
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        env.consumer_policy()
            .contains("\nenv = { UNITS_SYSTEM = \"imperial\" }"),
        "{}",
        env.consumer_policy()
    );

    // `pull` alike: a new version whose grants changed again.
    env.ok(
        "publisher",
        &["add", path(&wasm("wordcount")), "--name", "other"],
    );
    let other = env.dir.path().join("publisher/policies/other.toml");
    let text = std::fs::read_to_string(&other).unwrap();
    std::fs::write(
        &other,
        text.replace("timeout = \"30s\"", "timeout = \"9s\""),
    )
    .unwrap();
    env.ok(
        "publisher",
        &["push", "other", &reference, "--sign", &signer],
    );
    let before = env.consumer_policy();
    let err = env.fails(
        "consumer",
        &["pull", "units", &format!("--accept-grants={served}")],
    );
    assert!(err.contains("timeout = \"9s\""), "{err}");
    let newest = digest_after(&err, "now is ");
    assert_eq!(env.consumer_policy(), before);
    let err = env.fails("consumer", &["pull", "units", "--accept-grants"]);
    assert!(err.contains(&format!("--accept-grants={newest}")), "{err}");
    assert_eq!(env.consumer_policy(), before);
    let said = env.ok(
        "consumer",
        &["pull", "units", &format!("--accept-grants={newest}")],
    );
    assert!(said.contains(&format!("are written ({newest})")), "{said}");
    assert!(env.consumer_policy().contains("timeout = \"9s\""));
}
