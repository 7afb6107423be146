"""One side-by-side run of langchain-warden's costs against their floors and against
langchain-mcp-adapters at its defaults.

    WARDEN_BIN=target/release/warden python python/langchain-warden/benchmarks/bench.py

Run from the root of a warden checkout with the guest components built (scripts/test builds
them), in a venv holding langchain-warden, its test requirements and, for the adapter's row,
`pip install langchain-mcp-adapters==0.3.2`. It prints a Markdown table: per call or command,
the median and p90 over the runs after a warm-up.

- a tool call (`add` of the trivial fixture, a wasm tool) invoked with a ToolCall: a plain
  `@tool` Python function (the floor), `WardenToolkit`, the same `tools/call` on
  langchain-warden's MCP connection without LangChain (warden's bare round trip), and
  langchain-mcp-adapters' tool at its defaults (a `warden serve` per call);
- `execute("true")`: deepagents' unsandboxed `LocalShellBackend` (the floor) and
  `WardenSandbox` on the host shell and, when Docker answers, the Debian docker shell.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from langchain_core.tools import tool

from langchain_warden import WardenSandbox, WardenToolkit

ROOT = Path.cwd()
WASM = ROOT / "target" / "wasm32-wasip2" / "release"


def measure(run: Callable[[], object], count: int, warmup: int = 20) -> tuple[float, float]:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


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

        rows.append(
            (
                "`@tool` Python function (floor)",
                *measure(lambda: add.invoke(tool_call("add")), 2000),
            )
        )
        with WardenToolkit(toolbox=box) as kit:
            warden_add = {t.name: t for t in kit.get_tools()}["add"]
            assert warden_add.invoke(tool_call("add")).status == "success"
            rows.append(
                (
                    "`WardenToolkit` tool",
                    *measure(lambda: warden_add.invoke(tool_call("add")), 2000),
                )
            )
            bare = {"name": "add", "arguments": args}
            rows.append(
                (
                    "the same `tools/call`, no LangChain (warden's round trip)",
                    *measure(lambda: kit.process.request("tools/call", bare), 2000),
                )
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
