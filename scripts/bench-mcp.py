#!/usr/bin/env python3
"""Benchmarks `warden serve` over stdio (not run in CI; tests never assert speed).

1. Round trip of the trivial tools: median and p99 over --calls calls, from the official Python
   MCP SDK client (`ClientSession.call_tool`; for `add` it also checks the structured result
   against the output schema, `noop` has none) and, for `add`, from a bare client writing JSON
   lines, which shows what the server itself costs.
   Beside it, the floor: the same bare client against a trivial Python server that answers
   each line with a canned result (what echoing JSON costs, nothing sandboxed); and the
   sandboxed floor: a minimal Rust server, `cargo run --example sandboxed-echo -p
   warden-wasm`, which answers each call from a fresh instance under warden's engine settings
   and appends a log record first (what no sandboxed call can skip, and nothing more).
2. Process start to the first `tools/call` answer with the compiled components cached: median
   of --starts starts, the bare client writing initialize, initialized and tools/call at once.

Usage (from the repository root, after `cargo build --release` and building guest-sdk):
    "$(scripts/py-venv)/bin/python" scripts/bench-mcp.py [--calls 1000] [--starts 20]
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

ROOT = Path(__file__).resolve().parents[1]
ADD = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
       "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


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


# The floor: reads a JSON line, answers it with the result warden gives `add(1, 2)`.
TRIVIAL_SERVER = r"""
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "trivial", "version": "0"}}
    else:
        a = m["params"]["arguments"]
        n = a["a"] + a["b"]
        result = {"content": [{"type": "text", "text": str(n)}],
                  "structuredContent": {"result": n}, "isError": False}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


def start_raw(command, env):
    return subprocess.Popen(command, env={**os.environ, **env},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def send(proc, message):
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def receive(proc, id):
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("warden serve exited")
        message = json.loads(line)
        if message.get("id") == id:
            return message


def raw_round_trips(command, env, calls):
    proc = start_raw(command, env)
    send(proc, INIT)
    receive(proc, 1)
    send(proc, INITIALIZED)
    times = []
    for i in range(calls + 50):
        call = dict(ADD, id=100 + i)
        start = time.perf_counter()
        send(proc, call)
        answer = receive(proc, 100 + i)
        if i >= 50:
            times.append(time.perf_counter() - start)
        assert answer["result"]["structuredContent"] == {"result": 3}, answer
    proc.stdin.close()
    proc.wait()
    return times


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
    parser.add_argument("--calls", type=int, default=1000)
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
        warden = raw_round_trips([str(binary), "serve"], env, args.calls)
        floor = raw_round_trips([sys.executable, "-c", TRIVIAL_SERVER], env, args.calls)
        sandboxed = raw_round_trips([str(echo), str(component), str(Path(tmp) / "echo.jsonl")],
                                    env, args.calls)
        summary("round trip, bare JSON-lines client", warden)
        summary("the floor: same client, trivial Python server", floor)
        summary("the sandboxed floor: minimal Rust server", sandboxed)
        print(f"{'warden / floor (medians)':<44} {statistics.median(warden) / statistics.median(floor):.2f}x")
        print(f"{'warden / sandboxed floor (medians)':<44} "
              f"{statistics.median(warden) / statistics.median(sandboxed):.2f}x")
        summary("start to first tools/call answer (cached)", starts(binary, env, args.starts))


if __name__ == "__main__":
    main()
