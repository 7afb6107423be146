"""Detached sandboxes: `connect(id)` from another process, `list` by label, `delete`, `ttl`
(idle expiry removes the shell or container), the provider, and another user kept out."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from langchain_harness import containers_of, require_docker, scratch, shell_toolbox, warden_bin
from langchain_warden import SandboxNotFound, WardenSandbox, _lifecycle, list_sandboxes
from langchain_warden.provider import WardenSandboxProvider

# How long a bounded wait for warden to end something may take.
WAIT = 60.0


class Place:
    """A toolbox and a warden home; the background servers started there are stopped after."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.box = shell_toolbox(base)
        self.home = base / "home"

    def sandbox(self, tool: str = "host-shell", **options: object) -> WardenSandbox:
        return WardenSandbox(tool, self.box, self.home, warden_bin(), **options)  # type: ignore[arg-type]

    def server(self) -> dict[str, object]:
        """The background server's address file."""
        (address,) = (self.home / "sandboxes" / "servers").glob("*.json")
        return json.loads(address.read_text())

    def stop_servers(self) -> None:
        for address in (self.home / "sandboxes" / "servers").glob("*.json"):
            pid = int(json.loads(address.read_text())["pid"])
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            until(lambda: not _running(pid), "the background server stopped")


@pytest.fixture
def place() -> Iterator[Place]:
    with scratch() as base:
        here = Place(base)
        try:
            yield here
        finally:
            here.stop_servers()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def until(done: Callable[[], bool], what: str, seconds: float = WAIT) -> None:
    """Waits until `done()`, polling, at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def shells(pid: int) -> set[int]:
    """The shells below the process `pid` (a host sandbox's, under the server; warden's own
    helpers there stay)."""
    found = set()
    for child in descendants(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0] == b"/bin/sh":
            found.add(child)
    return found


def descendants(pid: int) -> set[int]:
    """The processes below `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def run_python(code: str, *args: str) -> str:
    """Runs `code` in a new Python process with `args`: its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_connect_from_another_process_after_the_first_exited_and_list_by_label(place):
    made = run_python(
        """
        import sys
        from langchain_warden import WardenSandbox
        box, home, warden = sys.argv[1:]
        sandbox = WardenSandbox("host-shell", box, home, warden, labels={"task": "a"})
        out = sandbox.execute("mkdir -p /tmp/work && cd /tmp/work && echo kept > f && export V=7")
        assert out.exit_code == 0, out
        print(sandbox.id)
        """,
        str(place.box),
        str(place.home),
        warden_bin(),
    )
    sandbox_id = made.strip()
    seen = run_python(
        """
        import sys
        from langchain_warden import WardenSandbox
        sandbox = WardenSandbox.connect(sys.argv[1], sys.argv[2])
        print(sandbox.execute("pwd; cat f; echo $V").output, end="")
        """,
        sandbox_id,
        str(place.home),
    )
    assert seen == "/tmp/work\nkept\n7\n"

    assert [s.id for s in WardenSandbox.list({"task": "a"}, place.home)] == [sandbox_id]
    assert WardenSandbox.list({"task": "b"}, place.home) == []
    other = place.sandbox(labels={"task": "b"}, ttl=600)
    assert [s.id for s in list_sandboxes({"task": "b"}, place.home)] == [other.id]
    (info,) = list_sandboxes({"task": "b"}, place.home)
    assert (info.tool, info.labels, info.ttl) == ("host-shell", {"task": "b"}, 600)
    assert len(list_sandboxes(home=place.home)) == 2


def test_delete_ends_the_shell_and_the_record(place):
    sandbox = place.sandbox(detached=True)
    assert sandbox.execute("echo hi").output == "hi\n"
    server = int(place.server()["pid"])  # type: ignore[call-overload]
    assert shells(server), "the session's shell runs under the server"
    sandbox.delete()
    until(lambda: not shells(server), "the deleted sandbox's shell is gone")
    assert list_sandboxes(home=place.home) == []
    with pytest.raises(SandboxNotFound):
        WardenSandbox.connect(sandbox.id, place.home)
    sandbox.delete()  # again: nothing to do
    assert "gone" in sandbox.execute("echo hi").output


def test_a_server_with_no_sandbox_left_stops_and_a_new_sandbox_starts_another(place, monkeypatch):
    monkeypatch.setattr(_lifecycle, "SERVER_IDLE", 1.0)
    sandbox = place.sandbox(detached=True)
    assert sandbox.execute("echo hi").output == "hi\n"
    first = int(place.server()["pid"])  # type: ignore[call-overload]
    time.sleep(2.5)
    assert _running(first), "a server holding a sandbox goes on"
    sandbox.delete()
    until(lambda: not _running(first), "the server with no sandbox left stopped")
    again = place.sandbox(detached=True)
    assert again.execute("echo again").output == "again\n"
    assert int(place.server()["pid"]) != first  # type: ignore[call-overload]


@pytest.mark.parametrize("tool", ["host-shell", "shell"])
def test_ttl_expiry_removes_the_sandbox_and_its_shell_or_container(place, tool):
    if tool == "shell":
        require_docker()
    sandbox = place.sandbox(tool, ttl=1)
    assert sandbox.execute("echo hi").output == "hi\n"
    server = int(place.server()["pid"])  # type: ignore[call-overload]
    if tool == "shell":
        assert containers_of(server), "the session's container runs"
        until(lambda: not containers_of(server), "the idle sandbox's container is gone")
    else:
        assert shells(server), "the session's shell runs under the server"
        until(lambda: not shells(server), "the idle sandbox's shell is gone")
    until(lambda: list_sandboxes(home=place.home) == [], "the idle sandbox is unlisted")
    with pytest.raises(SandboxNotFound):
        WardenSandbox.connect(sandbox.id, place.home)
    assert "gone" in sandbox.execute("echo hi").output


def test_a_sandbox_in_use_outlives_its_ttl(place):
    sandbox = place.sandbox(ttl=1)
    assert sandbox.execute("sleep 2.5; echo done").output == "done\n"
    assert sandbox.execute("echo still").output == "still\n"
    sandbox.delete()


def test_the_provider_gets_creates_and_deletes(place):
    provider = WardenSandboxProvider("host-shell", place.box, place.home, warden_bin())
    made = provider.get_or_create(labels={"by": "provider"})
    assert made.detached
    made.execute("echo there > /tmp/p")
    again = provider.get_or_create(made.id, timeout=5)
    assert again.execute("cat /tmp/p").output == "there\n"
    provider.delete(made.id)
    with pytest.raises(SandboxNotFound):
        provider.get_or_create(made.id)
    with pytest.raises(SandboxNotFound):
        provider.delete(made.id)


def test_without_the_options_a_sandbox_is_its_own_process_as_before(place):
    with place.sandbox() as sandbox:
        assert not sandbox.detached
        assert sandbox.execute("echo hi").output == "hi\n"
    assert not (place.home / "sandboxes").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_another_user_cannot_connect(place):
    """As `nobody`, with the warden home open to all: the sandbox's record and its server's
    token cannot be read, and the server refuses a request that names the session without
    the token."""
    sandbox = place.sandbox(detached=True)
    place.base.chmod(0o755)
    place.home.chmod(0o755)
    url = urllib.parse.urlsplit(str(place.server()["url"]))
    session = sandbox.process.session_id  # type: ignore[union-attr]
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (reports through the pipe)
        os.close(reader)
        report: dict[str, object] = {}
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                WardenSandbox.connect(sandbox.id, place.home)
                report["connect"] = "connected"
            except PermissionError:
                report["connect"] = "PermissionError"
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            headers = {
                "Mcp-Session-Id": session,
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            }
            connection.request("POST", url.path, body=body, headers=headers)
            report["status"] = connection.getresponse().status
        except BaseException as err:  # noqa: BLE001 (anything goes back to the test)
            report["error"] = repr(err)
        os.write(writer, json.dumps(report).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        report = json.loads(pipe.read())
    os.waitpid(child, 0)
    assert report == {"connect": "PermissionError", "status": 401}
    assert sandbox.execute("echo mine").output == "mine\n"
    sandbox.delete()
