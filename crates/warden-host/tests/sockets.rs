//! Sockets allowed by list: TCP and UDP over IPv4 and IPv6 and unix socketpairs work; vsock
//! (outside every network namespace), MPTCP and raw sockets (beside Landlock's TCP rules),
//! netlink, packet and every other family fail, each with its errno, with or without the
//! host's network.

use crate::common::*;
use serde_json::json;
use warden_test_support::sockets::{PROBE, check};

/// The probe's output in a python tool with `extra` in its `[executor]`.
async fn probe(extra: &str) -> String {
    let place = Place::new();
    let (tool, limits) = place.tool(&format!(
        "[executor]\nkind = \"host\"\nname = \"py\"\n\
         argv = [\"/usr/bin/python3\", \"-c\", \"{{code}}\"]\n{extra}\n\
         [limits]\ntimeout = \"20s\"\nmemory = \"1GiB\"\n"
    ));
    let r = call(&tool, &limits, json!({ "code": PROBE })).await;
    r.unwrap_or_else(|e| panic!("{}: {}", e.kind, e.message))
        .content
}

#[tokio::test]
async fn only_tcp_udp_and_socketpairs_without_a_network() {
    // A unix socket is refused here (a pathname socket reaches the host's services); the
    // loopback is down, so nothing is tried over it.
    check(&probe("").await, "EACCES", &[]);
}

#[tokio::test]
async fn only_tcp_udp_and_socketpairs_on_the_hosts_network() {
    // Without Landlock's TCP rules (the host's network), TCP and UDP reach the loopback.
    let out = probe("network = \"unrestricted\"").await;
    check(&out, "EACCES", &["tcp loopback", "udp loopback"]);
}
