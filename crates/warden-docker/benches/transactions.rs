//! What a docker call's transaction costs, on a 10 MB read-write root of 1,000 files where
//! the call changes 10: a container per call with its transaction (the root mounted through
//! the engine's overlay, committed at the end) beside the same call writing the root in place
//! (a bind), each fresh and from a warm pool of 2; and the root copied in, as for an engine
//! elsewhere, its changes read back and committed as the call's transaction beside the same
//! written back in place, for a container per call and for a session's commands; and a
//! session's commands under gVisor; interleaved. Not a test and not in CI:
//! `cargo bench -p warden-docker --bench transactions`. Prints one markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use warden_core::{Dispatcher, Policy, Status, ToolCall, Toolbox};
use warden_docker::{DockerBackend, Engine, SANDBOX_IMAGE};
use warden_tx::Store;

const RUNS: usize = 20;
const FILES: usize = 1000;
const FILE_BYTES: usize = 10 * 1024;
const CHANGED: usize = 10;

/// How the bench's tool reaches its root.
#[derive(Clone, Copy)]
enum Reach {
    Mounted,
    Pooled,
    Copied,
    /// A session's commands, its root copied in.
    CopiedSession,
    /// A session's commands under gVisor (the engine's `runsc-nonet`).
    GvisorSession,
}

/// A docker tool over the read-write root `ws`, its calls transactions in `store` when given.
fn dispatcher(dir: &Path, reach: Reach, store: Option<Arc<Store>>) -> Dispatcher {
    let name = format!("t-{}-{}", reach as u8, store.is_some());
    let path = dir.join(format!("{name}.toml"));
    let pool = match reach {
        Reach::Pooled => "pool = 2\n",
        Reach::Copied => "copy_back = true\n",
        Reach::CopiedSession => "copy_back = true\nsession = true\n",
        Reach::GvisorSession => "runtime = \"runsc-nonet\"\nsession = true\n",
        Reach::Mounted => "",
    };
    std::fs::write(
        &path,
        format!(
            "[executor]\nkind = \"docker\"\nname = \"t\"\nimage = \"{SANDBOX_IMAGE}\"\n\
             argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\n{pool}\
             [grants]\nfs = [{{ host = \"ws\", guest = \"/ws\", access = \"read-write\" }}]\n"
        ),
    )
    .expect("write the policy");
    let mut engine = Engine::from_env().label("warden.bench", "1");
    if let Reach::Copied | Reach::CopiedSession = reach {
        engine = engine.copying_files();
    }
    let mut backend = DockerBackend::new(engine);
    if let Some(store) = store {
        backend = backend.transactions(store);
    }
    let policy = Policy::load(&path, &[&backend]).expect("the policy loads");
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[&backend])
        .expect("the tool loads");
    let toolbox = Arc::new(toolbox);
    if let Reach::Pooled = reach {
        toolbox.warm();
    }
    Dispatcher::new(toolbox)
}

/// 1,000 files of 10 KiB in 10 folders, every one writable by the container's user.
fn fill(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let content = vec![b'x'; FILE_BYTES];
    for i in 0..FILES {
        let dir = root.join(format!("d{}", i % 10));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let file = dir.join(format!("f{i}"));
        std::fs::write(&file, &content).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// The command that changes 10 files (a line appended to each).
fn change_ten(round: usize) -> String {
    (0..CHANGED)
        .map(|i| format!("echo {round} >> /ws/d{i}/f{i}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let place = tempfile::tempdir().unwrap();
    let dir = place.path();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    fill(&dir.join("ws"));
    let store = Store::open(&dir.join("home/transactions")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rows = runtime.block_on(async {
        let tools = [
            (
                "a container per call, with its transaction",
                Reach::Mounted,
                true,
            ),
            ("the same, writing the root in place", Reach::Mounted, false),
            (
                "from a pool of 2, with its transaction",
                Reach::Pooled,
                true,
            ),
            ("the same, writing the root in place", Reach::Pooled, false),
            (
                "the root copied in, with its transaction",
                Reach::Copied,
                true,
            ),
            ("the same, written back in place", Reach::Copied, false),
            (
                "a session's command, its root copied in, with its transaction",
                Reach::CopiedSession,
                true,
            ),
            (
                "the same, written back at the session's end",
                Reach::CopiedSession,
                false,
            ),
            (
                "a session's command under gVisor, with its transaction",
                Reach::GvisorSession,
                true,
            ),
            (
                "the same, writing the root in place",
                Reach::GvisorSession,
                false,
            ),
        ]
        .map(|(label, reach, tx)| {
            // A session's copies are settled against its root: a root of its own, which the
            // other rows' calls do not change between its commands.
            let home = match reach {
                Reach::CopiedSession | Reach::GvisorSession => {
                    let own = dir.join(format!("session-{}-{tx}", reach as u8));
                    fill(&own.join("ws"));
                    own
                }
                _ => dir.to_owned(),
            };
            let d = dispatcher(&home, reach, tx.then(|| store.clone()));
            (label, d, Vec::new())
        });
        let mut tools = tools;
        // Each pool fills before its first call.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        for round in 0..=RUNS {
            for (label, d, times) in &mut tools {
                let call = ToolCall::new("c", "t", &json!({ "command": change_ten(round) }));
                let start = Instant::now();
                let m = d.call(call).await;
                assert_eq!(m.status, Status::Success, "{label}: {}", m.content);
                // The first round starts the engine's connection and the image's check.
                if round > 0 {
                    times.push(start.elapsed().as_secs_f64() * 1000.0);
                }
                // A pool makes up its spare between calls, as it would between an agent's.
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        }
        tools.map(|(label, _, mut times)| (label, median(&mut times)))
    });
    println!("| median of {RUNS} (10 MB root, 1,000 files, {CHANGED} changed) | ms |\n|---|---|");
    for (label, ms) in rows {
        println!("| {label} | {ms:.1} |");
    }
}
