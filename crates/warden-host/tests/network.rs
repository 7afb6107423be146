//! No network without a grant: a server on the test's loopback is out of reach, and the same
//! connection works once the policy opts in to the host's network.

use crate::common::*;
use serde_json::json;
use std::net::TcpListener;
use std::time::Duration;
use warden_test_support::servers::accepted;

fn bash(extra: &str) -> String {
    format!(
        "[executor]\nkind = \"host\"\nname = \"bash\"\nargv = [\"/bin/bash\", \"-c\", \"{{command}}\"]\n{extra}\n\
         [grants]\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n[limits]\ntimeout = \"10s\"\n"
    )
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

#[tokio::test]
async fn a_world_writable_unix_socket_is_unreachable() {
    use std::os::unix::net::UnixListener;
    let place = Place::new();
    // A socket anyone may connect to, in a folder anyone may enter: only the sandbox stops it.
    let dir = place.folder("run", 0o777, None);
    let path = dir.join("service.sock");
    let listener = UnixListener::bind(&path).unwrap();
    chmod(&path, 0o777);
    listener.set_nonblocking(true).unwrap();
    let (tool, limits) = place.tool(
        "[executor]\nkind = \"host\"\nname = \"py\"\nargv = [\"/usr/bin/python3\", \"-c\", \"{code}\"]\n\
         [limits]\ntimeout = \"10s\"\nmemory = \"1GiB\"\n",
    );
    let code = format!(
        "import socket\n\
         a, b = socket.socketpair(); a.send(b'x'); print('pair', b.recv(1))\n\
         s = socket.socket(socket.AF_UNIX); s.connect('{}'); s.send(b'hi'); print('CONNECTED')",
        path.display()
    );
    let r = call(&tool, &limits, json!({ "code": code })).await;
    let t = text(&r);
    // socketpair, a program's private pipe, still works; the socket does not.
    assert!(t.contains("pair b'x'"), "{t}");
    assert!(!t.contains("CONNECTED"), "{t}");
    assert!(t.contains("PermissionError"), "{t}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(listener.accept().is_err(), "the socket was reached");
}
