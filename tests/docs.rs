//! The documentation's samples, run so that they cannot drift from the program: every fenced
//! block of README.md and docs/*.md is read, and
//!
//! - a ```toml block with an `[executor]` table is a policy. It is written into a scratch
//!   toolbox in the repository's root, beside `policies/`, so that its relative paths mean what
//!   they mean there, and loaded by `warden --strict tools` (one toolbox per sample: two may
//!   name one tool). Each loads as written: a placeholder such as a pin of `"…"` is refused
//!   as the reader's copy would be. The info string ```toml fragment marks a piece of a policy
//!   that has an `[executor]` table but is no whole policy: it is only parsed as TOML, as is
//!   every ```toml block without an `[executor]` table.
//! - a ```sh, ```console or ```bash block is a list of command lines (a `$ ` prompt, comments,
//!   `&&` and `;` chains, `\` continuations and here-documents are understood):
//!   - `warden …` runs and must succeed: the `warden` the samples' PATH finds, which is empty
//!     until README.md's tour puts the build there (`export PATH="$PWD/target/debug:$PATH"`,
//!     `$PWD` being the repository's root, where its reader stands), so a page that forgot it
//!     fails. It runs with a scratch `WARDEN_HOME` shared by every block in reading order, in
//!     the page's current folder, and as its toolbox a copy of the project's own `policies/`
//!     (so `warden add` cannot write into the real one). A host tool's call answered
//!     `unavailable` (this machine cannot confine a host process) is counted as skipped, and
//!     fails the test under `CI=true`.
//!   - `cargo …` must name a cargo command (or alias) and, where it names them, a workspace
//!     package (`-p`) and a target of it (`--bin`, `--test`, `--bench`, `--example`); `cargo
//!     run -- SUBCOMMAND` must name a subcommand of `warden`. Nothing is built or run: these
//!     lines are the test suite itself.
//!   - `scripts/…` must name an executable file of the repository.
//!   - `export PATH=…` sets the samples' PATH; any other command (rustup, pip, npm, sudo, …)
//!     is not checked.
//! - a shell block whose info string says `run` (```sh run) is a walkthrough that builds what
//!   its `warden` lines use: it runs whole, in bash, every command of it, as its reader would
//!   run it (see `run_script`). It runs in the page's current folder, which starts as a scratch
//!   working folder beside a link `warden` to the repository (where a tool author's checkout
//!   is) and which its `cd` moves for the page's next blocks; with `root`, in the
//!   repository's root instead. With `polyglot`, it needs scripts/build-polyglot's Go, Python
//!   and JavaScript toolchains: without them (and not under CI) it is not run.
//! - a block whose info string says `file=NAME` (```json file=turn.json, ```rust
//!   file=src/lib.rs) is written as NAME into the page's current folder, for the blocks after it.
//!
//! The one marker: an HTML comment `<!-- not run: REASON -->` on the line above a block's
//! opening fence. Its `warden` lines are not run (they need what CI cannot have: Docker, a
//! model, a registry on the internet, a server left running, a toolchain CI does not install);
//! its `cargo` and `scripts/` lines are still checked. The test prints how many lines it did
//! not run, and why. At most [`MAX_NOT_RUN`] blocks carry it, and only blocks with `warden`
//! lines.
//!
//! A broken sample fails the test, naming its file and line.
//!
//! Beside the samples: the relative links resolve, and docs/operating.md's Layout lists every
//! crate and Python package by the description its manifest gives.

use crate::common::{polyglot, root, wasm};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_warden");
/// Why a sample needing scripts/build-polyglot's toolchains did not run (under CI it fails).
const NO_POLYGLOT: &str = "the Go, Python and JavaScript toolchains are not installed";
/// The marker on the line above a block whose `warden` lines are not run.
const NOT_RUN: &str = "<!-- not run:";
/// How many blocks may carry the marker: each is a sample nothing checks still works.
const MAX_NOT_RUN: usize = 5;
/// How long one `warden` command line may take (the first compiles the example components).
const LINE_DEADLINE: Duration = Duration::from_secs(300);
/// cargo's own commands the docs may name (besides aliases, of which the project has none).
const CARGO_COMMANDS: &[&str] = &[
    "add", "bench", "build", "check", "clippy", "doc", "fmt", "install", "metadata", "new",
    "nextest", "run", "rustc", "test",
];

/// One fenced block of a page.
struct Block {
    file: String,
    /// The line of the opening fence, 1-based.
    line: usize,
    /// The info string: `toml`, `sh no-run`, `json file=turn.json`, …
    info: String,
    /// The reason of a `<!-- not run: … -->` marker above the block.
    not_run: Option<String>,
    /// The block's lines, each with its own line number.
    lines: Vec<(usize, String)>,
}

impl Block {
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    fn has_word(&self, word: &str) -> bool {
        self.info.split_whitespace().skip(1).any(|w| w == word)
    }

    fn option(&self, key: &str) -> Option<&str> {
        self.info
            .split_whitespace()
            .skip(1)
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    }

    fn text(&self) -> String {
        let mut text = String::new();
        for (_, line) in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    fn at(&self, line: usize) -> String {
        format!("{}:{line}", self.file)
    }
}

/// The fenced blocks of one page, in order. A fence may be indented (inside a list item);
/// the block's lines lose that indentation.
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(Block, usize, String)> = None;
    let mut previous = "";
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let fence = "```".to_string();
                    let not_run = previous
                        .trim()
                        .strip_prefix(NOT_RUN)
                        .and_then(|r| r.strip_suffix("-->"))
                        .map(|r| r.trim().to_string());
                    let block = Block {
                        file: file.to_string(),
                        line: n,
                        info: info.trim().to_string(),
                        not_run,
                        lines: Vec::new(),
                    };
                    open = Some((block, indent, fence));
                }
            }
            Some((mut block, indent_of, fence)) => {
                if trimmed.starts_with(&fence) && trimmed.trim() == fence {
                    out.push(block);
                } else {
                    let line = match (raw.get(..indent_of), raw.get(indent_of..)) {
                        (Some(prefix), Some(rest)) if prefix.trim().is_empty() => rest,
                        _ => trimmed,
                    };
                    block.lines.push((n, line.to_string()));
                    open = Some((block, indent_of, fence));
                }
            }
        }
        previous = raw;
    }
    assert!(open.is_none(), "{file}: a fenced block is never closed");
    out
}

/// A shell word or an operator between commands.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    /// `&&`, `||`, `;`, `&`, `|`, or a redirection.
    Op(String),
}

/// Splits a command line into words and operators the way a POSIX shell would for the
/// samples' needs: quotes, backslashes, comments. `$…` is kept as it is written.
fn tokens(line: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("an unclosed ' quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("an unclosed \" quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("an unclosed \" quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    out.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
            }
            '&' | '|' | ';' | '>' | '<' => {
                if in_word {
                    out.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
                let mut op = c.to_string();
                if let Some(&next) = chars.peek()
                    && (next == c || (c == '>' && next == '&'))
                {
                    op.push(next);
                    chars.next();
                }
                out.push(Token::Op(op));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(Token::Word(word));
    }
    Ok(out)
}

/// One simple command of a line: its words, and whether it is piped or redirected.
struct Simple {
    words: Vec<String>,
    plumbed: bool,
}

/// The simple commands of a line, split at `&&`, `||`, `;` and `&`.
fn commands(tokens: Vec<Token>) -> Vec<Simple> {
    let mut out = Vec::new();
    let mut current = Simple {
        words: Vec::new(),
        plumbed: false,
    };
    let mut redirect_next = false;
    for token in tokens {
        match token {
            Token::Op(op) if matches!(op.as_str(), "&&" | "||" | ";" | "&") => {
                if !current.words.is_empty() {
                    out.push(current);
                }
                current = Simple {
                    words: Vec::new(),
                    plumbed: false,
                };
            }
            Token::Op(_) => {
                current.plumbed = true;
                redirect_next = true;
            }
            Token::Word(w) => {
                if redirect_next {
                    redirect_next = false;
                } else {
                    current.words.push(w);
                }
            }
        }
    }
    if !current.words.is_empty() {
        out.push(current);
    }
    out
}

/// The command lines of a shell block, with the line each starts on: prompts dropped,
/// continuations joined, here-documents' bodies left out.
fn command_lines(block: &Block) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut heredoc: Option<String> = None;
    let mut continued = false;
    for (n, raw) in &block.lines {
        if let Some(end) = &heredoc {
            if raw.trim() == end {
                heredoc = None;
            }
            continue;
        }
        let line = raw.strip_prefix("$ ").unwrap_or(raw);
        if continued && let Some((_, last)) = out.last_mut() {
            last.push(' ');
            last.push_str(line.trim_end_matches('\\'));
        } else if !line.trim().is_empty() {
            out.push((*n, line.trim_end_matches('\\').to_string()));
        }
        continued = line.ends_with('\\');
        if let Some(at) = line.find("<<") {
            let end = line[at + 2..]
                .trim_start_matches('-')
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches(|c| c == '\'' || c == '"');
            heredoc = Some(end.to_string());
        }
    }
    out
}

/// What `cargo metadata` says of the workspace: packages and their targets by kind.
struct Workspace {
    /// package → (kind, target name)
    targets: BTreeMap<String, BTreeSet<(String, String)>>,
    root_package: String,
    /// Each package's folder, relative to the root ("" for the root package) → its description.
    descriptions: BTreeMap<String, String>,
}

impl Workspace {
    fn read(root: &Path) -> Self {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "metadata",
                "--no-deps",
                "--format-version",
                "1",
                "--offline",
            ])
            .current_dir(root)
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut targets = BTreeMap::new();
        let mut descriptions = BTreeMap::new();
        for package in meta["packages"].as_array().unwrap() {
            let manifest = Path::new(package["manifest_path"].as_str().unwrap());
            let folder = manifest.parent().unwrap().strip_prefix(root).unwrap();
            descriptions.insert(
                folder.display().to_string(),
                package["description"].as_str().unwrap_or("").to_string(),
            );
            let mut set = BTreeSet::new();
            for target in package["targets"].as_array().unwrap() {
                for kind in target["kind"].as_array().unwrap() {
                    set.insert((
                        kind.as_str().unwrap().to_string(),
                        target["name"].as_str().unwrap().to_string(),
                    ));
                }
            }
            targets.insert(package["name"].as_str().unwrap().to_string(), set);
        }
        Self {
            targets,
            root_package: "warden".into(),
            descriptions,
        }
    }

    /// Checks `cargo ARGS`: the command, the package and the targets it names.
    fn check(&self, args: &[String], warden: &Scratch) -> Result<(), String> {
        let Some(command) = args.first() else {
            return Err("`cargo` alone".into());
        };
        if !CARGO_COMMANDS.contains(&command.as_str()) {
            return Err(format!("`cargo {command}` is no cargo command or alias"));
        }
        let (own, passed) = match args.iter().position(|a| a == "--") {
            Some(at) => (&args[1..at], &args[at + 1..]),
            None => (&args[1..], &args[..0]),
        };
        if matches!(command.as_str(), "new" | "add") {
            return Ok(()); // a tool author's own crate, not this workspace
        }
        let mut package = None;
        let mut wanted = Vec::new();
        let mut i = 0;
        while i < own.len() {
            let flag = own[i].as_str();
            let value = own.get(i + 1).cloned();
            let kind = match flag {
                "-p" | "--package" => {
                    package = value;
                    i += 2;
                    continue;
                }
                "--bin" => "bin",
                "--test" => "test",
                "--bench" => "bench",
                "--example" => "example",
                _ => {
                    i += 1;
                    continue;
                }
            };
            let name = value.ok_or_else(|| format!("`{flag}` without a name"))?;
            wanted.push((kind.to_string(), name));
            i += 2;
        }
        let package = package.unwrap_or_else(|| self.root_package.clone());
        let Some(targets) = self.targets.get(&package) else {
            return Err(format!("no workspace package `{package}`"));
        };
        for (kind, name) in wanted {
            if !targets.contains(&(kind.clone(), name.clone())) {
                return Err(format!("package `{package}` has no {kind} target `{name}`"));
            }
        }
        if command == "run"
            && package == self.root_package
            && let Some(sub) = passed.first()
        {
            let out = warden.run(&[sub.clone(), "--help".into()])?;
            if !out.status.success() {
                return Err(format!("`warden {sub}` is no subcommand of warden"));
            }
        }
        Ok(())
    }
}

/// The scratch places `warden` runs in: its home, its working folder, its toolbox, and the
/// shell state the samples carry from block to block.
struct Scratch {
    dir: tempfile::TempDir,
    /// A copy of the project's policies/, in the repository's root (their relative paths hold).
    toolbox: tempfile::TempDir,
    /// The working folder each page's samples start in.
    work: PathBuf,
    /// The samples' current folder: the working folder until a `run` block's `cd` moves it.
    cwd: PathBuf,
    /// The samples' PATH, as their `export PATH=…` lines leave it: empty until README.md's tour
    /// puts the built `warden` on it, so a `warden` line before that fails.
    path: Vec<PathBuf>,
    /// Whether the Go, Python and JavaScript toolchains are installed (always under CI).
    polyglot: bool,
}

impl Scratch {
    fn new(root: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        // The tool author's tutorial starts beside the clone of warden (`../warden/…`).
        std::os::unix::fs::symlink(root, work.join("warden")).unwrap();
        let toolbox = tempfile::Builder::new()
            .prefix(".docs-toolbox-")
            .tempdir_in(root)
            .unwrap();
        copy_tree(&root.join("policies"), toolbox.path());
        Self {
            dir,
            toolbox,
            cwd: work.clone(),
            work,
            path: Vec::new(),
            polyglot: false,
        }
    }

    /// `PROGRAM ARGS` as a sample runs it: in the samples' current folder, with the scratch
    /// home and `toolbox`, and none of the variables that would point warden elsewhere.
    fn command(&self, program: &Path, args: &[String], toolbox: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.cwd)
            .env("WARDEN_TOOLBOX", toolbox)
            .env("WARDEN_HOME", self.dir.path().join("home"))
            .env_remove("WARDEN_CACHE")
            .env_remove("WARDEN_CALL_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs the binary under test, `warden ARGS`, against the copy of policies/.
    fn run(&self, args: &[String]) -> Result<Output, String> {
        finish(self.command(Path::new(BIN), args, self.toolbox.path()))
    }

    /// The `warden` the samples' PATH finds.
    fn warden(&self) -> Result<PathBuf, String> {
        self.path
            .iter()
            .map(|dir| dir.join("warden"))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                "`warden` is not on the samples' PATH (README.md's tour puts it there)".into()
            })
    }

    /// Runs `warden ARGS` as a sample's line does: the `warden` its PATH finds.
    fn run_sample(&self, args: &[String]) -> Result<Output, String> {
        finish(self.command(&self.warden()?, args, self.toolbox.path()))
    }

    /// `export PATH=VALUE`: `$PATH` is the samples' PATH so far and `$PWD` the repository's
    /// root, where README.md's reader stands. Its `target/debug` is where `cargo build` put the
    /// binary under test, unless CARGO_TARGET_DIR moved it.
    fn export_path(&mut self, value: &str, root: &Path) -> Result<(), String> {
        let built = Path::new(BIN).parent().unwrap();
        let mut path = Vec::new();
        for part in value.split(':') {
            if part == "$PATH" || part == "${PATH}" {
                path.extend(self.path.iter().cloned());
                continue;
            }
            let dir = match part.strip_prefix("$PWD") {
                Some(rest) => root.join(rest.trim_start_matches('/')),
                None if part.contains('$') => {
                    return Err(format!("cannot expand `{part}` in PATH"));
                }
                None => PathBuf::from(part),
            };
            if dir == root.join("target/debug") {
                path.push(built.to_path_buf());
            } else {
                path.push(dir);
            }
        }
        self.path = path;
        Ok(())
    }
}

/// Runs a command to its end, or kills it at [`LINE_DEADLINE`]. Its output is read as it
/// comes, so a long one cannot fill the pipe and stall it.
fn finish(command: Command) -> Result<Output, String> {
    finish_as(command, false)
}

/// [`finish`], with the command in a process group of its own when `group`: a script's
/// background jobs (a receiver it failed to stop) are killed with it, so that they neither
/// outlive the test nor hold its output pipes open.
fn finish_as(mut command: Command, group: bool) -> Result<Output, String> {
    if group {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let kill_group = |pid: u32| {
        if group && let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) on the process group this function made; it touches no memory.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    };
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).ok();
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            kill_group(child.id());
            return Ok(Output {
                status,
                stdout: stdout.join().unwrap(),
                stderr: stderr.join().unwrap(),
            });
        }
        if started.elapsed() > LINE_DEADLINE {
            kill_group(child.id());
            child.kill().ok();
            child.wait().ok();
            return Err(format!("still running after {LINE_DEADLINE:?}: killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn shown(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What the test did, for its summary.
#[derive(Default)]
struct Tally {
    policies: usize,
    fragments: usize,
    warden_run: usize,
    static_checked: usize,
    files: usize,
    /// reason → lines not run
    not_run: BTreeMap<String, usize>,
    failures: Vec<String>,
}

/// Loads a policy sample with `warden tools`, in a toolbox of its own beside policies/.
fn check_policy(block: &Block, root: &Path, scratch: &Scratch, tally: &mut Tally) {
    let text = block.text();
    let toolbox = tempfile::Builder::new()
        .prefix(".docs-policy-")
        .tempdir_in(root)
        .unwrap();
    std::fs::write(toolbox.path().join("sample.toml"), &text).unwrap();
    tally.policies += 1;
    // Strict: a toolbox serves the policies that load and only names the others, with
    // success; a sample that does not load must fail here.
    let args = ["--strict".to_string(), "tools".to_string()];
    match finish(scratch.command(Path::new(BIN), &args, toolbox.path())) {
        Ok(out) if out.status.success() => {}
        Ok(out) => tally.failures.push(format!(
            "{}: the policy does not load (warden tools): {}",
            block.at(block.line),
            located(&shown(&out), toolbox.path(), block)
        )),
        Err(e) => tally
            .failures
            .push(format!("{}: warden tools: {e}", block.at(block.line))),
    }
}

/// warden's message about the scratch copy of a sample, with its places put back: the file's
/// `sample.toml:N` becomes the page's line, the scratch folder a name.
fn located(message: &str, toolbox: &Path, block: &Block) -> String {
    let file = format!("{}/sample.toml:", toolbox.display());
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find(&file) {
        out.push_str(&rest[..at]);
        rest = &rest[at + file.len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            // The block's first line is the one after its fence.
            Ok(n) => out.push_str(&block.at(block.line + n)),
            Err(_) => out.push_str(&block.at(block.line)),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out.replace(
        &toolbox.display().to_string(),
        "the sample's scratch toolbox",
    )
}

/// Whether a `warden call` was refused because this machine cannot confine a host process:
/// `unavailable`, saying what was (not) in force.
fn host_unavailable(args: &[String], out: &Output) -> bool {
    if args.first().map(String::as_str) != Some("call") {
        return false;
    }
    let Ok(message) = serde_json::from_slice::<Value>(&out.stdout) else {
        return false;
    };
    let error = &message["error"];
    error["kind"] == "unavailable"
        && (error["details"].get("isolation").is_some()
            || error["message"]
                .as_str()
                .is_some_and(|m| m.contains("Landlock") || m.contains("namespace")))
}

fn check_shell(
    block: &Block,
    root: &Path,
    ws: &Workspace,
    scratch: &mut Scratch,
    tally: &mut Tally,
) {
    if block.not_run.is_some() && warden_lines(block) == 0 {
        tally.failures.push(format!(
            "{}: a not-run marker on a block without warden lines",
            block.at(block.line)
        ));
    }
    if block.has_word("run") {
        return run_script(block, root, scratch, tally);
    }
    for (n, line) in command_lines(block) {
        let at = block.at(n);
        let tokens = match tokens(&line) {
            Ok(tokens) => tokens,
            Err(e) => {
                tally.failures.push(format!("{at}: {e}: {line}"));
                continue;
            }
        };
        for simple in commands(tokens) {
            let mut words = simple.words.as_slice();
            // Leading assignments (`A=b cmd`) and `sudo` do not change what runs.
            while let Some(first) = words.first() {
                let assignment = first
                    .split_once('=')
                    .is_some_and(|(name, _)| !name.is_empty() && !name.contains('/'));
                if assignment || first == "sudo" {
                    words = &words[1..];
                } else {
                    break;
                }
            }
            let Some(program) = words.first() else {
                continue;
            };
            let args = &words[1..];
            match program.as_str() {
                "warden" => {
                    if let Some(reason) = &block.not_run {
                        *tally.not_run.entry(reason.clone()).or_default() += 1;
                        continue;
                    }
                    if simple.plumbed {
                        tally.failures.push(format!(
                            "{at}: a warden line that pipes or redirects cannot be run: {line}"
                        ));
                        continue;
                    }
                    tally.warden_run += 1;
                    match scratch.run_sample(args) {
                        Ok(out) if out.status.success() => {}
                        Ok(out) if host_unavailable(args, &out) => {
                            let reason = "this machine cannot confine a host process".to_string();
                            if std::env::var("CI").as_deref() == Ok("true") {
                                tally.failures.push(format!(
                                    "{at}: under CI=true: {reason}: {}",
                                    shown(&out)
                                ));
                            }
                            tally.warden_run -= 1;
                            *tally.not_run.entry(reason).or_default() += 1;
                        }
                        Ok(out) => tally.failures.push(format!(
                            "{at}: `{line}` exited with {}: {}",
                            out.status,
                            shown(&out)
                        )),
                        Err(e) => tally.failures.push(format!("{at}: `{line}`: {e}")),
                    }
                }
                "export" => {
                    for value in args.iter().filter_map(|a| a.strip_prefix("PATH=")) {
                        if let Err(e) = scratch.export_path(value, root) {
                            tally.failures.push(format!("{at}: {e}"));
                        }
                    }
                }
                "cargo" => {
                    tally.static_checked += 1;
                    if let Err(e) = ws.check(args, scratch) {
                        tally.failures.push(format!("{at}: `{line}`: {e}"));
                    }
                }
                p if p.starts_with("scripts/") => {
                    tally.static_checked += 1;
                    let path = root.join(p);
                    let executable = std::fs::metadata(&path).is_ok_and(|m| {
                        use std::os::unix::fs::PermissionsExt as _;
                        m.is_file() && m.permissions().mode() & 0o111 != 0
                    });
                    if !executable {
                        tally.failures.push(format!(
                            "{at}: `{p}` is no executable script of the repository"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
}

/// How many `warden` lines a shell block has.
fn warden_lines(block: &Block) -> usize {
    command_lines(block)
        .iter()
        .filter_map(|(_, line)| tokens(line).ok())
        .flat_map(commands)
        .filter(|c| c.words.first().is_some_and(|w| w == "warden"))
        .count()
}

/// Runs a ```sh run block whole, in bash, the way its reader would: in the samples' current
/// folder (where its `cd` leaves it is the next blocks' current folder), `warden` from the
/// samples' PATH, and the venv's Python and Go and guest-sdk/js's componentize-js on PATH
/// after it (where `pip install` finds them installed). cargo works offline (the guest
/// components' build fetched every crate a walkthrough's tool needs) and npm from its cache
/// where it can; `rustup target add` downloads a target the machine lacks, once.
fn run_script(block: &Block, root: &Path, scratch: &mut Scratch, tally: &mut Tally) {
    let lines = warden_lines(block);
    if let Some(reason) = &block.not_run {
        *tally.not_run.entry(reason.clone()).or_default() += lines;
        return;
    }
    if block.has_word("polyglot") && !scratch.polyglot {
        *tally.not_run.entry(NO_POLYGLOT.into()).or_default() += lines;
        return;
    }
    // bash would find another warden on the machine's PATH: the samples' must have it.
    if lines > 0
        && let Err(e) = scratch.warden()
    {
        tally
            .failures
            .push(format!("{}: {e}", block.at(block.line)));
        return;
    }
    // A `root` block runs where its page's reader stands, in the repository's root, and leaves
    // the samples' current folder as it was.
    let in_root = block.has_word("root");
    let state = scratch.dir.path().join("cwd");
    let script = format!("set -e\n{}\npwd > '{}'\n", block.text(), state.display());
    let mut path = scratch.path.clone();
    path.push(root.join("target/py-venv/bin"));
    path.push(root.join("guest-sdk/js/node_modules/.bin"));
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut command = scratch.command(
        Path::new("bash"),
        &["-c".to_string(), script],
        scratch.toolbox.path(),
    );
    if in_root {
        command.current_dir(root);
    }
    command
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("npm_config_prefer_offline", "true");
    // The reader's own crate builds into its own target/: not where this test's cargo says.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CARGO_") && name != "CARGO_HOME" {
            command.env_remove(&name);
        }
    }
    command.env("CARGO_NET_OFFLINE", "true");
    tally.warden_run += lines;
    match finish_as(command, true) {
        Ok(out) if out.status.success() => {
            if !in_root {
                let cwd = std::fs::read_to_string(&state).unwrap();
                scratch.cwd = PathBuf::from(cwd.trim_end());
            }
        }
        Ok(out) => tally.failures.push(format!(
            "{}: the block exited with {}: {}",
            block.at(block.line),
            out.status,
            shown(&out)
        )),
        Err(e) => tally
            .failures
            .push(format!("{}: {e}", block.at(block.line))),
    }
}

/// The pages whose samples are checked, README.md first.
fn pages(root: &Path) -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    names.sort();
    names.insert(0, "README.md".into());
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(root.join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

#[test]
fn the_docs_samples_run() {
    let root = root();
    // The example policies name the guest components: build them first. The Go example's
    // needs Go: without it (and not under CI) its policy samples are not run.
    wasm("files");
    let polyglot = polyglot("gowordcount").is_some();
    let ws = Workspace::read(&root);
    let mut scratch = Scratch::new(&root);
    scratch.polyglot = polyglot;
    let mut tally = Tally::default();
    let mut marked = Vec::new();
    for (file, text) in pages(&root) {
        // Each page's reader starts afresh, in the working folder.
        scratch.cwd = scratch.work.clone();
        for block in blocks(&file, &text) {
            if block.not_run.is_some() {
                marked.push(block.at(block.line));
            }
            match block.lang() {
                "toml" => {
                    let is_policy = block.lines.iter().any(|(_, l)| l.trim() == "[executor]");
                    if is_policy && !polyglot && block.text().contains("target/polyglot/") {
                        *tally.not_run.entry(NO_POLYGLOT.into()).or_default() += 1;
                    } else if is_policy && !block.has_word("fragment") {
                        check_policy(&block, &root, &scratch, &mut tally);
                    } else {
                        // A fragment, or a piece of a policy without its executor: TOML at least.
                        match block.text().parse::<toml_edit::DocumentMut>() {
                            Ok(_) => tally.fragments += 1,
                            Err(e) => tally
                                .failures
                                .push(format!("{}: not TOML: {e}", block.at(block.line))),
                        }
                    }
                }
                "sh" | "console" | "bash" => {
                    check_shell(&block, &root, &ws, &mut scratch, &mut tally);
                }
                _ => {}
            }
            if let Some(name) = block.option("file") {
                let file = scratch.cwd.join(name);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(file, block.text()).unwrap();
                tally.files += 1;
            }
        }
    }
    println!(
        "docs samples: {} policies loaded, {} TOML fragments parsed, {} warden lines run, \
         {} cargo and scripts lines checked, {} files written",
        tally.policies, tally.fragments, tally.warden_run, tally.static_checked, tally.files
    );
    if marked.len() > MAX_NOT_RUN {
        tally.failures.push(format!(
            "{} blocks are marked not run, more than {MAX_NOT_RUN}: {}",
            marked.len(),
            marked.join(", ")
        ));
    }
    let skipped: usize = tally.not_run.values().sum();
    println!(
        "docs samples: {skipped} warden lines not run ({} blocks marked)",
        marked.len()
    );
    for (reason, count) in &tally.not_run {
        println!("  {count}: {reason}");
    }
    assert!(
        tally.policies > 0 && tally.warden_run > 0,
        "no sample was found"
    );
    assert!(
        tally.failures.is_empty(),
        "{} broken samples:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
}

/// The entries of docs/operating.md's Layout: a path (`crates/warden-core/`) → its text, the
/// wrapped lines joined. An entry starts at the margin or two spaces in (a member of the folder
/// above it); a line further in goes on with the entry before it.
fn layout(text: &str) -> Vec<(String, String)> {
    let section = &text[text
        .find("\n## Layout\n")
        .expect("operating.md has a Layout section")..];
    let body = section
        .split("```")
        .nth(1)
        .expect("the Layout is a fenced block");
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut folder = String::new();
    for line in body.lines().skip(1) {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            continue;
        }
        if indent > 2 {
            if let Some((_, text)) = entries.last_mut() {
                text.push(' ');
                text.push_str(trimmed);
            }
            continue;
        }
        let (name, rest) = trimmed.split_once(' ').unwrap_or((trimmed, ""));
        let path = if indent == 0 {
            folder = name.to_string();
            name.to_string()
        } else {
            format!("{folder}{name}")
        };
        entries.push((path, rest.trim().to_string()));
    }
    entries
}

/// docs/operating.md's Layout lists every crate of the workspace and every Python package of
/// python/, each entry beginning with the description its Cargo.toml or pyproject.toml gives,
/// and names nothing that is not there: the descriptions are what crates.io and PyPI show, so
/// the one place that lists them all must say the same.
#[test]
fn the_layout_lists_every_package_as_it_describes_itself() {
    let root = root();
    let ws = Workspace::read(&root);
    // The layout's path for a package: the root package is its Cargo.toml.
    let mut packages: BTreeMap<String, String> = ws
        .descriptions
        .iter()
        .map(|(folder, description)| {
            let path = if folder.is_empty() {
                "Cargo.toml".to_string()
            } else {
                format!("{folder}/")
            };
            (path, description.clone())
        })
        .collect();
    for entry in std::fs::read_dir(root.join("python")).unwrap() {
        let folder = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(folder.join("pyproject.toml")) else {
            continue;
        };
        let project: toml_edit::DocumentMut = text.parse().unwrap();
        let description = project["project"]["description"].as_str().unwrap_or("");
        let name = folder.file_name().unwrap().to_string_lossy();
        packages.insert(format!("python/{name}/"), description.to_string());
    }
    let text = std::fs::read_to_string(root.join("docs/operating.md")).unwrap();
    let entries = layout(&text);
    let mut failures = Vec::new();
    for (path, description) in &packages {
        if description.is_empty() {
            failures.push(format!("{path} has no description"));
            continue;
        }
        match entries.iter().find(|(p, _)| p == path) {
            None => failures.push(format!("the Layout does not list {path}")),
            Some((_, text)) => {
                let agrees = text.strip_prefix(description.as_str()).is_some_and(|rest| {
                    !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if !agrees {
                    failures.push(format!(
                        "the Layout's {path} does not begin with its description \
                         \"{description}\": \"{text}\""
                    ));
                }
            }
        }
    }
    for (path, _) in &entries {
        let package_folder = path.starts_with("crates/") || path.starts_with("python/");
        if package_folder && path.ends_with('/') && path.matches('/').count() == 2 {
            if !packages.contains_key(path) {
                failures.push(format!("the Layout lists {path}, which is no package"));
            }
        } else if !root.join(path).exists() {
            failures.push(format!("the Layout lists {path}, which does not exist"));
        }
    }
    println!(
        "layout: {} entries, {} packages checked",
        entries.len(),
        packages.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_command_line_splits_as_a_shell_would() {
    let words = |line: &str| -> Vec<Vec<String>> {
        commands(tokens(line).unwrap())
            .into_iter()
            .map(|s| s.words)
            .collect()
    };
    assert_eq!(
        words(r#"warden call greet '{"name": "Ada"}'   # prints it"#),
        [vec!["warden", "call", "greet", r#"{"name": "Ada"}"#]]
    );
    assert_eq!(
        words("warden add greet.wasm --wit wit && warden call greet"),
        [
            vec!["warden", "add", "greet.wasm", "--wit", "wit"],
            vec!["warden", "call", "greet"]
        ]
    );
    assert_eq!(
        words(r#"sudo dockerd &   # if none"#),
        [vec!["sudo", "dockerd"]]
    );
    assert_eq!(words(r#"echo "a \"b\"" > x"#), [vec!["echo", r#"a "b""#]]);
}

#[test]
fn a_block_knows_its_marker_and_its_lines() {
    let page = "text\n<!-- not run: needs Docker -->\n```sh\nwarden call shell \\\n  '{}'\ncat > a <<'EOF'\nwarden inside\nEOF\n```\n";
    let found = blocks("page.md", page);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].not_run.as_deref(), Some("needs Docker"));
    assert_eq!(found[0].line, 3);
    let lines = command_lines(&found[0]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0].0, 4);
    assert_eq!(tokens(&lines[0].1).unwrap().len(), 4);
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings, outside fenced blocks.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every relative link of README.md, docs/*.md and the crates' READMEs names a file that
/// exists and, for a page, a heading it has.
#[test]
fn the_docs_links_resolve() {
    let root = root();
    let mut files: Vec<String> = pages(&root).into_iter().map(|(n, _)| n).collect();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        if readme.is_file() {
            files.push(readme.strip_prefix(&root).unwrap().display().to_string());
        }
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let dir = root.join(file).parent().unwrap().to_path_buf();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = &rest[..end];
                rest = &rest[end..];
                if target.contains("://") {
                    continue;
                }
                checked += 1;
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let page = if path.is_empty() {
                    root.join(file)
                } else {
                    dir.join(path)
                };
                if !page.exists() {
                    failures.push(format!("{file}:{}: no such file: {target}", i + 1));
                    continue;
                }
                if !fragment.is_empty() {
                    let text = std::fs::read_to_string(&page).unwrap_or_default();
                    if !anchors(&text).contains(fragment) {
                        failures.push(format!(
                            "{file}:{}: no heading #{fragment} in {path}",
                            i + 1
                        ));
                    }
                }
            }
        }
    }
    println!("docs links: {checked} relative links checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
