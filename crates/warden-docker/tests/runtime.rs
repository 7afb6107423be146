//! The engine's OCI runtimes: a policy's `runtime` runs its containers under that runtime
//! (gVisor's kernel answers inside, not this machine's), a name the engine lacks is refused
//! at load naming the fix, a gVisor that cannot reach the gate cannot hold net grants, and the
//! audit says what the runtime is.

use crate::common::{Sandbox, call, cmd, shell_policy_in, under_ci};
use warden_core::Status;

/// How gVisor's kernel names itself in `/proc/version`, whatever kernel it runs on.
const GVISOR_VERSION: &str = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016";

/// What the kernel says of itself inside a container of `sandbox`; `None` when the test is
/// skipped.
async fn kernel(sandbox: Sandbox) -> Option<String> {
    let h = crate::common::harness_in(sandbox).await?;
    let d = h.dispatcher("sh", &h.shell_policy("", "", "timeout = \"30s\""));
    let m = call(&d, "sh", cmd("cat /proc/version")).await;
    assert_eq!(m.status, Status::Success, "{}", m.content);
    h.assert_clean().await;
    Some(m.content)
}

#[tokio::test]
async fn a_runsc_policy_runs_under_gvisors_kernel_and_a_default_one_does_not() {
    let Some(gvisor) = kernel(Sandbox::Gvisor).await else {
        return;
    };
    assert!(gvisor.contains(GVISOR_VERSION), "{gvisor}");
    let Some(runc) = kernel(Sandbox::Debian).await else {
        return;
    };
    let host = std::fs::read_to_string("/proc/version").unwrap();
    assert_eq!(
        runc.lines().next(),
        host.lines().next(),
        "runc shares this kernel"
    );
    assert_ne!(gvisor.lines().next(), host.lines().next());
}

#[tokio::test]
async fn a_runtime_the_engine_lacks_is_refused_at_load_naming_the_fix() {
    let h = docker_or_skip!();
    let policy = shell_policy_in(Sandbox::Busybox, "runtime = \"kata-nowhere\"", "", "");
    let e = h.toolbox("sh", &policy).err().expect("refused");
    assert!(e.contains("sh.toml:6"), "{e}");
    assert!(e.contains("no runtime `kata-nowhere`"), "{e}");
    assert!(e.contains("daemon.json"), "{e}");
    assert!(e.contains("runc"), "the engine's runtimes are listed: {e}");
}

#[tokio::test]
async fn the_audit_says_the_runtime_is_gvisor() {
    let h = docker_or_skip!(Sandbox::Gvisor);
    let toolbox = h
        .toolbox("sh", &h.shell_policy("pool = 2", "", ""))
        .expect("loads");
    let report = &toolbox.policies()[0].report;
    let line = |label: &str| {
        report
            .lines
            .iter()
            .find(|l| l.label == label)
            .map(|l| l.text.clone())
            .unwrap_or_default()
    };
    assert!(
        line("runtime").starts_with("runsc (gVisor: a user-space kernel; platform ptrace"),
        "{:?}",
        report.lines
    );
    assert!(
        line("pool").starts_with("2 containers kept started"),
        "{:?}",
        report.lines
    );
    assert_eq!(report.settings["pool"], 2);
}

/// gVisor registered with `--network=none`: no network but its own loopback, where the gate
/// cannot listen. `.ci/run` registers it so, beside `runsc`.
const NO_NETWORK: &str = "runsc-nonet";

#[tokio::test]
async fn gvisor_without_the_containers_namespace_cannot_hold_net_grants() {
    let h = docker_or_skip!(Sandbox::Gvisor);
    let docker = h.engine().client().await.expect("engine");
    let runtimes = docker
        .info()
        .await
        .expect("info")
        .runtimes
        .unwrap_or_default();
    if !runtimes.contains_key(NO_NETWORK) {
        let why = format!("the engine has no runtime `{NO_NETWORK}` (.ci/run registers it)");
        assert!(!under_ci(), "CI=true and {why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    let runtime = format!("runtime = \"{NO_NETWORK}\"");
    let grants = "net = [\"api.test:443\"]";
    let policy = shell_policy_in(Sandbox::Busybox, &runtime, grants, "");
    let e = h.toolbox("sh", &policy).err().expect("refused");
    assert!(e.contains("--network=host"), "{e}");
    assert!(e.contains("gVisor"), "{e}");
    // Without net grants nothing needs the gate: it runs, under gVisor.
    let d = h.dispatcher("sh", &shell_policy_in(Sandbox::Busybox, &runtime, "", ""));
    let m = call(&d, "sh", cmd("cat /proc/version")).await;
    assert!(m.content.contains(GVISOR_VERSION), "{}", m.content);
    h.assert_clean().await;
}
