//! What a call's transaction costs, on a 10 MB read-write root of 1,000 files where the call
//! changes 10: a host call with its transaction beside the same call writing the root in place
//! (interleaved), and the store's own steps — the change set and commit, a rollback (the view
//! discarded), an undo — beside `cp -a` of the root, the copy a user would script; a
//! session's command with its transaction beside the same session's writing in place; and
//! the same while the session's shell runs another command, so that it runs beside it, in a
//! view of its own.
//! Not a test and not in CI: `cargo bench -p warden-host --bench transactions`
//! (scripts/bench-host). Prints one markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench panics on what it cannot go on without"
)]

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use warden_core::{Dispatcher, Limits, Policy, Status, ToolCall, Toolbox};
use warden_host::{Helper, HostBackend};
use warden_tx::Store;

const RUNS: usize = 60;
const FILES: usize = 1000;
const FILE_BYTES: usize = 10 * 1024;
const CHANGED: usize = 10;

/// A host tool over the read-write root `root` (a folder of `dir`; a session's shell when
/// `session`), its calls transactions in `store` when given.
fn dispatcher(dir: &Path, root: &str, store: Option<Arc<Store>>, session: bool) -> Dispatcher {
    let path = dir.join(format!("{root}.toml"));
    std::fs::write(
        &path,
        format!(
            "[executor]\nkind = \"host\"\nname = \"t\"\n\
             argv = [\"/bin/sh\", \"-c\", \"{{command}}\"]\nsession = {session}\n\
             [grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n\
             fs = [{{ host = \"{root}\", guest = \"/ws\", access = \"read-write\" }}]\n"
        ),
    )
    .expect("write the policy");
    let mut backend = HostBackend::new(Helper {
        program: PathBuf::from(env!("CARGO_BIN_EXE_warden-host-helper")),
        args: Vec::new(),
    });
    if let Some(store) = store {
        backend = backend.transactions(store);
    }
    let policy = Policy::load(&path, &[&backend]).expect("the policy loads");
    let mut toolbox = Toolbox::default();
    toolbox
        .add_policy(Arc::new(policy), &[&backend])
        .expect("the tool loads");
    Dispatcher::new(Arc::new(toolbox))
}

/// 1,000 files of 10 KiB in 10 folders, which anyone may write.
fn fill(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let content = vec![b'x'; FILE_BYTES];
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    for i in 0..FILES {
        let dir = root.join(format!("d{}", i % 10));
        std::fs::create_dir_all(&dir).unwrap();
        open(&dir, 0o777);
        let file = dir.join(format!("f{i}"));
        std::fs::write(&file, &content).unwrap();
        open(&file, 0o666);
    }
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

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn main() {
    let place = tempfile::tempdir().unwrap();
    let dir = place.path();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // One root for the calls, one for each session: a session's view is brought up to what
    // others changed in its root, which the other session would do each time.
    for root in ["ws", "s-with", "s-without"] {
        fill(&dir.join(root));
    }
    let ws = dir.join("ws");
    let store = Store::open(&dir.join("home/transactions")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let with = dispatcher(dir, "ws", Some(store.clone()), false);
    let without = dispatcher(dir, "ws", None, false);
    let (mut t_with, mut t_without) = interleaved(&runtime, [&with, &without]);
    // A session's commands, each shell started by a first command not counted.
    let with = dispatcher(dir, "s-with", Some(store.clone()), true);
    let without = dispatcher(dir, "s-without", None, true);
    for d in [&with, &without] {
        let call = ToolCall::new("c", "t", &json!({ "command": "true" }));
        runtime.block_on(d.call(call));
    }
    let (mut s_with, mut s_without) = interleaved(&runtime, [&with, &without]);
    // The same sessions, their shells busy: each command runs beside the shell.
    for d in [&with, &without] {
        let holder = ToolCall::new("hold", "t", &json!({ "command": "sleep 600" }));
        let d = d.clone();
        runtime.spawn(async move { d.call(holder).await });
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (mut b_with, mut b_without) = interleaved(&runtime, [&with, &without]);

    if std::env::var_os("BENCH_CALLS_ONLY").is_some() {
        println!(
            "with {:.2} without {:.2}; a session's command: with {:.2} without {:.2}; \
             beside its busy shell: with {:.2} without {:.2}",
            median(&mut t_with),
            median(&mut t_without),
            median(&mut s_with),
            median(&mut s_without),
            median(&mut b_with),
            median(&mut b_without)
        );
        return;
    }
    // The store's steps alone, on the same root: writes put straight into a view's upper layer
    // as an overlay's copy-up leaves them.
    let root = ws.canonicalize().unwrap();
    let (mut commit, mut rollback, mut undo, mut copy) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut scan = Vec::new();
    for round in 0..RUNS {
        let view = store.view(std::slice::from_ref(&root)).unwrap();
        write_upper(&view.layer(0).upper, round);
        let start = Instant::now();
        let changes = view.changes().unwrap();
        scan.push(ms(start));
        assert_eq!(changes.changes.len(), CHANGED);
        let id = format!("bench-{round}");
        view.commit(&id, "t", &changes, Limits::default().changes)
            .unwrap();
        commit.push(ms(start));
        let start = Instant::now();
        store.undo(&id).unwrap();
        undo.push(ms(start));

        let view = store.view(std::slice::from_ref(&root)).unwrap();
        write_upper(&view.layer(0).upper, round);
        let start = Instant::now();
        drop(view);
        rollback.push(ms(start));

        let target = dir.join(format!("copy-{round}"));
        let start = Instant::now();
        let status = std::process::Command::new("cp")
            .args(["-a", root.to_str().unwrap(), target.to_str().unwrap()])
            .status()
            .unwrap();
        copy.push(ms(start));
        assert!(status.success());
        std::fs::remove_dir_all(&target).unwrap();
    }
    println!("| median of {RUNS} (10 MB root, 1,000 files, {CHANGED} changed) | ms |\n|---|---|");
    println!(
        "| host call, with its transaction | {:.2} |",
        median(&mut t_with)
    );
    println!(
        "| the same call writing the root in place | {:.2} |",
        median(&mut t_without)
    );
    println!(
        "| a session's command, with its transaction | {:.2} |",
        median(&mut s_with)
    );
    println!(
        "| the same session's command writing the root in place | {:.2} |",
        median(&mut s_without)
    );
    println!(
        "| a session's command beside its busy shell, with a transaction of its own | {:.2} |",
        median(&mut b_with)
    );
    println!(
        "| the same command beside it writing the root in place | {:.2} |",
        median(&mut b_without)
    );
    println!(
        "| change set + commit (the store alone) | {:.2} |",
        median(&mut commit)
    );
    println!("| of which the change set | {:.2} |", median(&mut scan));
    println!(
        "| rollback (a view discarded) | {:.2} |",
        median(&mut rollback)
    );
    println!("| undo | {:.2} |", median(&mut undo));
    println!("| floor: `cp -a` of the root | {:.2} |", median(&mut copy));
}

/// [`RUNS`] calls that change 10 files, on each of `two` in turn: the time of each.
fn interleaved(runtime: &tokio::runtime::Runtime, two: [&Dispatcher; 2]) -> (Vec<f64>, Vec<f64>) {
    let mut times = (Vec::new(), Vec::new());
    for round in 0..RUNS {
        for (d, into) in [(two[0], &mut times.0), (two[1], &mut times.1)] {
            let call = ToolCall::new("c", "t", &json!({ "command": change_ten(round) }));
            let start = Instant::now();
            let m = runtime.block_on(d.call(call));
            into.push(ms(start));
            assert_eq!(m.status, Status::Success, "{}", m.content);
        }
    }
    times
}

/// What a call's copy-up leaves in `upper`: 10 files, each the root's with a line appended.
fn write_upper(upper: &Path, round: usize) {
    use std::os::unix::fs::PermissionsExt;
    for i in 0..CHANGED {
        let dir = upper.join(format!("d{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut content = vec![b'x'; FILE_BYTES];
        content.extend_from_slice(format!("{round}\n").as_bytes());
        let file = dir.join(format!("f{i}"));
        std::fs::write(&file, content).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
}
