"""The bare JSON-lines MCP client the benchmarks share (scripts/bench-mcp.py and
scripts/bench-guard): a server started with a pipe each way, `tools/call` of the trivial
fixture's `add` timed from request to answer, the server's CPU a call from /proc, and the
floor: a trivial Python server answering each call with warden's own bytes."""

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

ADD = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
       "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# The floor: reads a JSON line, answers it with the result warden gives `add(1, 2)`: the
# result its argument holds (warden's, `_meta` and all) with the sum put in, else the result
# alone.
TRIVIAL_SERVER = r"""
import json, sys
template = json.loads(sys.argv[1]) if sys.argv[1:] else {}
# Compact, as warden writes; made once, as json.dumps's own default encoder is.
dumps = json.JSONEncoder(separators=(",", ":")).encode
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
        result = {**template, "content": [{"type": "text", "text": str(n)}],
                  "structuredContent": {"result": n}, "isError": False}
    sys.stdout.write(dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


def start_raw(command, env, stderr=subprocess.DEVNULL):
    return subprocess.Popen(command, env={**os.environ, **env},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)


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


def server_cpu(pid):
    """CPU time of every thread of process `pid` so far, in seconds (None off Linux)."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return None
    total = 0
    for task in tasks.iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    return total / 1e9


def raw_round_trips(command, env, calls, beside=None):
    """Round trips of `calls` calls after 300 to warm up, and the server's CPU a call. With
    `beside`, a context manager made of the server's process (its stderr a pipe) holds while
    the calls run."""
    proc = start_raw(command, env, subprocess.DEVNULL if beside is None else subprocess.PIPE)
    send(proc, INIT)
    receive(proc, 1)
    send(proc, INITIALIZED)
    times = []
    with beside(proc) if beside else contextlib.nullcontext():
        for i in range(calls + 300):
            if i == 300:
                cpu = server_cpu(proc.pid)
            call = dict(ADD, id=100 + i)
            start = time.perf_counter()
            send(proc, call)
            answer = receive(proc, 100 + i)
            if i >= 300:
                times.append(time.perf_counter() - start)
            assert answer["result"]["structuredContent"] == {"result": 3}, answer
        end = server_cpu(proc.pid)
    proc.stdin.close()
    proc.wait()
    per_call = None if cpu is None or end is None else (end - cpu) / calls
    return times, per_call


def warden_result(binary, env):
    """What warden answers to `add(1, 2)`: the floor answers the same."""
    proc = start_raw([str(binary), "serve"], env)
    send(proc, INIT)
    receive(proc, 1)
    send(proc, INITIALIZED)
    send(proc, ADD)
    result = receive(proc, 2)["result"]
    proc.stdin.close()
    proc.wait()
    return result
