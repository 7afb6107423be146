//! Transactions over real folders, written through real overlay mounts (`unshare -m` and
//! `mount -t overlay`, as a sandbox's view is): change sets, commit, discard, conflicts, undo,
//! rewind, links planted by a call, a commit a killed warden left half done, and a session's
//! view settled command by command through a mount a process holds.
//! They need root (to mount); elsewhere they say so and pass.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test panics on what it cannot go on without"
)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use warden_tx::{ChangeKind, Copied, SessionView, State, Store, TxError, View};

/// The bytes a call's changes and what they replace may hold, as a policy's default.
const LIMIT: u64 = 1 << 30;

/// A root and a store in a folder of their own.
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    mount: PathBuf,
    store: Arc<Store>,
}

fn setup() -> Option<Setup> {
    if !rustix_is_root() {
        eprintln!("skipped: mounting an overlay needs root");
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    let mount = dir.path().join("mnt");
    fs::create_dir_all(root.join("d/e")).expect("root");
    fs::create_dir_all(&mount).expect("mount point");
    fs::write(root.join("a"), "alpha\n").expect("a");
    fs::write(root.join("b"), "bravo\n").expect("b");
    fs::write(root.join("d/c"), "charlie\n").expect("c");
    fs::write(root.join("d/e/f"), "foxtrot\n").expect("f");
    fs::set_permissions(root.join("a"), fs::Permissions::from_mode(0o640)).expect("mode");
    std::os::unix::fs::symlink("a", root.join("link")).expect("link");
    let store = Store::open(&dir.path().join("home/tx")).expect("store");
    let root = root.canonicalize().expect("canonical");
    Some(Setup {
        _dir: dir,
        root,
        mount,
        store,
    })
}

fn rustix_is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl Setup {
    fn view(&self) -> View {
        self.store
            .view(std::slice::from_ref(&self.root))
            .expect("view")
    }

    /// Runs `script` in the root as `view` shows it, in a mount namespace of its own.
    fn write_through(&self, view: &View, script: &str) {
        let layer = view.layer(0);
        let mount = format!(
            "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={} {} && cd {} && {script}",
            view.roots()[0].display(),
            layer.upper.display(),
            layer.work.display(),
            self.mount.display(),
            self.mount.display(),
        );
        let out = Command::new("unshare")
            .args(["-m", "sh", "-ec", &mount])
            .output()
            .expect("unshare");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A call: a view, the script through it, its changes committed as `call`.
    fn call(&self, call: &str, script: &str) -> Result<(), TxError> {
        self.call_on(&self.root, call, script)
    }

    /// [`Setup::call`] over the folder `root`.
    fn call_on(&self, root: &Path, call: &str, script: &str) -> Result<(), TxError> {
        let view = self.store.view(&[root.to_owned()]).expect("view");
        self.write_through(&view, script);
        let changes = view.changes()?;
        view.commit(call, "t", &changes, LIMIT)
    }

    /// Every entry of the root: its content (or link target, or "dir") and mode.
    fn tree(&self) -> BTreeMap<PathBuf, (String, u32)> {
        tree_of(&self.root)
    }
}

/// Every entry below `root`: its content (or link target, or "dir") and mode.
fn tree_of(root: &Path) -> BTreeMap<PathBuf, (String, u32)> {
    let mut tree = BTreeMap::new();
    walk(root, root, &mut tree);
    tree
}

fn walk(root: &Path, dir: &Path, tree: &mut BTreeMap<PathBuf, (String, u32)>) {
    for entry in fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).expect("lstat");
        let rel = path.strip_prefix(root).expect("below").to_owned();
        let mode = meta.mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).expect("link");
            tree.insert(rel, (format!("-> {}", target.display()), 0));
        } else if meta.is_dir() {
            tree.insert(rel, ("dir".into(), mode));
            walk(root, &path, tree);
        } else {
            let content = fs::read_to_string(&path).expect("read");
            tree.insert(rel, (content, mode));
        }
    }
}

#[test]
fn a_change_set_names_what_was_added_modified_and_removed() {
    let Some(s) = setup() else { return };
    let view = s.view();
    s.write_through(
        &view,
        "echo ALPHA > a; rm b; rm -r d; mkdir -p new/deep; echo n > new/deep/n; chmod 600 \
         new/deep/n; ln -s /etc/shadow s; touch link",
    );
    let changes = view.changes().expect("changes");
    let kinds: BTreeMap<String, ChangeKind> = changes
        .changes
        .iter()
        .map(|c| (c.path.display().to_string(), c.kind()))
        .collect();
    let expected: BTreeMap<String, ChangeKind> = [
        ("a", ChangeKind::Modified),
        ("b", ChangeKind::Removed),
        ("d", ChangeKind::Removed),
        ("d/c", ChangeKind::Removed),
        ("d/e", ChangeKind::Removed),
        ("d/e/f", ChangeKind::Removed),
        ("new", ChangeKind::Added),
        ("new/deep", ChangeKind::Added),
        ("new/deep/n", ChangeKind::Added),
        ("s", ChangeKind::Added),
    ]
    .into_iter()
    .map(|(p, k)| (p.to_owned(), k))
    .collect();
    // `touch link` wrote through the link to `a` (already changed): no change of its own.
    assert_eq!(kinds, expected);
    let shown = changes.to_json(100);
    let s_entry = shown["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["path"] == "s"))
        .expect("s listed");
    assert_eq!(s_entry["type"], "symlink");
    assert_eq!(s_entry["target"], "/etc/shadow");
    let n = shown["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["path"] == "new/deep/n"))
        .expect("n listed");
    assert_eq!(n["mode"], "0600");
    assert_eq!(n["size"], 2);
    // Nothing reached the root before the commit.
    assert_eq!(fs::read_to_string(s.root.join("a")).expect("a"), "alpha\n");
    assert!(changes.digest().starts_with("sha256:"));
}

#[test]
fn a_commit_applies_byte_exact_and_an_undo_puts_everything_back() {
    let Some(s) = setup() else { return };
    let before = s.tree();
    s.call(
        "aaaa-1",
        "echo ALPHA > a; chmod 755 a; rm b; rm -r d; mkdir d; echo file > d/x; ln -sf b link; \
         echo new > new",
    )
    .expect("commit");
    let after = s.tree();
    assert_eq!(after[Path::new("a")], ("ALPHA\n".into(), 0o755));
    assert!(!after.contains_key(Path::new("b")));
    assert!(!after.contains_key(Path::new("d/c")));
    assert_eq!(after[Path::new("d/x")].0, "file\n");
    assert_eq!(after[Path::new("link")].0, "-> b");
    assert_eq!(after[Path::new("new")].0, "new\n");
    let undone = s.store.undo("aaaa-1").expect("undo");
    assert_eq!(undone.state, State::Undone);
    assert_eq!(s.tree(), before);
    assert!(matches!(
        s.store.undo("aaaa-1"),
        Err(TxError::NotUndoable { .. })
    ));
}

#[test]
fn a_view_dropped_without_a_commit_leaves_the_root_untouched() {
    let Some(s) = setup() else { return };
    let before = s.tree();
    let view = s.view();
    s.write_through(&view, "echo gone > a; rm -r d; echo x > x");
    drop(view);
    assert_eq!(s.tree(), before);
    let views = fs::read_dir(s._dir.path().join("home/tx/views")).expect("views");
    assert_eq!(views.count(), 0, "the view's folders are removed");
}

#[test]
fn two_views_writing_one_file_commit_once_and_conflict_once() {
    let Some(s) = setup() else { return };
    let (first, second) = (s.view(), s.view());
    s.write_through(&first, "echo first > a");
    s.write_through(&second, "echo second > a; echo mine > only-second");
    let changes = first.changes().expect("changes");
    first
        .commit("bbbb-1", "t", &changes, LIMIT)
        .expect("first commits");
    let changes = second.changes().expect("changes");
    match second.commit("bbbb-2", "t", &changes, LIMIT) {
        Err(TxError::Conflict { paths, .. }) => assert_eq!(paths, vec![s.root.join("a")]),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(fs::read_to_string(s.root.join("a")).expect("a"), "first\n");
    assert!(
        !s.root.join("only-second").exists(),
        "nothing of it applied"
    );
}

/// Another process's commit (another warden's store on the same home), or a person's edit,
/// made to a path while a call ran is a conflict too: nothing of the call is applied. A change
/// made before the call started is none.
#[test]
fn a_path_another_process_changed_while_the_call_ran_is_a_conflict() {
    let Some(s) = setup() else { return };
    fs::write(s.root.join("b"), "edited before\n").expect("b");
    let other = Store::open(&s._dir.path().join("home/tx")).expect("another store");
    let mine = s.view();
    let theirs = other.view(std::slice::from_ref(&s.root)).expect("view");
    s.write_through(&theirs, "echo theirs > a");
    s.write_through(&mine, "echo mine > a; echo mine > b; echo mine > new");
    let changes = theirs.changes().expect("changes");
    past_a_tick();
    theirs
        .commit("cccc-1", "t", &changes, LIMIT)
        .expect("theirs commits");
    let changes = mine.changes().expect("changes");
    match mine.commit("cccc-2", "t", &changes, LIMIT) {
        Err(TxError::Conflict { paths, .. }) => assert_eq!(paths, vec![s.root.join("a")]),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(fs::read_to_string(s.root.join("a")).expect("a"), "theirs\n");
    assert!(!s.root.join("new").exists(), "nothing of it applied");

    // A person's edit while a call runs.
    let mine = s.view();
    s.write_through(&mine, "echo mine > b");
    past_a_tick();
    fs::write(s.root.join("b"), "edited meanwhile\n").expect("b");
    let changes = mine.changes().expect("changes");
    assert!(matches!(
        mine.commit("cccc-3", "t", &changes, LIMIT),
        Err(TxError::Conflict { .. })
    ));
    assert_eq!(
        fs::read_to_string(s.root.join("b")).expect("b"),
        "edited meanwhile\n"
    );
}

/// Changes that, with what they replace, hold more than the policy's limit are refused whole.
#[test]
fn changes_past_the_limit_are_refused_and_nothing_is_applied() {
    let Some(s) = setup() else { return };
    let before = s.tree();
    let view = s.view();
    s.write_through(&view, "head -c 3000 /dev/zero > big; echo small > a");
    let changes = view.changes().expect("changes");
    // 3000 + 6 written, 6 ("alpha\n") replaced.
    match view.commit("dddd-1", "t", &changes, 3000) {
        Err(TxError::TooLarge { bytes, limit }) => assert_eq!((bytes, limit), (3012, 3000)),
        other => panic!("expected too large, got {other:?}"),
    }
    assert_eq!(s.tree(), before);
}

/// Longer than the file systems' clock takes to tick (a change in the tick a call starts in
/// is not seen), however busy the machine: only the order matters.
fn past_a_tick() {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

#[test]
fn undo_of_a_call_whose_paths_a_later_call_changed_is_a_conflict_and_rewind_undoes_in_order() {
    let Some(s) = setup() else { return };
    let start = s.tree();
    s.call("cccc-1", "echo one > a").expect("one");
    let after_one = s.tree();
    s.call("cccc-2", "echo two > a").expect("two");
    match s.store.undo("cccc-1") {
        Err(TxError::Conflict { call, paths }) => {
            assert_eq!(call.as_deref(), Some("cccc-1"));
            assert_eq!(paths, vec![s.root.join("a")]);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        s.tree().get(Path::new("a")).map(|e| e.0.as_str()),
        Some("two\n")
    );
    for n in 3..=12 {
        s.call(
            &format!("cccc-{n}"),
            &format!("echo {n} > f{n}; echo {n} >> b"),
        )
        .expect("call");
    }
    let undone = s.store.rewind("cccc-1").expect("rewind");
    assert_eq!(undone.len(), 11, "calls 12 down to 2");
    assert_eq!(undone.first().map(|r| r.call_id.as_str()), Some("cccc-12"));
    assert_eq!(s.tree(), after_one);
    s.store.undo("cccc-1").expect("now it can be undone");
    assert_eq!(s.tree(), start);
}

#[test]
fn a_forced_undo_puts_back_what_the_call_found_over_a_later_change() {
    let Some(s) = setup() else { return };
    s.call("ffff-1", "echo one > a").expect("one");
    let after_one = s.tree();
    s.call("ffff-2", "echo two > a; echo new > b").expect("two");
    std::fs::write(s.root.join("a"), "a person's edit\n").expect("edit");
    std::fs::write(s.root.join("b"), "edited too\n").expect("edit");
    assert!(matches!(
        s.store.undo("ffff-2"),
        Err(TxError::Conflict { .. })
    ));
    s.store.undo_forced("ffff-2").expect("forced");
    assert_eq!(
        s.tree(),
        after_one,
        "the edits replaced, the added file removed"
    );
}

#[test]
fn a_link_planted_by_one_call_is_never_written_or_read_through() {
    let Some(s) = setup() else { return };
    let secret = s._dir.path().join("secret");
    fs::write(&secret, "do not read\n").expect("secret");
    s.call("dddd-1", &format!("ln -s {} planted", secret.display()))
        .expect("plant");
    // A second call replaces the link with a file: the link goes, the target stays as it was.
    s.call("dddd-2", "rm planted; echo mine > planted")
        .expect("replace");
    assert_eq!(
        fs::read_to_string(&secret).expect("secret"),
        "do not read\n"
    );
    assert_eq!(
        fs::read_to_string(s.root.join("planted")).expect("planted"),
        "mine\n"
    );
    // Its undo puts the link back, without reading what it points to.
    s.store.undo("dddd-2").expect("undo");
    assert_eq!(fs::read_link(s.root.join("planted")).expect("link"), secret);
    let record = s
        .store
        .records()
        .expect("records")
        .into_iter()
        .find(|r| r.call_id == "dddd-2")
        .expect("record");
    assert_eq!(
        record.pre_bytes(),
        0,
        "a link's pre-image is its target, not its content"
    );
}

#[test]
fn a_forks_commit_applies_its_calls_changes_and_never_reads_through_a_planted_link() {
    let Some(s) = setup() else { return };
    let copy = s._dir.path().join("copy");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&s.root)
        .arg(&copy)
        .status();
    assert!(copied.expect("cp").success());
    let secret = s._dir.path().join("outside");
    fs::create_dir(&secret).expect("outside");
    fs::write(secret.join("f"), "do not read\n").expect("secret");
    // The fork's calls, over its copy: then, as a job of the fork's might, a folder it wrote
    // becomes a link to a folder outside, holding a file of the name it wrote there.
    s.call_on(
        &copy,
        "eeee-1",
        "echo forked > a; rm b; mkdir n; echo mine > n/f",
    )
    .expect("fork's call");
    fs::remove_dir_all(copy.join("n")).expect("n");
    std::os::unix::fs::symlink(&secret, copy.join("n")).expect("plant");
    let copies = [(s.root.clone(), copy.clone())];
    let mut since = 0;
    let changes = s
        .store
        .commit_fork("eeee-2", "t", &copies, &mut since, LIMIT)
        .expect("commit");
    let mut applied: Vec<_> = changes.changes.iter().map(|c| c.path.clone()).collect();
    applied.sort();
    assert_eq!(applied, [Path::new("a"), Path::new("b"), Path::new("n")]);
    assert_eq!(fs::read_to_string(s.root.join("a")).expect("a"), "forked\n");
    assert!(!s.root.join("b").exists());
    assert_eq!(fs::read_link(s.root.join("n")).expect("a link"), secret);
    assert_eq!(
        fs::read_to_string(secret.join("f")).expect("secret"),
        "do not read\n"
    );
    // Nothing more, until the fork writes again; a path the root changed since is a
    // conflict, and nothing of the commit is applied.
    let again = s
        .store
        .commit_fork("eeee-3", "t", &copies, &mut since, LIMIT);
    assert!(again.expect("nothing").changes.is_empty());
    s.call_on(&copy, "eeee-4", "echo again > a; echo new > c")
        .expect("fork's call");
    fs::write(s.root.join("a"), "a person's edit\n").expect("edit");
    let clash = s
        .store
        .commit_fork("eeee-5", "t", &copies, &mut since, LIMIT);
    assert!(
        matches!(&clash, Err(TxError::Conflict { paths, .. }) if paths == &[s.root.join("a")]),
        "{clash:?}"
    );
    assert!(!s.root.join("c").exists());
    // The first commit is one call: its undo puts the root back.
    fs::write(s.root.join("a"), "forked\n").expect("as committed");
    s.store.undo("eeee-2").expect("undo");
    assert_eq!(fs::read_to_string(s.root.join("a")).expect("a"), "alpha\n");
    assert_eq!(fs::read_to_string(s.root.join("b")).expect("b"), "bravo\n");
    assert!(fs::symlink_metadata(s.root.join("n")).is_err());
}

#[test]
fn a_commit_left_half_done_by_a_killed_warden_is_rolled_back_at_the_next_open() {
    let Some(s) = setup() else { return };
    let before = s.tree();
    s.call("eeee-1", "echo changed > a; rm b; echo new > new")
        .expect("commit");
    // As a warden killed mid-commit leaves it: the journal says committing, its owner gone.
    let record = s._dir.path().join("home/tx/calls/eeee-1/record.json");
    let text = fs::read_to_string(&record).expect("record");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json["state"] = "committing".into();
    json["owner"] = "gone:1:1".into();
    fs::write(&record, json.to_string()).expect("write");
    // And a step it never reached: `new` not yet in place.
    fs::remove_file(s.root.join("new")).expect("rm new");
    Store::open(&s._dir.path().join("home/tx")).expect("reopen");
    assert_eq!(s.tree(), before);
    assert!(
        !record.exists(),
        "the call is forgotten: it changed nothing"
    );
}

/// A session's view, mounted for as long as a process holds it (as a session's shell does):
/// a command warden ended is put back through that process's view of the mount (a mode
/// changed, a folder replaced by a file and a file by a folder), the root untouched; the same
/// command ended on its own commits, and the root and the view then agree.
#[test]
fn a_sessions_command_is_put_back_through_its_mount_or_committed() {
    use std::io::BufRead;
    let Some(s) = setup() else { return };
    let view = s.view();
    let layer = view.layer(0);
    let hold = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={} {} && echo ready && \
         exec sleep 600",
        s.root.display(),
        layer.upper.display(),
        layer.work.display(),
        s.mount.display(),
    );
    let mut holder = Holder(
        Command::new("unshare")
            .args(["-m", "sh", "-ec", &hold])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("unshare"),
    );
    let mut ready = String::new();
    std::io::BufReader::new(holder.0.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready");
    assert_eq!(ready, "ready\n");
    let pid = holder.0.id();
    let seen = PathBuf::from(format!("/proc/{pid}/root")).join(s.mount.strip_prefix("/").unwrap());
    let shell = i32::try_from(pid).expect("a pid");
    let mut session = SessionView::new(view, "t", shell, vec![s.mount.clone()]);
    let run = |script: &str| {
        let script = format!("cd {} && {script}", s.mount.display());
        let out = Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-m", "sh", "-ec", &script])
            .output()
            .expect("nsenter");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let script = "chmod 600 b && rm -r d && echo now-a-file > d && rm a && mkdir a && \
                  echo in > a/x && echo new > n";
    let before = s.tree();

    session.begin().expect("begin");
    run(script);
    let ended = Err(warden_core::ToolError::new(
        warden_core::ErrorKind::Timeout,
        "stopped",
    ));
    let (answered, kept) =
        warden_tx::settle::settle_command(&mut session, true, "s-1", LIMIT, ended);
    assert!(kept && answered.is_err());
    assert_eq!(s.tree(), before, "the root saw the discarded command");
    assert_eq!(
        tree_of(&seen),
        before,
        "the session still sees the discarded command"
    );

    session.begin().expect("begin");
    run(script);
    let ended = Ok(warden_core::Output::default());
    let (answered, kept) =
        warden_tx::settle::settle_command(&mut session, true, "s-2", LIMIT, ended);
    assert!(kept, "{answered:?}");
    let changes = answered.expect("committed").details["changes"].clone();
    assert_eq!(changes["count"], 10, "{changes}");
    let after = s.tree();
    assert_eq!(after[Path::new("b")], ("bravo\n".into(), 0o600));
    assert_eq!(after[Path::new("d")].0, "now-a-file\n");
    assert_eq!(after[Path::new("a/x")].0, "in\n");
    assert_eq!(tree_of(&seen), after, "the session sees what was committed");
    // Nothing changed since: the next command that changes nothing commits nothing.
    session.begin().expect("begin");
    let (answered, _) =
        warden_tx::settle::settle_command(&mut session, true, "s-3", LIMIT, Ok(Default::default()));
    assert_eq!(answered.expect("nothing").details["changes"]["count"], 0);
}

/// A process holding a mount, killed when dropped (a failed assertion included).
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A copy's changes (a container on an engine elsewhere hands back what its copy holds):
/// staged, committed byte-exact with their pre-images, undone; a path the root changed
/// since the view began is a conflict, nothing of the copy applied.
#[test]
fn a_copys_changes_are_staged_committed_and_undone_byte_exact() {
    let Some(s) = setup() else { return };
    let before = s.tree();
    let mut view = s.view();
    view.begin();
    let stage = |view: &mut View, path: &str, now: Option<Copied<'_>>| {
        view.stage(0, Path::new(path), now).expect("staged");
    };
    stage(
        &mut view,
        "a",
        Some(Copied::File {
            bytes: b"ALPHA\n",
            mode: 0o755,
        }),
    );
    stage(&mut view, "d/e/f", None);
    stage(&mut view, "d/e", None);
    stage(&mut view, "new", Some(Copied::Dir { mode: 0o750 }));
    stage(
        &mut view,
        "new/file",
        Some(Copied::File {
            bytes: b"made\n",
            mode: 0o600,
        }),
    );
    stage(&mut view, "link", Some(Copied::Link(Path::new("new/file"))));
    // What the copy removed and the root never had is no change.
    stage(&mut view, "never", None);
    let changes = view.changes().expect("changes");
    let listed: Vec<(String, ChangeKind)> = changes
        .changes
        .iter()
        .map(|c| (c.path.display().to_string(), c.kind()))
        .collect();
    assert_eq!(
        listed,
        [
            ("d/e/f".to_owned(), ChangeKind::Removed),
            ("d/e".to_owned(), ChangeKind::Removed),
            ("a".to_owned(), ChangeKind::Modified),
            ("link".to_owned(), ChangeKind::Modified),
            ("new".to_owned(), ChangeKind::Added),
            ("new/file".to_owned(), ChangeKind::Added),
        ]
    );
    view.commit("dddd-1", "t", &changes, LIMIT).expect("commit");
    let after = s.tree();
    assert_eq!(after[Path::new("a")], ("ALPHA\n".into(), 0o755));
    assert_eq!(after[Path::new("new")], ("dir".into(), 0o750));
    assert_eq!(after[Path::new("new/file")], ("made\n".into(), 0o600));
    assert_eq!(after[Path::new("link")].0, "-> new/file");
    assert!(!after.contains_key(Path::new("d/e")));
    s.store.undo("dddd-1").expect("undo");
    assert_eq!(s.tree(), before);

    let mut view = s.view();
    view.begin();
    past_a_tick();
    fs::write(s.root.join("b"), "the host's\n").expect("b");
    stage(
        &mut view,
        "b",
        Some(Copied::File {
            bytes: b"the copy's\n",
            mode: 0o644,
        }),
    );
    stage(
        &mut view,
        "other",
        Some(Copied::File {
            bytes: b"x",
            mode: 0o644,
        }),
    );
    let changes = view.changes().expect("changes");
    match view.commit("dddd-2", "t", &changes, LIMIT) {
        Err(TxError::Conflict { paths, .. }) => assert_eq!(paths, vec![s.root.join("b")]),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(!s.root.join("other").exists(), "nothing of it applied");
    assert_eq!(
        fs::read_to_string(s.root.join("b")).expect("b"),
        "the host's\n"
    );
}
