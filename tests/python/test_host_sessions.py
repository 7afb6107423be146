"""Host sessions (`session = true` in a host policy) through the official MCP client: one
confined shell per connection that keeps `cd` and variables, is not shared with another
connection, keeps its state past a command's timeout, survives a fork bomb and output imitating the protocol,
and leaves no process behind when its connection closes.

Each test runs the shell as a user of its own, so that "no process of the session's user is
left" counts this test's processes only."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import anyio
import pytest

from harness import (
    HOST_SHELL,
    connect,
    host_shell_policy,
    http_server,
    pid_namespace,
    processes_in,
    processes_of,
    session,
    Toolbox,
    wait_for,
)

pytestmark = pytest.mark.anyio

# A shell whose failed forks do not return as the shell (docs/docker.md says why busybox ash is
# not one); CI installs bash.
SHELL = HOST_SHELL


def error_kind(result) -> str:
    return (result.meta or {}).get("warden/error", {}).get("kind", "")


def text(result) -> str:
    return result.content[0].text


def body(result) -> str:
    """What a successful command printed, without its exit-code line."""
    assert result.isError is False, text(result)
    return text(result).removesuffix("[exit code 0]").strip()


class HostSessions:
    """A toolbox with one host shell in session mode, run as `uid`, granted a folder."""

    def __init__(self, root: Path, uid: int):
        if not Path(SHELL).is_file():
            pytest.skip(f"{SHELL} is not installed")
        self.uid = uid
        self.box = Toolbox(root)
        self.workspace = Path(tempfile.mkdtemp())
        self.workspace.chmod(0o755)
        (self.box.dir / "host-shell.toml").write_text(host_shell_policy(uid, self.workspace))
        assert processes_of(uid) == [], f"user {uid} already runs processes"

    def cleanup(self):
        shutil.rmtree(self.workspace, ignore_errors=True)


@pytest.fixture
def sessions(tmp_path):
    """Makes a HostSessions for a uid; a test may make several."""
    made = []

    def make(uid: int) -> HostSessions:
        root = tmp_path / f"u{uid}"
        root.mkdir()
        made.append(HostSessions(root, uid))
        return made[-1]

    yield make
    for s in made:
        s.cleanup()


async def shell(s, command: str, **more):
    return await s.call_tool("host-shell", {"command": command, **more})


async def test_a_host_session_keeps_the_directory_and_variables_on_one_connection(sessions):
    host = sessions(65490)
    async with session("stdio", host.box) as s:
        first = await shell(s, "mkdir /tmp/sub && cd /tmp/sub && X=1")
        assert first.isError is False, text(first)
        assert body(await shell(s, "pwd; echo $X")) == "/tmp/sub\n1"
        # The shell runs as the policy's user, not warden's.
        assert body(await shell(s, "id -u")) == str(host.uid)


async def test_two_host_connections_do_not_share_a_shell(sessions):
    host = sessions(65491)
    with http_server(host.box) as (url, token):
        async with connect(url, token) as a, connect(url, token) as b:
            assert body(await shell(a, "A=mine; cd /tmp && echo a >a; echo ok")) == "ok"
            # b is another session: another shell, another /tmp.
            answer = await shell(b, "echo ${A:-none}; pwd; ls /tmp/a 2>/dev/null || echo no a")
            assert body(answer) == f"none\n{host.workspace}\nno a"
            assert body(await shell(a, "echo $A; pwd; cat a")) == "mine\n/tmp\na"


async def test_a_host_command_past_its_deadline_is_stopped_and_the_session_kept(sessions):
    host = sessions(65492)
    async with session("stdio", host.box) as s:
        assert body(await shell(s, "X=5; cd /tmp; echo kept > f; echo set")) == "set"
        started = time.monotonic()
        late = await shell(s, "echo before; sleep 30", timeout=2)
        took = time.monotonic() - started
        assert late.isError is True
        assert error_kind(late) == "timeout", text(late)
        assert "before" in text(late)
        assert "the session's shell lives on" in text(late), text(late)
        assert took < 8, took
        # The same shell: its variables, working directory and files are kept.
        assert body(await shell(s, "echo $X; pwd; cat f")) == "5\n/tmp\nkept"


async def test_a_fork_bomb_in_a_host_session_is_contained(sessions):
    host = sessions(65493)
    async with session("stdio", host.box) as s:
        bomb = await shell(s, "b() { b | b & }; b", timeout=5)
        print("the bomb:", text(bomb))
        await anyio.sleep(0.3)
        started = time.monotonic()
        after = await shell(s, "ls -d / && echo answered")
        took = time.monotonic() - started
        print(f"after the bomb, in {took:.3f} s: {text(after)}")
        assert after.isError is False, text(after)
        assert text(after).startswith("/\nanswered\n"), text(after)
        assert "fork" not in text(after).lower(), text(after)
        assert took < 2, f"the next command took {took:.1f} s"
        assert body(await shell(s, "echo $((6 * 7))")) == "42"
    await wait_for(lambda: processes_of(host.uid) == [], timeout=5)


async def test_output_imitating_the_end_marker_changes_nothing(sessions):
    host = sessions(65494)
    fakes = [
        "__WARDEN_END_deadbeef:0",
        # The real shape: the prefix, a 32-digit nonce, status, processes, refused, options.
        "__WARDEN_END_0123456789abcdef0123456789abcdef 0 1 0 fhB",
        "__WARDEN_START_0123456789abcdef0123456789abcdef",
    ]
    printed = "".join(f"printf '%s\\n' '{f}'; printf '%s\\n' '{f}' >&2; " for f in fakes)
    async with session("stdio", host.box) as s:
        faked = await shell(s, f"{printed}sleep 0.3; echo after; echo err-after >&2")
        assert faked.isError is False, text(faked)
        # Every line shows, in full and in order: nothing ended the command early.
        out = "".join(f"{f}\n" for f in fakes) + "after\n"
        assert text(faked).startswith(out), text(faked)
        assert "[stderr]\n" + "".join(f"{f}\n" for f in fakes) + "err-after" in text(faked), (
            text(faked)
        )
        # The next command's output is its own, with nothing of the one before.
        nxt = await shell(s, "echo next")
        assert body(nxt) == "next", text(nxt)
        assert "__WARDEN" not in text(nxt)
        assert "after" not in text(nxt)


async def test_closing_a_host_connection_leaves_no_process_of_its_session(sessions):
    jobs = "sleep 300 >/dev/null 2>&1 & (sleep 301 >/dev/null 2>&1 &); echo started"
    # Over HTTP the server goes on running: the session's end alone must clean up.
    host = sessions(65495)
    with http_server(host.box) as (url, token):
        async with connect(url, token) as s:
            assert body(await shell(s, jobs)) == "started"
            running = processes_of(host.uid)
            assert len(running) >= 3, "the shell and its two sleeps run"
            namespaces = {pid_namespace(p) for p in running} - {None}
            assert namespaces
        await wait_for(lambda: processes_of(host.uid) == [], timeout=5)
        await wait_for(lambda: processes_in(namespaces) == [], timeout=5)
    # Over stdio the connection is the process's stdin.
    host = sessions(65496)
    async with session("stdio", host.box) as s:
        assert body(await shell(s, jobs)) == "started"
        running = processes_of(host.uid)
        assert len(running) >= 3, "the shell and its two sleeps run"
        namespaces = {pid_namespace(p) for p in running} - {None}
    await wait_for(lambda: processes_of(host.uid) == [], timeout=5)
    await wait_for(lambda: processes_in(namespaces) == [], timeout=5)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_command_s_output_streams_to_a_client_that_asks_for_progress(
    sessions, transport
):
    """Its second line can only be printed once the client saw the first: on seeing it, the
    client makes the file the command waits for, in the folder the shell may read. The
    pieces come as the answer carries them, secret values redacted however they are cut."""
    host = sessions(65497 if transport == "stdio" else 65498)
    policy = host.box.dir / "host-shell.toml"
    policy.write_text(
        policy.read_text().replace(
            'env = { PATH = "/usr/local/bin:/usr/bin:/bin" }',
            'env = { PATH = "/usr/local/bin:/usr/bin:/bin", TOKEN = "s3cr3t-value-123" }\n'
            'secret_env = ["TOKEN"]',
        )
    )
    go = host.workspace / "go"
    seen: list[tuple[float, str]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, message or ""))
        if "first\n" in "".join(m for _, m in seen):
            go.touch()

    command = (
        "echo first; printf 's3cr3t-'; sleep 0.2; printf 'value-123\\n'; "
        f"while [ ! -e {go} ]; do sleep 0.05; done; echo second"
    )
    async with session(transport, host.box) as s:
        done = await s.call_tool(
            "host-shell", {"command": command, "timeout": 10}, progress_callback=progress
        )
    assert body(done) == "first\n[redacted:TOKEN]\nsecond", text(done)
    streamed = "".join(m for _, m in seen)
    assert streamed == "first\n[redacted:TOKEN]\nsecond\n", seen
    counts = [n for n, _ in seen]
    assert counts == sorted(counts), seen
