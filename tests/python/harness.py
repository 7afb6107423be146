"""The MCP tests' harness: the warden binary, toolboxes in temp dirs, and MCP sessions over
stdio and streamable HTTP with the official Python SDK as the client."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
WASM = ROOT / "target" / "wasm32-wasip2" / "release"
# Compiled components are cached across tests (and runs): each fixture compiles once.
CACHE = ROOT / "target" / "warden-pytest-cache"


class QuietHandler(BaseHTTPRequestHandler):
    """A test server's request handler: no log lines, and `answer` for a whole reply."""

    def answer(self, body: bytes, content_type: str | None = None, status: int = 200) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """`handler` served on 127.0.0.1 from a thread of its own; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def warden_bin() -> Path:
    path = Path(os.environ.get("WARDEN_BIN", ROOT / "target" / "debug" / "warden"))
    if not path.is_absolute():
        path = ROOT / path
    if not path.is_file():
        pytest.fail(f"no warden binary at {path}: run `cargo build` (or set WARDEN_BIN)")
    return path


class Toolbox:
    """A toolbox folder and a warden home in a temp dir."""

    def __init__(self, root: Path):
        self.root = root
        self.dir = root / "policies"
        self.dir.mkdir()
        self.home = root / "home"
        self.stderr = root / "stderr.log"
        # More variables for warden's processes (OTEL_*, a credential's value).
        self.extra_env: dict[str, str] = {}

    def policy(self, file: str, fixture: str, rest: str = "", top: str = "") -> Path:
        """Writes a policy running `fixture`; `top` goes before [executor] (a prefix), `rest`
        after its first lines (more executor keys, then tables)."""
        component = WASM / f"{fixture}.wasm"
        if not component.is_file():
            pytest.fail(f"{component} is missing: build guest-sdk (scripts/test does)")
        path = self.dir / file
        text = f'{top}\n[executor]\nkind = "wasm"\ncomponent = "{component}"\n{rest}\n'
        path.write_text(text)
        return path

    def env(self) -> dict[str, str]:
        # The MCP SDK starts a stdio server with these alone (and PATH, HOME and the like):
        # the switch of stdio's direct path is handed on, so scripts/test can run the tests
        # with it off.
        switch = os.environ.get("WARDEN_MCP_DIRECT")
        direct = {} if switch is None else {"WARDEN_MCP_DIRECT": switch}
        return {
            "WARDEN_TOOLBOX": str(self.dir),
            "WARDEN_HOME": str(self.home),
            "WARDEN_CACHE": str(CACHE),
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
            **direct,
            **self.extra_env,
        }

    def call_log(self) -> str:
        path = self.home / "calls.jsonl"
        return path.read_text() if path.exists() else ""


@contextlib.contextmanager
def http_server(box: Toolbox, *extra: str, token: str | None = ""):
    """`warden serve --http 127.0.0.1:0`; yields (url, token) once it listens. The token is a
    fresh one by default; with `token=None` warden generates one and prints it."""
    env = {**os.environ, **box.env()}
    env.pop("WARDEN_MCP_TOKEN", None)
    if token == "":
        token = secrets.token_hex(24)
    if token is not None:
        env["WARDEN_MCP_TOKEN"] = token
    with open(box.stderr, "wb") as err:
        proc = subprocess.Popen(
            [str(warden_bin()), "serve", "--http", "127.0.0.1:0", *extra],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            text = box.stderr.read_text(errors="replace")
            found = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", text)
            printed = re.search(r"bearer token: ([0-9a-f]+)", text)
            if found and (token is not None or printed):
                yield found.group(1), token if token is not None else printed.group(1)
                break
            if proc.poll() is not None:
                pytest.fail(f"warden serve --http exited: {text}")
            if time.monotonic() > deadline:
                pytest.fail(f"warden serve --http did not start: {text}")
            time.sleep(0.02)
        assert proc.poll() is None, "the server died during the test: " + box.stderr.read_text()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def session(transport: str, box: Toolbox, **session_args):
    """An initialised ClientSession to a fresh `warden serve` over `transport`."""
    if transport == "stdio":
        params = StdioServerParameters(command=str(warden_bin()), args=["serve"], env=box.env())
        with open(box.stderr, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, **session_args) as s:
                    await s.initialize()
                    yield s
    elif transport == "http":
        with http_server(box) as (url, token):
            async with connect(url, token, **session_args) as s:
                yield s
    else:
        raise ValueError(transport)


@contextlib.asynccontextmanager
async def connect(url: str, token: str, **session_args):
    """An initialised ClientSession on a running `warden serve --http`: one connection, so one
    warden session; leaving the block ends it (the client deletes its MCP session)."""
    async with connect_with_id(url, token, **session_args) as (s, _):
        yield s


@contextlib.asynccontextmanager
async def connect_with_id(url: str, token: str, **session_args):
    """As `connect`, and the session's `Mcp-Session-Id` the server gave it."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx.Timeout(30, read=300)
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as client:
        async with streamable_http_client(url, http_client=client) as (read, write, session_id):
            async with ClientSession(read, write, **session_args) as s:
                await s.initialize()
                yield s, session_id()


async def wait_for(predicate, timeout: float = 20.0, every: float = 0.05):
    """Waits until predicate() is true; fails after `timeout` seconds."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(every)


HOST_SHELL = "/bin/bash"


def host_shell_policy(uid: int, workspace: Path) -> str:
    """A host session shell (`host-shell`) run as `uid`, with `workspace` granted read-only."""
    return f"""
[executor]
kind = "host"
name = "host-shell"
argv = ["{HOST_SHELL}", "-c", "{{command}}"]
session = true
user = "{uid}:{uid}"
processes = 32
tmp = "16MiB"

[grants]
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin" }}
fs = [{{ host = "{workspace}", access = "read-only" }}]

[limits]
timeout = "20s"
"""


def processes_of(uid: int) -> list[int]:
    """Pids of the processes whose owner is `uid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def processes_in(namespaces: set[str]) -> list[int]:
    """Pids of the processes in any of these PID namespaces (`init` included)."""
    return [
        int(e) for e in os.listdir("/proc") if e.isdigit() and pid_namespace(int(e)) in namespaces
    ]
