//! `warden agent` end to end against a scripted OpenAI-compatible server: killed mid-batch and
//! resumed without running a finished call twice; provider errors and pauses at the CLI.

use crate::common::{root, wasm};

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use warden_test_support::scripted::{Scripted, answer, calls, error};

/// A toolbox (`trivial`, `hostile`) and a warden home in a temp dir.
struct Env {
    dir: tempfile::TempDir,
    base_url: String,
}

impl Env {
    fn new(server: &Scripted) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let toolbox = dir.path().join("policies");
        std::fs::create_dir(&toolbox).unwrap();
        for (name, rest) in [
            ("trivial", "[functions.add]\nreview = { required = true }"),
            ("hostile", "[limits]\ntimeout = \"120s\""),
        ] {
            let text = format!(
                "[executor]\nkind = \"wasm\"\ncomponent = {:?}\n{rest}\n",
                wasm(name).display().to_string()
            );
            std::fs::write(toolbox.join(format!("{name}.toml")), text).unwrap();
        }
        Self {
            dir,
            base_url: server.base_url(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_warden"));
        c.arg("agent")
            .args(args)
            .env("WARDEN_TOOLBOX", self.dir.path().join("policies"))
            .env("WARDEN_HOME", self.home())
            .env("WARDEN_CACHE", root().join("target/warden-test-cache"))
            .env("OPENAI_BASE_URL", &self.base_url)
            .env("OPENAI_API_KEY", "sk-cli-test")
            .env("WARDEN_MODEL", "scripted-model")
            .env_remove("WARDEN_CALL_LOG")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("warden runs")
    }

    /// How many times the call log holds `call_id`.
    fn logged(&self, call_id: &str) -> usize {
        lines(&self.home().join("calls.jsonl"))
            .iter()
            .filter(|v| v["event"] == "call" && v["tool_call_id"] == call_id)
            .count()
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Reads the child's JSON lines on a thread, so the test can wait for one with a deadline.
fn events(child: &mut Child) -> mpsc::Receiver<Value> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    rx
}

#[test]
fn a_killed_run_resumes_without_running_a_finished_call_twice() {
    let server = Scripted::start(vec![
        calls(&[("a1", "noop", "")]),
        calls(&[
            ("b1", "burn", r#"{"iterations": 1000}"#),
            ("b2", "sleep", r#"{"ms": 60000}"#),
        ]),
        answer("finished"),
    ]);
    let env = Env::new(&server);
    let mut child = env
        .command(&["--json", "do the thing"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = events(&mut child);
    let (mut run_id, mut b1_done, mut b2_running) = (String::new(), false, false);
    while !(b1_done && b2_running) {
        let e = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the run reaches its second batch");
        match e["type"].as_str() {
            Some("transcript") => run_id = e["run_id"].as_str().unwrap().to_owned(),
            Some("answered") if e["message"]["tool_call_id"] == "b1" => b1_done = true,
            Some("started") if e["call_id"] == "b2" => b2_running = true,
            Some("stop") => panic!("the run stopped early: {e}"),
            _ => {}
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(server.requests().len(), 2);

    let out = env.run(&["--resume", &run_id, "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "stop");
    assert_eq!(last["answer"], "finished");

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let third = &requests[2];
    assert_eq!(third.tool_messages().len(), 3, "{:#}", third.body);
    assert_eq!(third.answer("a1"), "ok");
    assert!(
        !third.answer("b1").contains("Error"),
        "{}",
        third.answer("b1")
    );
    let b2 = third.answer("b2");
    assert!(
        b2.contains("unavailable") && b2.contains("not run again"),
        "{b2}"
    );

    // The call log and the transcript agree: each finished call ran once, the killed one never
    // finished and was not started again.
    assert_eq!(env.logged("a1"), 1);
    assert_eq!(env.logged("b1"), 1);
    assert_eq!(env.logged("b2"), 0);
    let transcript = lines(&env.home().join(format!("runs/{run_id}.jsonl")));
    let started = |id: &str| {
        transcript
            .iter()
            .filter(|e| e["type"] == "started" && e["call_id"] == id)
            .count()
    };
    assert_eq!((started("a1"), started("b1"), started("b2")), (1, 1, 1));
    assert!(transcript.iter().any(|e| e["type"] == "resume"));
    let interrupted = transcript
        .iter()
        .find(|e| e["type"] == "answered" && e["message"]["tool_call_id"] == "b2")
        .unwrap();
    assert_eq!(
        interrupted["message"]["error"]["details"]["interrupted"],
        true
    );

    let again = env.run(&["--resume", &run_id]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("finished"));
}

#[test]
fn the_cli_pauses_for_review_and_states_provider_errors() {
    let server = Scripted::start(vec![
        calls(&[("r1", "add", r#"{"a": 2, "b": 2}"#)]),
        answer("four"),
        error(401, &[], "Incorrect API key provided", "invalid_api_key"),
    ]);
    let env = Env::new(&server);
    let decisions = env.dir.path().join("decisions.json");
    std::fs::write(&decisions, "{}").unwrap();
    let d = decisions.to_str().unwrap();
    let out = env.run(&["add two and two", "--decisions", d]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("awaits a decision"), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let run_id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("run "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();

    std::fs::write(&decisions, r#"{"r1": {"decision": "approve"}}"#).unwrap();
    let out = env.run(&["--resume", &run_id, "--decisions", d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "four");
    assert_eq!(server.requests()[1].answer("r1"), "4");

    let out = env.run(&["anything"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("Incorrect API key"),
        "{stderr}"
    );
    assert_eq!(
        server.requests()[2].authorization.as_deref(),
        Some("Bearer sk-cli-test")
    );
}
