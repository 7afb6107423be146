//! The socket calls a sandbox must allow and refuse, family by family, made by python3 inside
//! it, and what each must answer: both sandboxes run [`PROBE`] and check it with [`check`].

/// Python that makes each socket call and prints `name: result`, the result being `ok` or the
/// errno's name; `family N` lines try every family number up to 63 with a stream, a datagram
/// and a raw socket, and print the first answer that is not EAFNOSUPPORT, if any.
pub const PROBE: &str = r#"
import errno, socket
AF_VSOCK, AF_PACKET, AF_NETLINK, AF_ALG, AF_BLUETOOTH, AF_XDP = 40, 17, 16, 38, 31, 44
AF_KEY, AF_TIPC, AF_RDS, AF_CAN, AF_SMC, AF_QIPCRTR = 15, 30, 21, 29, 43, 42
S, D, R, SEQ = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET
FLAGS = socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
TCP, UDP, ICMP, ICMPV6, MPTCP, SCTP, UDPLITE = 6, 17, 1, 58, 262, 132, 136

def answer(call):
    try:
        call()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def report(name, call):
    print(f'{name}: {answer(call)}', flush=True)

def make(family, kind, protocol=0):
    return lambda: socket.socket(family, kind, protocol).close()

def pair(family, kind):
    return lambda: [s.close() for s in socket.socketpair(family, kind)]

def vsock_bound():
    with socket.socket(AF_VSOCK, S) as s:
        s.bind((socket.VMADDR_CID_ANY, 9999))

def mptcp_listening():
    with socket.socket(socket.AF_INET, S, MPTCP) as s:
        s.bind(('0.0.0.0', 0))
        s.listen()

def loopback(family, kind, host):
    def run():
        with socket.socket(family, kind) as server, socket.socket(family, kind) as client:
            server.bind((host, 0))
            if kind == S:
                server.listen()
                client.connect(server.getsockname())
                peer, _ = server.accept()
                client.sendall(b'x')
                assert peer.recv(1) == b'x'
                peer.close()
            else:
                client.sendto(b'x', server.getsockname())
                assert server.recv(1) == b'x'
    return run

report('tcp', make(socket.AF_INET, S))
report('tcp by name', make(socket.AF_INET, S | FLAGS, TCP))
report('udp', make(socket.AF_INET, D))
report('udp by name', make(socket.AF_INET, D | FLAGS, UDP))
report('tcp6', make(socket.AF_INET6, S, TCP))
report('udp6', make(socket.AF_INET6, D | socket.SOCK_CLOEXEC, 0))
report('unix socketpair', pair(socket.AF_UNIX, S))
report('unix datagram socketpair', pair(socket.AF_UNIX, D | socket.SOCK_CLOEXEC))
report('getaddrinfo', lambda: socket.getaddrinfo('127.0.0.1', 80, 0, S, 0, socket.AI_ADDRCONFIG))
report('getaddrinfo localhost', lambda: socket.getaddrinfo('localhost', 80, 0, S, 0, socket.AI_ADDRCONFIG))
report('tcp loopback', loopback(socket.AF_INET, S, '127.0.0.1'))
report('udp loopback', loopback(socket.AF_INET, D, '127.0.0.1'))
report('unix', make(socket.AF_UNIX, S))

report('vsock', make(AF_VSOCK, S))
report('vsock bound', vsock_bound)
report('vsock datagram', make(AF_VSOCK, D))
report('packet', make(AF_PACKET, R, 0x0300))
report('packet datagram', make(AF_PACKET, D, 0x0300))
report('netlink route', make(AF_NETLINK, R, 0))
report('netlink route datagram', make(AF_NETLINK, D | socket.SOCK_CLOEXEC, 0))
report('netlink sock_diag', make(AF_NETLINK, R, 4))
report('netlink audit', make(AF_NETLINK, R, 9))
report('netlink uevent', make(AF_NETLINK, D, 15))
report('netlink generic', make(AF_NETLINK, R, 16))
report('alg', make(AF_ALG, SEQ))
report('bluetooth', make(AF_BLUETOOTH, SEQ, 0))
report('xdp', make(AF_XDP, R))
report('key', make(AF_KEY, R, 2))
report('tipc', make(AF_TIPC, SEQ))
report('rds', make(AF_RDS, SEQ))
report('can', make(AF_CAN, R, 1))
report('smc', make(AF_SMC, S))
report('qipcrtr', make(AF_QIPCRTR, D))
report('inet socketpair', pair(socket.AF_INET, S))
report('tipc socketpair', pair(AF_TIPC, SEQ))
for family in range(64):
    if family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
        continue
    answers = [answer(make(family, kind)) for kind in (S, D, R)]
    other = [a for a in answers if a != 'EAFNOSUPPORT']
    print(f'family {family}: {other[0] if other else "EAFNOSUPPORT"}', flush=True)

report('raw', make(socket.AF_INET, R, ICMP))
report('raw6', make(socket.AF_INET6, R, ICMPV6))
report('raw tcp', make(socket.AF_INET, R, TCP))
report('mptcp', make(socket.AF_INET, S, MPTCP))
report('mptcp listening', mptcp_listening)
report('mptcp6', make(socket.AF_INET6, S | FLAGS, MPTCP))
report('sctp', make(socket.AF_INET, SEQ, SCTP))
report('sctp stream', make(socket.AF_INET, S, SCTP))
report('ping', make(socket.AF_INET, D, ICMP))
report('ping6', make(socket.AF_INET6, D, ICMPV6))
report('udplite', make(socket.AF_INET, D, UDPLITE))
report('dccp', make(socket.AF_INET, 6, 33))
report('udp over a stream', make(socket.AF_INET, S, UDP))
report('tcp over datagrams', make(socket.AF_INET, D, TCP))
"#;

/// The calls that must work in every sandbox.
pub const ALLOWED: &[&str] = &[
    "tcp",
    "tcp by name",
    "udp",
    "udp by name",
    "tcp6",
    "udp6",
    "unix socketpair",
    "unix datagram socketpair",
    "getaddrinfo",
];

/// The calls of a family no sandbox has, which fail with EAFNOSUPPORT.
pub const NO_FAMILY: &[&str] = &[
    "vsock",
    "vsock bound",
    "vsock datagram",
    "packet",
    "packet datagram",
    "netlink route",
    "netlink route datagram",
    "netlink sock_diag",
    "netlink audit",
    "netlink uevent",
    "netlink generic",
    "alg",
    "bluetooth",
    "xdp",
    "key",
    "tipc",
    "rds",
    "can",
    "smc",
    "qipcrtr",
    "inet socketpair",
    "tipc socketpair",
];

/// The calls of IPv4 and IPv6 that are neither TCP nor UDP, which fail with EACCES.
pub const NO_PROTOCOL: &[&str] = &[
    "raw",
    "raw6",
    "raw tcp",
    "mptcp",
    "mptcp listening",
    "mptcp6",
    "sctp",
    "sctp stream",
    "ping",
    "ping6",
    "udplite",
    "dccp",
    "udp over a stream",
    "tcp over datagrams",
];

/// The answer the probe printed for `name`.
pub fn answer<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
}

/// Checks every line of the probe's output `out`: the allowed calls work (and `extra_allowed`
/// besides), the refused ones fail with their errno, and `unix` answers `unix`. Panics naming
/// every call that answered otherwise.
pub fn check(out: &str, unix: &str, extra_allowed: &[&str]) {
    check_refused_as(out, unix, extra_allowed, false);
}

/// What a wanted answer says when any errno will do.
const REFUSED: &str = "any errno";

/// [`check`], where a refused call may fail with any errno when `any_errno`: gVisor's kernel
/// answers the calls it lacks with errnos of its own.
pub fn check_refused_as(out: &str, unix: &str, extra_allowed: &[&str], any_errno: bool) {
    let mut wanted: Vec<(String, &str)> = Vec::new();
    wanted.extend(
        ALLOWED
            .iter()
            .chain(extra_allowed)
            .map(|n| (n.to_string(), "ok")),
    );
    wanted.push(("unix".into(), unix));
    let refused = |name: &str, errno: &'static str| {
        let allowed = extra_allowed.contains(&name);
        (!allowed).then(|| (name.to_owned(), if any_errno { REFUSED } else { errno }))
    };
    wanted.extend(NO_FAMILY.iter().filter_map(|n| refused(n, "EAFNOSUPPORT")));
    wanted.extend(NO_PROTOCOL.iter().filter_map(|n| refused(n, "EACCES")));
    for family in (0..64).filter(|f| ![1, 2, 10].contains(f)) {
        wanted.extend(refused(&format!("family {family}"), "EAFNOSUPPORT"));
    }
    let wrong: Vec<String> = wanted
        .iter()
        .filter_map(|(name, want)| {
            let got = answer(out, name);
            let right = match got {
                Some(got) if *want == REFUSED => got.starts_with('E'),
                got => got == Some(want),
            };
            (!right).then(|| format!("{name}: {} (wanted {want})", got.unwrap_or("-")))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{}\n\nthe probe printed:\n{out}",
        wrong.join("\n")
    );
}
