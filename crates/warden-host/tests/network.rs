//! No network without a grant: a server on the test's loopback is out of reach, and the same
//! connection works once the policy opts in to the host's network.

mod common;

use common::*;
use serde_json::json;
use std::net::TcpListener;
use std::time::Duration;

fn bash(extra: &str) -> String {
    format!(
        "[executor]\nkind = \"host\"\nname = \"bash\"\nargv = [\"/bin/bash\", \"-c\", \"{{command}}\"]\n{extra}\n\
         [grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n[limits]\ntimeout = \"10s\"\n"
    )
}

/// Whether the listener got a connection within a moment.
fn accepted(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    for _ in 0..20 {
        if listener.accept().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

#[tokio::test]
async fn a_loopback_server_is_unreachable_without_a_grant() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let place = Place::new();
    let attack = format!(
        "echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED; \
         echo hi > /dev/tcp/localhost/{port} && echo CONNECTED; ip -o addr 2>/dev/null; true"
    );
    let (tool, limits) = place.tool(&bash(""));
    let r = call(&tool, &limits, json!({ "command": attack })).await;
    assert!(!text(&r).contains("CONNECTED"), "{}", text(&r));
    assert!(!accepted(&listener), "the server was reached");

    // The same command reaches it once the policy gives the host's network.
    let (open, limits) = place.tool(&bash("network = \"unrestricted\""));
    let r = call(&open, &limits, json!({ "command": attack })).await;
    assert!(text(&r).contains("CONNECTED"), "{}", text(&r));
    assert!(accepted(&listener));
}
