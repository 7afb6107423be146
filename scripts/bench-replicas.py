#!/usr/bin/env python3
"""Benchmarks `warden serve --http` behind haproxy (not run in CI; tests never assert speed).

Calls/s of `add` from the official Python MCP SDK client, in one run, three ways:
1. straight to one replica;
2. through haproxy (examples/haproxy.cfg) with one replica behind it (both of its server
   lines name the same replica);
3. through haproxy with two replicas.
The load is --procs client processes, each with --sessions sessions that make --calls calls
one after the other; every session is a new MCP session, so haproxy spreads sessions, and a
session's calls go to its replica. A client process is one Python thread, often the
bottleneck: the figures say what this machine's clients get, not the server's ceiling.

Usage (from the repository root, after `cargo build --release` and building guest-sdk):
    "$(scripts/py-venv)/bin/python" scripts/bench-replicas.py [--procs 4] [--sessions 4] [--calls 200]
WARDEN_BIN names the binary (default target/release/warden); haproxy is /usr/sbin/haproxy.
"""

import argparse
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
HAPROXY = Path("/usr/sbin/haproxy")
CONFIG = ROOT / "examples" / "haproxy.cfg"
COMPONENT = ROOT / "target" / "wasm32-wasip2" / "release" / "trivial.wasm"
WIT = ROOT / "guest-sdk" / "fixtures" / "trivial" / "wit"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} does not listen on {port}")


def replica(binary, toolbox, home, token):
    port = free_port()
    env = {**os.environ, "WARDEN_TOOLBOX": str(toolbox), "WARDEN_HOME": str(home),
           "WARDEN_MCP_TOKEN": token, "RUST_LOG": "warn"}
    home.mkdir()
    with open(home / "stderr.log", "wb") as err:
        proc = subprocess.Popen([str(binary), "serve", "--http", f"127.0.0.1:{port}"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
    wait_listening(port, proc, "warden serve --http")
    return proc, port


def haproxy(a, b):
    port = free_port()
    env = {**os.environ, "WARDEN_LB_BIND": f"127.0.0.1:{port}",
           "WARDEN_REPLICA_A": f"127.0.0.1:{a}", "WARDEN_REPLICA_B": f"127.0.0.1:{b}"}
    proc = subprocess.Popen([str(HAPROXY), "-db", "-f", str(CONFIG)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    wait_listening(port, proc, "haproxy")
    return proc, port


async def one_session(url, token, calls, times):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as client:
        async with streamable_http_client(url, http_client=client) as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
                for i in range(calls):
                    start = time.perf_counter()
                    result = await s.call_tool("add", {"a": i, "b": 1})
                    times.append(time.perf_counter() - start)
                    assert result.structuredContent == {"result": i + 1}, result


def client_process(url, token, sessions, calls, start_at, out):
    """One process: `sessions` sessions at once; sends back each call's seconds."""
    async def main():
        times = []
        async with anyio.create_task_group() as group:
            for _ in range(sessions):
                group.start_soon(one_session, url, token, calls, times)
        return times
    # Every process starts its sessions at the same moment.
    time.sleep(max(0.0, start_at - time.time()))
    out.put(anyio.run(main))


def load(url, token, procs, sessions, calls):
    """calls/s over the whole load (sessions' initialize and DELETE included), median ms."""
    out = multiprocessing.Queue()
    start_at = time.time() + 1.0
    workers = [multiprocessing.Process(target=client_process,
                                       args=(url, token, sessions, calls, start_at, out))
               for _ in range(procs)]
    for w in workers:
        w.start()
    times = [t for _ in workers for t in out.get()]
    for w in workers:
        w.join()
    elapsed = time.time() - start_at
    return len(times) / elapsed, statistics.median(times) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per process")
    parser.add_argument("--calls", type=int, default=200, help="calls per session")
    args = parser.parse_args()
    binary = Path(os.environ.get("WARDEN_BIN", ROOT / "target" / "release" / "warden"))
    for needed in (binary, HAPROXY, COMPONENT):
        if not needed.is_file():
            sys.exit(f"{needed} is missing (docs/mcp.md: Several servers behind a load balancer)")
    token = secrets.token_hex(24)
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        toolbox = tmp / "policies"
        toolbox.mkdir()
        (toolbox / "trivial.toml").write_text(
            f'[executor]\nkind = "wasm"\ncomponent = "{COMPONENT}"\nwit = "{WIT}"\n'
        )
        try:
            a, a_port = replica(binary, toolbox, tmp / "home-a", token)
            procs.append(a)
            b, b_port = replica(binary, toolbox, tmp / "home-b", token)
            procs.append(b)
            one, one_port = haproxy(a_port, a_port)
            procs.append(one)
            two, two_port = haproxy(a_port, b_port)
            procs.append(two)
            # Compiles and caches the component on both replicas before anything is timed.
            load(f"http://127.0.0.1:{two_port}/mcp", token, 1, 2, 20)
            total = args.procs * args.sessions * args.calls
            print(f"{args.procs} client processes x {args.sessions} sessions x {args.calls} "
                  f"calls of `add` = {total} calls per line; {os.cpu_count()} CPUs")
            for name, port in [("direct to one replica", a_port),
                               ("haproxy, one replica", one_port),
                               ("haproxy, two replicas", two_port)]:
                rate, median = load(f"http://127.0.0.1:{port}/mcp", token,
                                    args.procs, args.sessions, args.calls)
                print(f"{name:<24} {rate:8.0f} calls/s   median {median:6.2f} ms per call")
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait()


if __name__ == "__main__":
    main()
