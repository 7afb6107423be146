"""Several `warden serve --http` replicas behind haproxy, run with the repository's own
examples/haproxy.cfg: new sessions and stateless calls spread over both replicas, a session
stays on its replica (its shell keeps `cd`), a client's DELETE ends its session, and killing
a replica ends only its sessions, each with a clean error, and leaves none of their
processes behind.

The official MCP client speaks the session protocol versions; a stateless call is the
2026-07-28 kind, which carries its protocol version in every request and no session, and is
sent raw here."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.shared.exceptions import McpError

from harness import (
    HOST_SHELL,
    ROOT,
    connect_with_id,
    host_shell_policy,
    processes_in,
    processes_of,
    Toolbox,
    wait_for,
    warden_bin,
)

pytestmark = pytest.mark.anyio

HAPROXY = Path("/usr/sbin/haproxy")
CONFIG = ROOT / "examples" / "haproxy.cfg"
SHELL = HOST_SHELL
# The shell runs as a user of this test's own: its processes are this test's only.
UID = 65480
STATELESS = "2026-07-28"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[0]} exited: {log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            pytest.fail(f"{proc.args[0]} does not listen on {port}: {log.read_text()}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Replica:
    """One `warden serve --http` on a port of its own, with a warden home (and call log) of
    its own, over the shared toolbox."""

    def __init__(self, name: str, box: Toolbox, token: str, root: Path):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.home = root / f"home-{name}"
        self.log = root / f"replica-{name}.log"
        env = {**os.environ, **box.env(), "WARDEN_HOME": str(self.home)}
        env["WARDEN_MCP_TOKEN"] = token
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [str(warden_bin()), "serve", "--http", f"127.0.0.1:{self.port}"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        wait_listening(self.port, self.proc, self.log)

    def calls(self, tool: str) -> int:
        """Calls of `tool` in this replica's call log (complete once it has stopped)."""
        path = self.home / "calls.jsonl"
        text = path.read_text() if path.exists() else ""
        return len(re.findall(rf'"tool":"{re.escape(tool)}"', text))

    def holds(self, session_id: str, token: str) -> bool:
        """Whether this replica holds the session, asked directly: 404 says it does not."""
        answer = httpx.post(
            self.url,
            json={"jsonrpc": "2.0", "id": "probe", "method": "ping"},
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "Mcp-Session-Id": session_id,
                "MCP-Protocol-Version": "2025-06-18",
            },
            timeout=30,
        )
        assert answer.status_code in (200, 404), (answer.status_code, answer.text)
        return answer.status_code == 200


DOCKER_SHELL = """
[executor]
kind = "docker"
name = "docker-shell"
image = "warden-sandbox:latest"
argv = ["/bin/sh", "-c", "{command}"]
session = true
"""


class Cluster:
    """Two replicas with one token behind haproxy, run with examples/haproxy.cfg."""

    def __init__(self, root: Path):
        if not HAPROXY.is_file():
            if os.environ.get("CI") == "true":
                pytest.fail(f"{HAPROXY} is missing (.ci/run installs Debian's haproxy)")
            pytest.skip(f"{HAPROXY} is not installed (Debian: apt-get install haproxy)")
        if not Path(SHELL).is_file():
            pytest.skip(f"{SHELL} is not installed")
        assert processes_of(UID) == [], f"user {UID} already runs processes"
        self.token = "r" * 40
        self.box = Toolbox(root)
        wit = ROOT / "guest-sdk" / "fixtures" / "trivial" / "wit"
        self.box.policy("trivial.toml", "trivial", f'wit = "{wit}"')
        self.workspace = Path(tempfile.mkdtemp())
        self.workspace.chmod(0o755)
        (self.box.dir / "host-shell.toml").write_text(host_shell_policy(UID, self.workspace))
        # Loading never reaches the engine: the tests that use it check for one first.
        (self.box.dir / "docker-shell.toml").write_text(DOCKER_SHELL)
        self.procs: list[subprocess.Popen] = []
        self.a = Replica("a", self.box, self.token, root)
        self.procs.append(self.a.proc)
        self.b = Replica("b", self.box, self.token, root)
        self.procs.append(self.b.proc)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.haproxy_log = root / "haproxy.log"
        env = {
            **os.environ,
            "WARDEN_LB_BIND": f"127.0.0.1:{port}",
            "WARDEN_REPLICA_A": f"127.0.0.1:{self.a.port}",
            "WARDEN_REPLICA_B": f"127.0.0.1:{self.b.port}",
        }
        with open(self.haproxy_log, "wb") as out:
            haproxy = subprocess.Popen(
                [str(HAPROXY), "-db", "-f", str(CONFIG)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(haproxy)
        wait_listening(port, haproxy, self.haproxy_log)

    def replica_of(self, session_id: str) -> Replica:
        live = [r for r in (self.a, self.b) if r.proc.poll() is None]
        holders = [r for r in live if r.holds(session_id, self.token)]
        assert len(holders) == 1, f"session {session_id} is held by {len(holders)} replicas"
        return holders[0]

    def stop(self):
        for proc in reversed(self.procs):
            stop(proc)
        shutil.rmtree(self.workspace, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


async def shell(s, command: str):
    return await s.call_tool("host-shell", {"command": command})


def body(result) -> str:
    """What a successful command printed, without its exit-code line."""
    assert result.isError is False, result.content[0].text
    return result.content[0].text.removesuffix("[exit code 0]").strip()


async def stateless_call(url: str, token: str, tool: str, arguments: dict) -> str:
    """One `tools/call` the 2026-07-28 way: the protocol version in the request, no session,
    no Mcp-Session-Id. Answers the result's text."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": STATELESS,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta},
    }
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(url, json=call, headers=headers)
    assert answer.status_code == 200, answer.text
    assert "mcp-session-id" not in answer.headers
    event = next(line for line in answer.text.splitlines() if line.startswith("data: {"))
    result = json.loads(event.removeprefix("data: "))["result"]
    assert result["isError"] is False, result
    return result["content"][0]["text"] if result["content"] else ""


async def test_calls_spread_over_two_replicas_and_a_session_stays_on_its_own(cluster, caplog):
    caplog.set_level(logging.WARNING)
    sessions, calls, stateless = 10, 100, 20
    held: dict[str, list[int]] = {"a": [], "b": []}

    async def run(k: int):
        async with connect_with_id(cluster.url, cluster.token) as (s, session_id):
            assert body(await shell(s, f"mkdir /tmp/s{k} && cd /tmp/s{k} && echo in")) == "in"
            held[cluster.replica_of(session_id).name].append(k)
            # 1 + 9 shell commands and 90 additions: the shell keeps its directory throughout.
            for i in range(calls - 1):
                if i % 10 == 9:
                    assert body(await shell(s, "pwd")) == f"/tmp/s{k}"
                else:
                    result = await s.call_tool("add", {"a": k, "b": i})
                    assert result.structuredContent == {"result": k + i}, result

    async with anyio.create_task_group() as group:
        for k in range(sessions):
            group.start_soon(run, k)
    for _ in range(stateless):
        await stateless_call(cluster.url, cluster.token, "noop", {})
    # A stateless call of a session shell gets a fresh shell, which ends with the call.
    fresh = await stateless_call(
        cluster.url, cluster.token, "host-shell", {"command": "sleep 300 >/dev/null 2>&1 & pwd"}
    )
    assert fresh.removesuffix("[exit code 0]").strip() == str(cluster.workspace)
    # Every session ended with its client's DELETE, which the client accepted.
    failed = [r.getMessage() for r in caplog.records if "termination failed" in r.getMessage()]
    assert failed == []
    await wait_for(lambda: processes_of(UID) == [], timeout=10)
    for replica in (cluster.a, cluster.b):
        stop(replica.proc)
    print("sessions held:", held)
    a, b = cluster.a, cluster.b
    assert held["a"] and held["b"], "both replicas hold sessions"
    assert (a.calls("add"), b.calls("add")) == (90 * len(held["a"]), 90 * len(held["b"]))
    shell_calls = sorted(
        (a.calls("host-shell") - 10 * len(held["a"]), b.calls("host-shell") - 10 * len(held["b"]))
    )
    assert shell_calls == [0, 1], "10 per session, and the stateless one"
    assert a.calls("noop") > 0 and b.calls("noop") > 0, "both replicas answer stateless calls"
    assert a.calls("noop") + b.calls("noop") == stateless


async def test_killing_a_replica_ends_only_its_sessions(cluster):
    async with contextlib.AsyncExitStack() as stack:
        # (k, session, its id, its replica, its shell's PID namespace)
        opened = []
        for k in range(4):
            s, session_id = await stack.enter_async_context(
                connect_with_id(cluster.url, cluster.token)
            )
            where = f"mkdir /tmp/s{k}; cd /tmp/s{k}; readlink /proc/self/ns/pid"
            namespace = body(await shell(s, where))
            assert processes_in({namespace}), namespace
            opened.append((k, s, session_id, cluster.replica_of(session_id), namespace))
        on_b = [o for o in opened if o[3] is cluster.b]
        on_a = [o for o in opened if o[3] is cluster.a]
        assert on_a and on_b, "round robin puts new sessions on both replicas"

        # A call running on B when it dies. The official client (1.30) resumes its stream on
        # the live replica, which answers 404, then gives up without answering the call
        # (python-sdk issue 1577): the client's read timeout ends it.
        _, running, _, _, namespace = on_b[0]
        late: list[McpError] = []

        async def sleep():
            try:
                command = {"command": "sleep 120"}
                await running.call_tool("host-shell", command, timedelta(seconds=8))
            except McpError as e:
                late.append(e)

        idle = len(processes_in({namespace}))
        async with anyio.create_task_group() as group:
            group.start_soon(sleep)
            # The sleep runs: the call has reached B.
            await wait_for(lambda: len(processes_in({namespace})) > idle)
            cluster.b.proc.send_signal(signal.SIGKILL)
            cluster.b.proc.wait()
        assert len(late) == 1 and "Timed out" in str(late[0]), late
        for _, s, session_id, _, namespace in on_b:
            # haproxy sends the request to the live replica, which holds no such session: 404,
            # which the client reports as the session's end.
            with pytest.raises(McpError) as ended:
                await shell(s, "pwd")
            assert "Session terminated" in str(ended.value), ended.value
            await wait_for(lambda: processes_in({namespace}) == [], timeout=10)
            # A resumed stream of the session gets a prompt 404 too.
            headers = {"Authorization": f"Bearer {cluster.token}", "Mcp-Session-Id": session_id}
            resume = httpx.get(
                cluster.url,
                headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": "0"},
                timeout=30,
            )
            assert resume.status_code == 404, resume.text
        for k, s, _, _, namespace in on_a:
            assert body(await shell(s, "pwd")) == f"/tmp/s{k}"
            assert processes_in({namespace})
        # A new session starts on the live replica.
        async with connect_with_id(cluster.url, cluster.token) as (s, session_id):
            assert body(await shell(s, "pwd")) == str(cluster.workspace)
            assert cluster.replica_of(session_id) is cluster.a
    await wait_for(lambda: processes_of(UID) == [], timeout=10)


async def test_a_clients_delete_ends_its_session_before_it_is_answered(cluster, caplog):
    caplog.set_level(logging.WARNING)
    async with connect_with_id(cluster.url, cluster.token) as (s, session_id):
        started = "sleep 300 >/dev/null 2>&1 & readlink /proc/self/ns/pid"
        namespace = body(await shell(s, started))
        replica = cluster.replica_of(session_id)
        assert len(processes_in({namespace})) >= 2, "the shell and its sleep run"
    # Leaving the block sent the DELETE, through haproxy to the session's replica, and the
    # answer came once the session's processes were gone.
    assert processes_in({namespace}) == []
    failed = [r.getMessage() for r in caplog.records if "termination failed" in r.getMessage()]
    assert failed == []
    assert not replica.holds(session_id, cluster.token)
    headers = {"Authorization": f"Bearer {cluster.token}", "Mcp-Session-Id": session_id}
    again = httpx.delete(cluster.url, headers=headers, timeout=30)
    assert again.status_code == 404, again.text
    assert "initialize a new session" in again.text


def require_docker():
    if not docker_ok():
        if os.environ.get("CI") == "true":
            pytest.fail("no Docker engine answers (.ci/run starts one)")
        pytest.skip("no Docker engine answers")


async def test_a_killed_replicas_containers_are_removed_by_the_survivor(cluster):
    require_docker()
    async with contextlib.AsyncExitStack() as stack:
        by_replica = {}
        while len(by_replica) < 2:
            s, session_id = await stack.enter_async_context(
                connect_with_id(cluster.url, cluster.token)
            )
            replica = cluster.replica_of(session_id)
            if replica.name in by_replica:
                continue
            # Both replicas reach the engine: the survivor is already keeping its lease and
            # looking for what gone wardens left when the other dies.
            answer = await s.call_tool("docker-shell", {"command": "cd /tmp && pwd"})
            assert body(answer) == "/tmp", answer
            by_replica[replica.name] = s
        killed = cluster.b.proc.pid
        assert len(containers_of(killed)) == 1, "B's session has its container"
        cluster.b.proc.send_signal(signal.SIGKILL)
        cluster.b.proc.wait()
        with pytest.raises(McpError) as ended:
            await by_replica["b"].call_tool("docker-shell", {"command": "pwd"})
        assert "Session terminated" in str(ended.value), ended.value
        # The survivor removes the dead replica's container within a reaping period (30 s);
        # its own session is untouched.
        await wait_for(lambda: containers_of(killed) == [], timeout=90, every=1)
        answer = await by_replica["a"].call_tool("docker-shell", {"command": "pwd"})
        assert body(answer) == "/tmp", answer
        assert len(containers_of(cluster.a.proc.pid)) == 1


def test_the_docs_show_the_haproxy_config_the_tests_run():
    page = (ROOT / "docs" / "mcp.md").read_text()
    section = page.split("## Several servers behind a load balancer", 1)[1]
    shown = section.split("```\n", 2)[1]
    assert shown == CONFIG.read_text()


def docker_ok() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def containers_of(pid: int) -> list[str]:
    """Containers warden's process `pid` made: their owner label is `boot-id:pid:start`."""
    columns = '{{.ID}} {{.Label "warden.owner"}}'
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=warden", "--format", columns],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = [line.split() for line in listed.splitlines()]
    return [row[0] for row in rows if len(row) == 2 and row[1].split(":")[1:2] == [str(pid)]]


async def test_a_delete_removes_the_docker_session_container_before_it_is_answered(
    tmp_path, caplog
):
    require_docker()
    caplog.set_level(logging.WARNING)
    box = Toolbox(tmp_path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (box.dir / "shell.toml").write_text(
        f"""
[executor]
kind = "docker"
name = "shell"
image = "warden-sandbox:latest"
argv = ["/bin/sh", "-c", "{{command}}"]
workdir = "/workspace"
session = true

[grants]
fs = [{{ host = "{workspace}", guest = "/workspace", access = "read-only" }}]
"""
    )
    replica = Replica("docker", box, "d" * 40, tmp_path)
    try:
        async with connect_with_id(replica.url, "d" * 40) as (s, _):
            assert body(await s.call_tool("shell", {"command": "cd /tmp && pwd"})) == "/tmp"
            assert body(await s.call_tool("shell", {"command": "pwd"})) == "/tmp"
            assert len(containers_of(replica.proc.pid)) == 1
        # The DELETE was answered: the container is gone already.
        assert containers_of(replica.proc.pid) == []
        failed = [r.getMessage() for r in caplog.records if "termination failed" in r.getMessage()]
        assert failed == []
    finally:
        stop(replica.proc)
