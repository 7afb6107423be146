#!/usr/bin/env python3
"""Benchmarks what OpenTelemetry export costs (not run in CI; tests never assert speed).

Two workloads, each under four servers, in interleaved rounds (every round runs each of them
once, in turn, so a machine that slows down slows them alike; each ratio is taken within a
round):

- the MCP stdio round trip: `warden serve`, a bare client writing `tools/call add` lines one
  at a time, --calls calls; the median round trip;
- `warden run` of --batch `add` calls as one process; its wall time.

The four: the build before telemetry (--before, a binary of the commit before it; export
does not exist there), this build with export off, on to a live receiver
(tests/python/otlp_receiver.py in a process of its own, decoding every span), and on to a
dead one (a port nothing listens on).

Usage (from the repository root, after `cargo build --release` and building guest-sdk):
    "$(scripts/py-venv)/bin/python" scripts/bench-otel.py --before PATH/TO/OLD/warden \\
        [--rounds 5] [--calls 2000] [--batch 10000]
WARDEN_BIN names this build's binary (default target/release/warden).
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mcp_round_trip(binary, env, calls) -> float:
    """The median round trip of `calls` sequential `tools/call add`, in seconds."""
    proc = subprocess.Popen([binary, "serve"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    def send(m):
        proc.stdin.write((json.dumps(m) + "\n").encode())
        proc.stdin.flush()
    send(INIT)
    proc.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    times = []
    for i in range(calls + 50):
        line = {"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": i, "b": 1}}}
        start = time.perf_counter()
        send(line)
        answer = proc.stdout.readline()
        if i >= 50:  # the first calls warm the instance pool
            times.append(time.perf_counter() - start)
        if b'"isError":true' in answer:
            raise SystemExit(f"the call failed: {answer[:300]}")
    proc.stdin.close()
    proc.wait(30)
    return statistics.median(times)


def batch_run(binary, env, batch) -> tuple[float, float, str]:
    """The wall time and CPU time (all threads) of one `warden run`, and what it lost."""
    before = os.times()
    start = time.perf_counter()
    p = subprocess.run([binary, "run", "-"], env=env, input=batch, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    answers = json.loads(p.stdout)
    if any(a["status"] != "success" for a in answers):
        raise SystemExit(f"warden run failed: {p.stderr[-2000:]}")
    lost = re.findall(r"not delivered to \S+ (\d+ of \d+ spans)", p.stderr)
    return wall, cpu, lost[-1] if lost else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="warden built from the commit before")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=10_000)
    args = ap.parse_args()
    after = os.environ.get("WARDEN_BIN", str(ROOT / "target/release/warden"))
    home = Path(tempfile.mkdtemp(prefix="warden-bench-otel-"))
    toolbox = home / "policies"
    toolbox.mkdir()
    component = ROOT / "target/wasm32-wasip2/release/trivial.wasm"
    (toolbox / "trivial.toml").write_text(f'[executor]\nkind = "wasm"\ncomponent = "{component}"\n')
    base = {**os.environ, "WARDEN_TOOLBOX": str(toolbox), "WARDEN_HOME": str(home / "home"),
            "RUST_LOG": "warn", "NO_COLOR": "1"}
    base.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    live_port, dead_port = free_port(), free_port()
    receiver = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/python/otlp_receiver.py"), str(live_port)],
        stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    servers = {
        "before (no telemetry)": (args.before, base),
        "off": (after, base),
        "on, live receiver": (after, {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{live_port}"}),
        "on, dead receiver": (after, {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{dead_port}"}),
    }
    batch = json.dumps([{"id": f"c{i}", "name": "add", "args": {"a": i, "b": 1}}
                        for i in range(args.batch)])
    for binary, env in servers.values():  # compile the component into each cache once
        subprocess.run([binary, "call", "add", '{"a":1,"b":2}'], env=env, capture_output=True)
    mcp = {k: [] for k in servers}
    run = {k: [] for k in servers}
    cpu = {k: [] for k in servers}
    losses = {k: "" for k in servers}
    for r in range(args.rounds):
        for name, (binary, env) in servers.items():
            mcp[name].append(mcp_round_trip(binary, env, args.calls))
            wall, used, lost = batch_run(binary, env, batch)
            run[name].append(wall)
            cpu[name].append(used)
            losses[name] = lost or losses[name]
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    receiver.send_signal(2)
    took = receiver.communicate(timeout=30)[0].strip()

    def ratio(samples, name):
        return statistics.median(a / b for a, b in zip(samples[name], samples["before (no telemetry)"]))

    print(f"\nMCP stdio round trip (median of {args.calls} calls; median over {args.rounds} rounds) "
          f"and `warden run` of {args.batch} calls (wall), each beside the build before:\n")
    print("| Build | MCP round trip | × before | `warden run` wall | × before | CPU a call | not delivered |")
    print("|---|---|---|---|---|---|---|")
    for name in servers:
        m, w = statistics.median(mcp[name]), statistics.median(run[name])
        per_call = statistics.median(cpu[name]) / args.batch
        print(f"| {name} | {m * 1e6:.0f} µs | {ratio(mcp, name):.3f} | {w * 1e3:.0f} ms "
              f"| {ratio(run, name):.3f} | {per_call * 1e6:.1f} µs | {losses[name] or '—'} |")
    print(f"\nthe live receiver took: {took}")


if __name__ == "__main__":
    main()
