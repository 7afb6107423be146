#!/usr/bin/env python3
"""Benchmarks a docker shell's per-call containers through the shipped binary (not run in CI;
tests never assert speed): `warden serve` over stdio, a bare client writing JSON lines, each
`tools/call` timed from its request to its answer.

For runc and for gVisor (the engine's `runsc`), without a pool and with `pool = 8`:
- sequential: one call at a time, `echo hi`; with a pool, in bursts of 8 after the pool is
  full again (a pool serves bursts: the engine refills it at its own pace), and back to back
  for --calls calls, where the pool runs dry and its refill competes with the calls;
- concurrency 4: 4 calls at once, in rounds.
Beside them, in the same run: `docker run --rm IMAGE echo hi` (the CLI, no hardening), a
session command (one shell per session), and a session's first command with and without a
pool. Then the cost of a system call in each, and what an idle pool of 8 holds: memory (the
containers' cgroups) and CPU over 10 s.

Usage (from the repository root, as root, with the Debian sandbox image and runsc registered
as .ci/run registers it):
    cargo build --release --locked --bin warden --bin warden-helper
    python3 scripts/bench-pool.py [--calls 40] [--rounds 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "warden-sandbox-debian:latest"
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def policy(runtime, pool, session):
    lines = ["[executor]", 'kind = "docker"', 'name = "sh"', f'image = "{IMAGE}"',
             'argv = ["/bin/sh", "-c", "{command}"]']
    if runtime:
        lines.append(f'runtime = "{runtime}"')
    if pool:
        lines.append(f"pool = {pool}")
    if session:
        lines.append("session = true")
    return "\n".join(lines) + "\n"


class Server:
    """`warden serve` over one toolbox, spoken to in JSON lines."""

    def __init__(self, warden, text, label):
        self.dir = tempfile.TemporaryDirectory()
        toolbox = Path(self.dir.name) / "policies"
        toolbox.mkdir()
        (toolbox / "sh.toml").write_text(text)
        env = {**os.environ, "WARDEN_TOOLBOX": str(toolbox),
               "WARDEN_HOME": str(Path(self.dir.name) / "home"), "RUST_LOG": "error"}
        self.proc = subprocess.Popen([warden, "serve"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.next = 1
        self.label = label
        self.send(INIT)
        self.read()
        self.send(INITIALIZED)

    def send(self, message):
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def read(self):
        return json.loads(self.proc.stdout.readline())

    def calls(self, n, command="echo hi"):
        """Sends n calls at once; answers each one's latency in ms."""
        sent = {}
        for _ in range(n):
            self.next += 1
            sent[self.next] = time.perf_counter()
            self.send({"jsonrpc": "2.0", "id": self.next, "method": "tools/call",
                       "params": {"name": "sh", "arguments": {"command": command}}})
        took = []
        for _ in range(n):
            answer = self.read()
            took.append((time.perf_counter() - sent[answer["id"]]) * 1e3)
            result = answer["result"]
            assert not result.get("isError"), result
        return took

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.dir.cleanup()


def waiting(n=None):
    """The pooled containers running now; with n, waits until n run and no used one is left
    (a used container still stands while it is removed), then a moment for warden to take
    the last one in."""
    def ps(*extra):
        return subprocess.run(["docker", "ps", "-q", "--filter", "label=warden.mode=pool", *extra],
                              capture_output=True, text=True, check=True).stdout.split()
    for _ in range(600):
        running = ps("--filter", "status=running")
        if n is None:
            return running
        if len(running) == n and len(ps("-a")) == n:
            time.sleep(0.3)
            return running
        time.sleep(0.05)
    raise SystemExit(f"the pool never held {n} containers")


def row(name, ms):
    ms = sorted(ms)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    print(f"| {name} | {len(ms)} | {ms[0]:.1f} ms | {statistics.median(ms):.1f} ms | {p90:.1f} ms |")


def per_call(warden, runtime, args):
    name = runtime or "runc"
    plain = Server(warden, policy(runtime, 0, False), name)
    plain.calls(1)
    row(f"{name}, no pool, sequential", [t for _ in range(args.calls) for t in plain.calls(1)])
    row(f"{name}, no pool, concurrency 4", [t for _ in range(args.rounds) for t in plain.calls(4)])
    plain.close()
    pooled = Server(warden, policy(runtime, 8, False), name)
    waiting(8)
    bursts = []
    for _ in range(args.rounds):
        waiting(8)
        bursts += [t for _ in range(8) for t in pooled.calls(1)]
    row(f"{name}, pool = 8, sequential, bursts of 8", bursts)
    concurrent = []
    for _ in range(args.rounds):
        waiting(8)
        concurrent += pooled.calls(4) + pooled.calls(4)
    row(f"{name}, pool = 8, concurrency 4, bursts of 8", concurrent)
    waiting(8)
    row(f"{name}, pool = 8, sequential, back to back",
        [t for _ in range(args.calls) for t in pooled.calls(1)])
    pooled.close()


def session(warden, runtime, pool, args):
    name = runtime or "runc"
    first = []
    for _ in range(args.rounds):
        server = Server(warden, policy(runtime, pool, True), name)
        if pool:
            waiting(pool)
        first += server.calls(1)
        later = [t for _ in range(args.calls) for t in server.calls(1)]
        server.close()
    row(f"{name}, session's first command, {'pool = 1' if pool else 'no pool'}", first)
    if not pool:
        row(f"{name}, a session command (its shell running)", later)


def docker_run(runtime, args):
    argv = ["docker", "run", "--rm", "--network", "none"]
    if runtime:
        argv += ["--runtime", runtime]
    took = []
    for _ in range(args.rounds * 2):
        start = time.perf_counter()
        subprocess.run(argv + [IMAGE, "echo", "hi"], check=True, capture_output=True)
        took.append((time.perf_counter() - start) * 1e3)
    row(f"`docker run --rm{' --runtime ' + runtime if runtime else ''}` (CLI)", took)


def syscalls(runtime):
    """200,000 small system calls (getppid) inside a container, as the container measures."""
    argv = ["docker", "run", "--rm", "--network", "none"]
    if runtime:
        argv += ["--runtime", runtime]
    code = ("import os, time; t = time.perf_counter(); [os.getppid() for _ in range(200000)]; "
            "print(time.perf_counter() - t)")
    out = subprocess.run(argv + [IMAGE, "python3", "-c", code], check=True,
                         capture_output=True, text=True).stdout
    seconds = float(out)
    print(f"| {runtime or 'runc'} | {seconds:.2f} s | {seconds / 200000 * 1e6:.1f} µs |")


def idle_pool(warden, runtime):
    """Memory and CPU of an idle pool of 8, from the containers' cgroups (v2 or v1)."""
    server = Server(warden, policy(runtime, 8, False), runtime or "runc")
    ids = waiting(8)
    time.sleep(2)

    def read(cid):
        pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", cid],
                             capture_output=True, text=True, check=True).stdout.strip()
        rel = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        v2 = [l.split("::", 1)[1] for l in rel if l.startswith("0::")]
        if v2 and Path(f"/sys/fs/cgroup{v2[0]}/memory.current").exists():
            base = Path(f"/sys/fs/cgroup{v2[0]}")
            memory = int((base / "memory.current").read_text())
            cpu = int(next(l.split()[1] for l in (base / "cpu.stat").read_text().splitlines()
                           if l.startswith("usage_usec"))) / 1e3
        else:
            mem = next(l.split(":", 2)[2] for l in rel if ":memory:" in l)
            acct = next(l.split(":", 2)[2] for l in rel if "cpuacct" in l)
            memory = int(Path(f"/sys/fs/cgroup/memory{mem}/memory.usage_in_bytes").read_text())
            cpu = int(Path(f"/sys/fs/cgroup/cpuacct{acct}/cpuacct.usage").read_text()) / 1e6
        return memory, cpu

    before = [read(c) for c in ids]
    time.sleep(10)
    after = [read(c) for c in ids]
    memory = sum(m for m, _ in after) / 2**20
    cpu = sum(a[1] - b[1] for a, b in zip(after, before)) / 10
    print(f"| {runtime or 'runc'} | {memory:.0f} MiB | {cpu:.1f} ms of CPU a second |")
    server.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runtimes", default="runc,runsc",
                        help="which runtimes to measure (runc is the engine's default)")
    args = parser.parse_args()
    warden = os.environ.get("WARDEN_BIN", str(ROOT / "target/release/warden"))
    print("| `echo hi` through `warden serve` (MCP stdio), end to end | calls | min | median | p90 |")
    print("|---|---:|---:|---:|---:|")
    runtimes = [None if r == "runc" else r for r in args.runtimes.split(",")]
    for runtime in runtimes:
        docker_run(runtime, args)
        per_call(warden, runtime, args)
        session(warden, runtime, 0, args)
        session(warden, runtime, 1, args)
    print("\n| 200,000 `getppid` in Python | total | each |")
    print("|---|---:|---:|")
    for runtime in runtimes:
        syscalls(runtime)
    print("\n| an idle pool of 8 | memory | CPU |")
    print("|---|---:|---:|")
    for runtime in runtimes:
        idle_pool(warden, runtime)
    print(f"\nLoad average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.")


if __name__ == "__main__":
    main()
