//! Sockets allowed by list in warden's seccomp profile: unix sockets and socketpairs, and TCP
//! and UDP over IPv4 and IPv6, work; vsock (outside every network namespace), MPTCP, raw,
//! netlink, packet and every other family fail, each with its errno — per call and in a
//! session, with no network and with the bridge, under runc and under gVisor.

use crate::common::{Harness, Sandbox, call, cmd};
use warden_core::Status;
use warden_test_support::sockets::{PROBE, check_refused_as};

under_runc_and_gvisor!(
    only_unix_tcp_and_udp_sockets_without_a_network,
    only_unix_tcp_and_udp_sockets_on_the_bridge,
);

/// What a container may do beyond the calls every sandbox allows: its loopback is up, and
/// its unix sockets reach only its own mounts.
const ALSO_ALLOWED: [&str; 2] = ["tcp loopback", "udp loopback"];

/// What gVisor's own kernel answers besides: its view of the sandbox's interfaces (netlink
/// route) and a uevent socket that never hears a thing; no such call reaches this machine's
/// kernel. Every other call it lacks fails, with errnos of its own.
const GVISOR_ALSO: [&str; 3] = ["netlink route", "netlink route datagram", "netlink uevent"];

/// The calls allowed in `h`'s sandbox besides `also`, and whether any errno will do.
fn allowed(h: &Harness, also: &[&'static str]) -> (Vec<&'static str>, bool) {
    let gvisor = h.sandbox() == Sandbox::Gvisor;
    let mut allowed = [ALSO_ALLOWED.as_slice(), also].concat();
    if gvisor {
        allowed.extend(GVISOR_ALSO);
    }
    (allowed, gvisor)
}

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

async fn only_unix_tcp_and_udp_sockets_without_a_network(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    for extra in ["", "session = true"] {
        let (allowed, any_errno) = allowed(&h, &[]);
        check_refused_as(&probe(&h, extra).await, "ok", &allowed, any_errno);
    }
    h.assert_clean().await;
}

async fn only_unix_tcp_and_udp_sockets_on_the_bridge(sandbox: Sandbox) {
    let h = docker_or_skip!(sandbox);
    let out = probe(&h, "network = \"unrestricted\"").await;
    // The engine writes the bridge's /etc/hosts, so a name resolves, netlink or not (without
    // a network the image's own, empty one is all there is).
    let (allowed, any_errno) = allowed(&h, &["getaddrinfo localhost"]);
    check_refused_as(&out, "ok", &allowed, any_errno);
    h.assert_clean().await;
}
