//! Sockets allowed by list in warden's seccomp profile: unix sockets and socketpairs, and TCP
//! and UDP over IPv4 and IPv6, work; vsock (outside every network namespace), MPTCP, raw,
//! netlink, packet and every other family fail, each with its errno — per call and in a
//! session, with no network and with the bridge.

use crate::common::{Harness, Image, call, cmd};
use warden_core::Status;
use warden_test_support::sockets::{PROBE, check};

/// What a container may do beyond the calls every sandbox allows: its loopback is up, and
/// its unix sockets reach only its own mounts.
const ALSO_ALLOWED: [&str; 2] = ["tcp loopback", "udp loopback"];

/// The probe's output in a shell tool with `extra` in its `[executor]`.
async fn probe(h: &Harness, extra: &str) -> String {
    let dir = h.folder("probe");
    std::fs::write(dir.join("sockets.py"), PROBE).unwrap();
    let grants = format!(
        "fs = [{{ host = \"{}\", guest = \"/probe\", access = \"read-only\" }}]",
        dir.display()
    );
    let d = h.dispatcher(
        "sh",
        &h.shell_policy(extra, &grants, "timeout = \"30s\"\nmemory = \"512MiB\""),
    );
    let m = call(&d, "sh", cmd("python3 /probe/sockets.py")).await;
    d.close().await;
    assert_eq!(m.status, Status::Success, "{extra}: {}", m.content);
    m.content
}

#[tokio::test]
async fn only_unix_tcp_and_udp_sockets_without_a_network() {
    let h = docker_or_skip!(Image::Debian);
    for extra in ["", "session = true"] {
        check(&probe(&h, extra).await, "ok", &ALSO_ALLOWED);
    }
    h.assert_clean().await;
}

#[tokio::test]
async fn only_unix_tcp_and_udp_sockets_on_the_bridge() {
    let h = docker_or_skip!(Image::Debian);
    let out = probe(&h, "network = \"unrestricted\"").await;
    // The engine writes the bridge's /etc/hosts, so a name resolves, netlink or not (without
    // a network the image's own, empty one is all there is).
    check(
        &out,
        "ok",
        &[ALSO_ALLOWED.as_slice(), &["getaddrinfo localhost"]].concat(),
    );
    h.assert_clean().await;
}
