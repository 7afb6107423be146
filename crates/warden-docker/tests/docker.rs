//! A container per call, attacked for real: network, env, user, capabilities, read-only
//! mounts and root, fork and memory bombs, endless commands, floods, a batch with a hang —
//! each in both of warden's images, the static busybox and the Debian one, and in the Debian
//! one under gVisor (`busybox::…`, `debian::…`, `gvisor::…`). Reaching a server, with and
//! without the network, is in `debian.rs`.

use crate::common::{
    HALF_A_SECOND_OF_CPU, Sandbox, call, cmd, holds_fifty_mb, kind, shell_policy, usage,
};
use serde_json::json;
use std::time::{Duration, Instant};
use warden_core::{Status, ToolCall};
use warden_test_support::assert_timed_out;

const SECRET: &str = "warden-marker-secret-7f3a";

/// Each check named runs once in each sandbox.
macro_rules! in_every_sandbox {
    ($($check:ident),* $(,)?) => {
        mod busybox {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check(super::Sandbox::Busybox).await;
                }
            )*
        }
        mod debian {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check(super::Sandbox::Debian).await;
                }
            )*
        }
        mod gvisor {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check(super::Sandbox::Gvisor).await;
                }
            )*
        }
    };
}

in_every_sandbox!(
    the_container_has_no_network_no_host_env_no_root_no_capabilities,
    read_only_mounts_and_the_root_filesystem_refuse_writes,
    a_fork_bomb_is_held_by_the_pids_limit,
    a_memory_bomb_is_killed,
    an_endless_command_times_out_and_the_model_can_only_lower_the_limit,
    output_is_capped_with_a_marker_and_exit_codes_are_reported,
    a_batch_of_ten_with_one_hanging_answers_all_ten,
    a_dropped_call_leaves_no_container,
    a_templated_tool_puts_arguments_in_argv_without_a_shell,
);

/// What the image's `/bin/sh` says when it cannot fork: busybox ash, or Debian's dash.
fn cannot_fork(output: &str) -> bool {
    output.contains("can't fork") || output.contains("Cannot fork")
}

async fn the_container_has_no_network_no_host_env_no_root_no_capabilities(sandbox: Sandbox) {
    // Once per process: `cargo test` runs the tests as threads of one process, where a
    // `set_var` races any other thread reading the environment.
    static MARKER: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, to a value that never changes, and no other test writes the environment.
    MARKER.call_once(|| unsafe { std::env::set_var("WARDEN_TEST_MARKER", SECRET) });
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("", "env = { GRANTED = \"yes\" }", ""));
    let m = call(
        &d,
        "sh",
        cmd("sed -n 's/^ *\\([^ :]*\\):.*/\\1/p' /proc/net/dev; id -u; \
             grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; env"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    let out = &m.content;
    let interfaces: Vec<&str> = out.lines().take_while(|l| *l != "65534").collect();
    assert_eq!(interfaces, ["lo"], "only loopback: {out}");
    assert!(out.contains("\n65534\n"), "runs as nobody: {out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    // gVisor's kernel does not show the flag (the engine sets it on the sandbox itself).
    assert!(
        out.contains("NoNewPrivs:\t1") || sandbox == Sandbox::Gvisor,
        "{out}"
    );
    assert!(out.contains("GRANTED=yes"), "{out}");
    assert!(!out.contains(SECRET), "warden's env leaked: {out}");
    assert!(!out.contains("WARDEN_TEST_MARKER"), "{out}");
    h.assert_clean().await;
}

async fn read_only_mounts_and_the_root_filesystem_refuse_writes(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let ro = h.folder("ro");
    let rw = h.folder("rw");
    std::fs::write(ro.join("keep.txt"), "original").unwrap();
    let grants = format!(
        "fs = [{{ host = \"{}\", guest = \"/ro\", access = \"read-only\" }},\n\
         {{ host = \"{}\", guest = \"/rw\", access = \"read-write\" }}]",
        ro.display(),
        rw.display()
    );
    let d = h.dispatcher("sh", &h.shell_policy("", &grants, ""));
    let m = call(
        &d,
        "sh",
        cmd("cat /ro/keep.txt; echo; \
             echo x > /ro/keep.txt || echo RO-REFUSED; \
             touch /ro/new || echo RO-NEW-REFUSED; \
             touch /etc/evil || echo ROOT-REFUSED; \
             touch /tmp/scratch && echo TMP-OK; \
             echo written > /rw/out.txt && echo RW-OK"),
    )
    .await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    for expected in [
        "original",
        "RO-REFUSED",
        "RO-NEW-REFUSED",
        "ROOT-REFUSED",
        "TMP-OK",
        "RW-OK",
    ] {
        assert!(m.content.contains(expected), "{expected}: {}", m.content);
    }
    assert!(m.content.contains("Read-only file system"), "{}", m.content);
    assert_eq!(
        std::fs::read_to_string(ro.join("keep.txt")).unwrap(),
        "original"
    );
    assert_eq!(
        std::fs::read_to_string(rw.join("out.txt")).unwrap(),
        "written\n"
    );
    assert!(!ro.join("new").exists());
    h.assert_clean().await;
}

#[tokio::test]
async fn a_read_write_root_nobody_may_write_is_refused_at_load() {
    let h = docker_or_skip!();
    let grants = "fs = [{ host = \"/usr\", guest = \"/usr-rw\", access = \"read-write\" }]";
    let e = h
        .toolbox("sh", &shell_policy("", grants, ""))
        .err()
        .expect("refused");
    assert!(e.contains("could not write it"), "{e}");
    assert!(e.contains("chown"), "{e}");
}

#[tokio::test]
async fn a_policy_that_hands_the_container_the_engine_is_refused_at_load() {
    use std::os::unix::fs::MetadataExt;
    let h = docker_or_skip!();
    let socket = std::path::Path::new("/var/run/docker.sock");
    let group = std::fs::metadata(socket).map(|m| m.gid()).ok();
    // `/run` read-only holds the engine's socket, which a container of its group could drive.
    let run = "fs = [{ host = \"/run\", guest = \"/host-run\", access = \"read-only\" }]";
    for user in [
        "65534:65534".to_owned(),
        format!("65534:{}", group.unwrap_or(0)),
    ] {
        let executor = format!("user = \"{user}\"");
        let e = h
            .toolbox("sh", &shell_policy(&executor, run, ""))
            .err()
            .expect("refused");
        assert!(
            e.contains("engine's socket") && e.contains("sh.toml:"),
            "{e}"
        );
    }
    // Any socket under a root, found at load.
    let dir = h.folder("sockets");
    std::fs::create_dir(dir.join("deep")).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(dir.join("deep/agent.sock")).unwrap();
    let grant = format!(
        "fs = [{{ host = \"{}\", guest = \"/w\", access = \"read-only\" }}]",
        dir.display()
    );
    let e = h
        .toolbox("sh", &shell_policy("", &grant, ""))
        .err()
        .expect("refused");
    assert!(e.contains("agent.sock"), "{e}");
    // Root's group, and the group of the engine's socket, without any root granted.
    let mut groups = vec![0];
    groups.extend(group.filter(|g| *g != 0));
    for gid in groups {
        let executor = format!("user = \"65534:{gid}\"");
        let e = h
            .toolbox("sh", &shell_policy(&executor, "", ""))
            .err()
            .expect("refused");
        assert!(e.contains(&format!("group {gid}")), "{e}");
    }
    // Nobody's group and a root without sockets load.
    let clean = h.folder("clean");
    let grant = format!(
        "fs = [{{ host = \"{}\", guest = \"/w\", access = \"read-only\" }}]",
        clean.display()
    );
    h.toolbox("sh", &shell_policy("user = \"65534:65534\"", &grant, ""))
        .expect("loads");
}

async fn a_fork_bomb_is_held_by_the_pids_limit(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("pids = 32", "", "timeout = \"20s\""));
    // Many more children than the limit, then a wait longer than the call's deadline: only
    // the limit can end this call before its deadline does.
    let m = call(
        &d,
        "sh",
        cmd("for i in $(seq 1 100); do sleep 30 & done; echo all-forked; wait"),
    )
    .await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    if sandbox == Sandbox::Gvisor {
        // gVisor's own kernel does not count processes: its forks succeed until the host's
        // pids run out under it, and then that kernel dies (Go's status 2), ending the sandbox
        // — sometimes after the shell has printed the line below.
        assert!(m.content.ends_with("[exit code 2]"), "{}", m.content);
    } else {
        // The shell cannot fork the rest, says so and gives up.
        assert!(cannot_fork(&m.content), "{}", m.content);
        assert!(!m.content.contains("all-forked"), "{}", m.content);
    }
    // The real thing, stopped by its deadline; the machine stays usable.
    let start = Instant::now();
    let m = call(
        &d,
        "sh",
        json!({"command": "b() { b | b & }; b; sleep 100", "timeout": 3}),
    )
    .await;
    // Held: it runs into its deadline, or the shell itself can no longer fork and gives up.
    match kind(&m) {
        "timeout" => {}
        "exit_status" => assert!(
            cannot_fork(&m.content) || sandbox == Sandbox::Gvisor,
            "{}",
            m.content
        ),
        other => panic!("{other}: {}", m.content),
    }
    assert!(start.elapsed() < Duration::from_secs(15));
    let m = call(&d, "sh", cmd("echo alive")).await;
    assert!(m.content.starts_with("alive"), "{}", m.content);
    h.assert_clean().await;
}

async fn a_memory_bomb_is_killed(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("", "", "memory = \"32MiB\""));
    let m = call(
        &d,
        "sh",
        cmd("x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived"),
    )
    .await;
    assert_eq!(kind(&m), "out_of_memory", "{}", m.content);
    assert!(!m.content.contains("survived"));
    h.assert_clean().await;
}

async fn an_endless_command_times_out_and_the_model_can_only_lower_the_limit(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("", "", "timeout = \"2s\""));
    let start = Instant::now();
    let m = call(
        &d,
        "sh",
        json!({"command": "echo started; sleep 1000", "timeout": 600}),
    )
    .await;
    let took = start.elapsed();
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    assert!(took < Duration::from_secs(10), "{took:?}");
    // The answer names the policy's limit, not the 600 s asked for.
    let e = m.error.as_ref().expect("an error");
    assert_timed_out(e, Duration::from_millis(2000));
    let start = Instant::now();
    let m = call(&d, "sh", json!({"command": "sleep 1000", "timeout": 0.5})).await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    let e = m.error.as_ref().expect("an error");
    assert!(e.message.contains("time limit of 500ms"), "{}", e.message);
    assert_eq!(e.details["timeout_ms"], 500);
    assert!(start.elapsed() < Duration::from_secs(2) + Duration::from_millis(1500));
    h.assert_clean().await;
}

async fn output_is_capped_with_a_marker_and_exit_codes_are_reported(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("", "", "output = \"64KiB\""));
    let m = call(&d, "sh", cmd("yes | head -c 50000000; echo done >&2")).await;
    assert_eq!(m.status, Status::Success, "{}", &m.content[..200]);
    assert!(m.content.contains("[warden: output truncated"), "marker");
    assert!(m.content.len() < 200_000, "{}", m.content.len());
    let m = call(&d, "sh", cmd("echo out; echo err >&2; exit 3")).await;
    assert_eq!(kind(&m), "exit_status");
    let e = m.error.as_ref().unwrap();
    assert_eq!(e.details["shell"]["exit_code"], 3);
    assert_eq!(e.details["shell"]["stdout"], "out\n");
    assert_eq!(e.details["shell"]["stderr"], "err\n");
    assert!(
        m.content.contains("out\n[stderr]\nerr\n[exit code 3]"),
        "{}",
        m.content
    );
    let m = call(&d, "sh", cmd("echo hi")).await;
    assert_eq!(m.content, "hi\n[exit code 0]");
    h.assert_clean().await;
}

async fn a_batch_of_ten_with_one_hanging_answers_all_ten(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("", "", "timeout = \"20s\""));
    let calls: Vec<ToolCall> = (0..10)
        .map(|i| {
            let args = if i == 4 {
                json!({"command": "sleep 1000", "timeout": 4})
            } else {
                cmd(&format!("echo call {i}"))
            };
            ToolCall::new(format!("c{i}"), "sh", &args)
        })
        .collect();
    let messages = d.dispatch(calls).await;
    assert_eq!(messages.len(), 10);
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.tool_call_id, format!("c{i}"));
        if i == 4 {
            assert_eq!(kind(m), "timeout", "{}", m.content);
        } else {
            assert_eq!(m.content, format!("call {i}\n[exit code 0]"));
        }
    }
    h.assert_clean().await;
}

async fn a_dropped_call_leaves_no_container(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let d = h.dispatcher("sh", &h.shell_policy("", "", "timeout = \"60s\""));
    let call = d.call(ToolCall::new("c1", "sh", &cmd("sleep 1000")));
    assert!(
        tokio::time::timeout(Duration::from_secs(3), call)
            .await
            .is_err()
    );
    h.assert_clean().await;
}

async fn a_templated_tool_puts_arguments_in_argv_without_a_shell(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let policy = format!(
        "[executor]\nkind = \"docker\"\nname = \"echo\"\nimage = \"{}\"\n\
         argv = [\"/bin/echo\", \"[{{text}}]\"]\nworkdir = \"/tmp\"\n{}",
        sandbox.tag(),
        sandbox.runtime_line()
    );
    let d = h.dispatcher("echo", &policy);
    let m = call(&d, "echo", json!({"text": "$(id); `reboot`"})).await;
    assert_eq!(m.content, "[$(id); `reboot`]\n[exit code 0]");
    // The container's shell is sent the argv as words of a script: quotes, a line break and
    // what would end the script stay one argument, as they are.
    let hostile = "it's '\\'' }; exit 3\n'; id; '\\";
    let m = call(&d, "echo", json!({ "text": hostile })).await;
    assert_eq!(m.content, format!("[{hostile}]\n[exit code 0]"));
    let m = call(&d, "echo", json!({"txt": "x"})).await;
    assert_eq!(kind(&m), "invalid_arguments", "{}", m.content);
    h.assert_clean().await;
}

#[tokio::test]
async fn a_container_reports_its_cgroups_cpu_and_memory_peak() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &shell_policy("", "", "memory = \"256MiB\""));
    holds_fifty_mb(&d).await;
    let m = call(&d, "sh", cmd(HALF_A_SECOND_OF_CPU)).await;
    assert!(m.content.starts_with("spun\n"), "{}", m.content);
    let used = usage(&m);
    let cpu = used["cpu_ms"].as_f64().unwrap();
    assert!((450.0..3000.0).contains(&cpu), "{used}");
    let m = call(&d, "sh", cmd("true")).await;
    assert_eq!(m.content, "[exit code 0]");
    let used = usage(&m);
    assert!(used["cpu_ms"].as_f64().unwrap() < 200.0, "{used}");
    assert!(
        used["peak_memory_bytes"].as_u64().unwrap() < 25_000_000,
        "{used}"
    );
    h.assert_clean().await;
}

#[tokio::test]
async fn a_failed_or_timed_out_container_still_reports_what_it_used() {
    let h = docker_or_skip!();
    let d = h.dispatcher("sh", &shell_policy("", "", "timeout = \"10s\""));
    let m = call(&d, "sh", cmd("echo no >&2; exit 3")).await;
    assert_eq!(kind(&m), "exit_status", "{}", m.content);
    let used = usage(&m);
    assert!(used["cpu_ms"].as_f64().is_some(), "{used}");
    assert!(used["peak_memory_bytes"].as_u64().unwrap() > 0, "{used}");
    let m = call(
        &d,
        "sh",
        json!({"command": "while :; do :; done", "timeout": 1}),
    )
    .await;
    assert_eq!(kind(&m), "timeout", "{}", m.content);
    let used = usage(&m);
    // It spun for about its second, on a core of its own or a shared one.
    assert!(used["cpu_ms"].as_f64().unwrap() > 100.0, "{used}");
    assert!(used["peak_memory_bytes"].as_u64().unwrap() > 0, "{used}");
    h.assert_clean().await;
}
