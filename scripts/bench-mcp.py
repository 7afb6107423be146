#!/usr/bin/env python3
"""Benchmarks `warden serve` over stdio (not run in CI; tests never assert speed).

1. Round trip of the trivial tools: median and p99 over --calls calls, from the official Python
   MCP SDK client (`ClientSession.call_tool`; for `add` it also checks the structured result
   against the output schema, `noop` has none).
2. The same `add` from a bare client writing JSON lines, which shows what the server itself
   costs, beside its floors in the same minutes: --rounds rounds, each starting every server
   afresh and taking --calls calls from each in turn, so a machine that slows down between
   rounds slows all of them alike. Each ratio is taken within a round. The servers:
   - the floor: a trivial Python server that answers each line with warden's answer to
     `add(1, 2)`, read from warden once before the rounds (the same bytes both ways, so the
     client's share is the same; what echoing JSON costs, nothing sandboxed);
   - the same server answering without warden's `_meta` usage (the result alone, as warden
     answered before every answer carried its usage): what the longer answer costs on both
     sides of the pipe;
   - the sandboxed floor: a minimal Rust server, `cargo run --example sandboxed-echo -p
     warden-wasm`, which answers each call with warden's answer as well, from a fresh
     instance under warden's engine settings, and appends a log record first (what no
     sandboxed call can skip, and nothing more).
   Beside each round trip, the server's CPU a call (all its threads, from /proc's schedstat).
3. Process start to the first `tools/call` answer with the compiled components cached: median
   of --starts starts, the bare client writing initialize, initialized and tools/call at once.

Usage (from the repository root, after `cargo build --release` and building guest-sdk):
    "$(scripts/py-venv)/bin/python" scripts/bench-mcp.py [--calls 3000] [--rounds 5] [--starts 20]
(scripts/py-venv makes or reuses target/py-venv, which has the MCP SDK.)
WARDEN_BIN names the binary (default target/release/warden).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_lines import (ADD, INIT, INITIALIZED, TRIVIAL_SERVER, percentile, raw_round_trips,
                       receive, send, start_raw, warden_result)

ROOT = Path(__file__).resolve().parents[1]


def summary(name, seconds):
    ms = [s * 1000 for s in seconds]
    print(f"{name:<44} median {statistics.median(ms):7.3f} ms   p99 {percentile(ms, 99):7.3f} ms"
          f"   (n={len(ms)})")


async def sdk_round_trips(binary, env, calls, tool):
    """`add` has an output schema, which the SDK checks on every call; `noop` has none."""
    params = StdioServerParameters(command=str(binary), args=["serve"], env=env)
    arguments = {"a": 1, "b": 2} if tool == "add" else {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for _ in range(50):
                await s.call_tool(tool, arguments)
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                result = await s.call_tool(tool, arguments)
                times.append(time.perf_counter() - start)
                assert not result.isError, result
    return times


def interleaved(servers, env, calls, rounds):
    """Each server's round-trip medians and CPU a call, round by round, servers in turn, and
    its p99 over every round's calls."""
    results = {name: [] for name in servers}
    samples = {name: [] for name in servers}
    for _ in range(rounds):
        for name, command in servers.items():
            times, cpu = raw_round_trips(command, env, calls)
            results[name].append((statistics.median(times), cpu))
            samples[name] += times
    return results, {name: percentile(times, 99) for name, times in samples.items()}


def spread(values, unit=1e6, fmt="{:.1f}"):
    """The median of `values`, then their range: "44.1 (43.5–46.2)"."""
    low, mid, high = (fmt.format(v * unit) for v in
                      (min(values), statistics.median(values), max(values)))
    return f"{mid} ({low}–{high})"


def starts(binary, env, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        proc = start_raw([str(binary), "serve"], env)
        send(proc, INIT)
        send(proc, INITIALIZED)
        send(proc, ADD)
        answer = receive(proc, 2)
        times.append(time.perf_counter() - start)
        assert answer["result"]["structuredContent"] == {"result": 3}, answer
        proc.stdin.close()
        proc.wait()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starts", type=int, default=20)
    args = parser.parse_args()
    binary = Path(os.environ.get("WARDEN_BIN", ROOT / "target" / "release" / "warden"))
    component = ROOT / "target" / "wasm32-wasip2" / "release" / "trivial.wasm"
    subprocess.run(["cargo", "build", "--release", "--locked", "-q", "-p", "warden-wasm",
                    "--example", "sandboxed-echo"], cwd=ROOT, check=True)
    echo = ROOT / "target" / "release" / "examples" / "sandboxed-echo"
    for needed in (binary, component):
        if not needed.is_file():
            sys.exit(f"{needed} is missing: cargo build --release, and build guest-sdk")
    with tempfile.TemporaryDirectory() as tmp:
        toolbox = Path(tmp) / "policies"
        toolbox.mkdir()
        (toolbox / "trivial.toml").write_text(
            f'[executor]\nkind = "wasm"\ncomponent = "{component}"\n')
        env = {"WARDEN_TOOLBOX": str(toolbox), "WARDEN_HOME": str(Path(tmp) / "home"),
               "RUST_LOG": "error"}
        starts(binary, env, 1)  # compiles trivial.wasm into the cache
        print(f"warden serve over stdio: {binary}")
        for tool in ("add", "noop"):
            times = anyio.run(sdk_round_trips, binary, env, args.calls, tool)
            summary(f"round trip, Python SDK call_tool({tool})", times)
        floor = [sys.executable, "-c", TRIVIAL_SERVER]
        answer = json.dumps(warden_result(binary, env))
        servers = {
            "warden": [str(binary), "serve"],
            "the floor: trivial Python server": floor + [answer],
            "the same, answering without the usage": floor,
            "the sandboxed floor: minimal Rust server":
                [str(echo), str(component), str(Path(tmp) / "echo.jsonl"), answer],
        }
        results, p99 = interleaved(servers, env, args.calls, args.rounds)
        print(f"bare JSON-lines client, {args.rounds} rounds of {args.calls} calls; the median "
              "of the rounds' medians (their range):")
        base = [median for median, _ in results["warden"]]
        for name, rounds in results.items():
            medians = [median for median, _ in rounds]
            cpus = [cpu for _, cpu in rounds if cpu is not None]
            print(f"  {name:<42} {spread(medians)} µs   p99 {p99[name] * 1e6:.1f} µs")
            if name != "warden":
                ratios = [w / m for w, m in zip(base, medians)]
                print(f"  {'':<42} warden / this, round by round: {spread(ratios, 1, '{:.2f}')}x")
            if cpus:
                print(f"  {'':<42} server CPU a call: {spread(cpus)} µs")
        summary("start to first tools/call answer (cached)", starts(binary, env, args.starts))


if __name__ == "__main__":
    main()
