"""One side-by-side run of langchain-warden's costs against their floors and against
langchain-mcp-adapters at its defaults.

    WARDEN_BIN=target/release/warden python python/langchain-warden/benchmarks/bench.py

Run from the root of a warden checkout with the guest components built (scripts/test builds
them), in a venv holding langchain-warden, its test requirements and, for the adapter's row,
`pip install langchain-mcp-adapters==0.3.2`. It prints a Markdown table: per call or command,
the median and p90 over the runs after a warm-up.

- a tool call (`add` of the trivial fixture, a wasm tool) invoked with a ToolCall, in
  interleaved rounds (each round's toolkit/bare ratio goes to stderr): a plain `@tool` Python
  function (the floor), LangChain alone (a JSON Schema tool answering a constant),
  `WardenToolkit`, the same `tools/call` on langchain-warden's MCP
  connection without LangChain, and MCP's bare round trip (a JSON-lines client on a `warden
  serve` of its own); then langchain-mcp-adapters' tool at its defaults (a `warden serve` per
  call);
- `execute("true")`: deepagents' unsandboxed `LocalShellBackend` (the floor) and
  `WardenSandbox` on the host shell and, when Docker answers, the Debian docker shell.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, tool

from langchain_warden import WardenSandbox, WardenToolkit

ROOT = Path.cwd()
WASM = ROOT / "target" / "wasm32-wasip2" / "release"


def measure(
    run: Callable[[], object], count: int, warmup: int = 20, apart: float = 0.0
) -> tuple[float, float]:
    """`run`'s median and p90 over `count` runs after `warmup`; `apart` seconds of rest before
    each timed run, outside its time."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(count):
        time.sleep(apart)
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def interleaved(
    runs: dict[str, Callable[[], object]], rounds: int = 5, count: int = 400
) -> list[tuple[str, float, float]]:
    """Each run's median and p90 over `rounds` rounds that take turns (a machine that slows
    down slows them alike); the toolkit's ratio to the bare round trip is printed per round."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, run in runs.items():
        measure(run, 1, warmup=200)
    for _ in range(rounds):
        medians = {}
        for name, run in runs.items():
            samples = []
            for _ in range(count):
                started = time.perf_counter()
                run()
                samples.append(time.perf_counter() - started)
            times[name] += samples
            medians[name] = statistics.median(samples)
        toolkit, bare = medians["`WardenToolkit` tool"], list(medians.values())[-1]
        ratio = toolkit / bare
        print(f"round: toolkit {fmt(toolkit)}, bare {fmt(bare)}, {ratio:.2f}×", file=sys.stderr)
    rows = []
    for name, samples in times.items():
        samples.sort()
        rows.append((name, statistics.median(samples), samples[int(len(samples) * 0.9)]))
    return rows


class Constant(BaseTool):
    """What LangChain's invoke costs on its own: a tool with warden's JSON Schema (so no
    pydantic model, as the toolkit's) whose run answers at once."""

    name: str = "add"
    description: str = "Adds two numbers."

    def _run(self, **arguments: Any) -> Any:
        return "5"


class BareClient:
    """MCP's bare round trip: a `warden serve` of its own, JSON-RPC lines written and read on
    the caller's thread, nothing else."""

    def __init__(self, box: Path) -> None:
        from langchain_warden import find_warden

        self.proc = subprocess.Popen(
            [find_warden(), "serve", "--toolbox", str(box)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.id = 0
        self.send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "0"}})
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def send(self, method: str, params: dict) -> dict:
        self.id += 1
        line = {"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(line) + "\n").encode())
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def call(self, name: str, arguments: dict) -> dict:
        return self.send("tools/call", {"name": name, "arguments": arguments})

    def __enter__(self) -> "BareClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def toolbox(base: Path) -> Path:
    box = base / "policies"
    box.mkdir()
    (base / "workspace").mkdir()
    wit = ROOT / "guest-sdk" / "fixtures" / "trivial" / "wit"
    (box / "trivial.toml").write_text(
        f'[executor]\nkind = "wasm"\ncomponent = "{WASM / "trivial.wasm"}"\nwit = "{wit}"\n'
    )
    for name in ("shell-host.toml", "shell-docker.toml"):
        shutil.copy(ROOT / "policies" / name, box / name)
    return box


def docker_ok() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main() -> None:
    rows: list[tuple[str, float, float]] = []
    args = {"a": 2, "b": 3}
    target = ROOT / "target"
    base = Path(tempfile.mkdtemp(prefix="bench-langchain-", dir=target))
    base.chmod(0o755)
    try:
        box = toolbox(base)
        os.environ.setdefault("WARDEN_HOME", str(base / "home"))

        @tool
        def add(a: int, b: int) -> int:
            """Adds two numbers."""
            return a + b

        n = 0

        def tool_call(name: str) -> dict:
            nonlocal n
            n += 1
            return {"type": "tool_call", "name": name, "args": args, "id": f"b{n}"}

        with WardenToolkit(toolbox=box) as kit, BareClient(box) as bare:
            warden_add = {t.name: t for t in kit.get_tools()}["add"]
            constant = Constant(args_schema=warden_add.args_schema)
            assert warden_add.invoke(tool_call("add")).status == "success"
            same_call = {"name": "add", "arguments": args}
            rows += interleaved(
                {
                    "`@tool` Python function (floor)": lambda: add.invoke(tool_call("add")),
                    "LangChain alone: a JSON Schema `BaseTool` answering a constant": lambda: (
                        constant.invoke(tool_call("add"))
                    ),
                    "`WardenToolkit` tool": lambda: warden_add.invoke(tool_call("add")),
                    "the same `tools/call` on the toolkit's connection, no LangChain": lambda: (
                        kit.process.request("tools/call", same_call)
                    ),
                    "MCP's bare round trip (a JSON-lines client on its own `warden serve`)": (
                        lambda: bare.call("add", args)
                    ),
                },
            )
        try:
            from langchain_mcp_adapters.client import MultiServerMCPClient
        except ImportError:
            print("(langchain-mcp-adapters is not installed: its row is left out)", file=sys.stderr)
        else:
            from langchain_warden import find_warden

            client = MultiServerMCPClient(
                {
                    "warden": {
                        "command": find_warden(),
                        "args": ["serve", "--toolbox", str(box)],
                        "transport": "stdio",
                    }
                }
            )
            adapter_tools = {t.name: t for t in asyncio.run(client.get_tools())}
            adapter_add = adapter_tools["add"]
            rows.append(
                (
                    "langchain-mcp-adapters at its defaults (a process per call)",
                    *measure(
                        lambda: asyncio.run(adapter_add.ainvoke(tool_call("add"))), 50, warmup=3
                    ),
                )
            )

        from deepagents.backends import LocalShellBackend

        local = LocalShellBackend(root_dir=str(base / "workspace"), virtual_mode=False)
        rows.append(
            (
                '`execute("true")`: `LocalShellBackend` (floor)',
                *measure(lambda: local.execute("true"), 300),
            )
        )
        with WardenSandbox(tool="host-shell", toolbox=box) as sandbox:
            rows.append(
                (
                    '`execute("true")`: `WardenSandbox`, host shell',
                    *measure(lambda: sandbox.execute("true"), 300),
                )
            )
        if docker_ok():
            with WardenSandbox(tool="shell", toolbox=box) as sandbox:
                rows.append(
                    (
                        '`execute("true")`: `WardenSandbox`, Debian docker shell',
                        *measure(lambda: sandbox.execute("true"), 300),
                    )
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print("| what | median | p90 |")
    print("|---|---|---|")
    for name, median, p90 in rows:
        print(f"| {name} | {fmt(median)} | {fmt(p90)} |")


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
