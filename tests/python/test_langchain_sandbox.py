"""WardenSandbox beyond the standard suite: what `execute` answers, outputs past the `output`
limit, the `timeout` the policy allows, a warden process that dies, and the `python` alias."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from langchain_harness import (
    WASM,
    require_docker,
    scratch,
    shell_toolbox,
    warden_bin,
    warden_env,
)
from langchain_warden import WardenSandbox

pytestmark = pytest.mark.anyio


@pytest.fixture
def small() -> Iterator[WardenSandbox]:
    """The host shell with an `output` limit of 4 KiB."""
    with scratch() as base:
        box = shell_toolbox(base, output="4KiB")
        with WardenSandbox("host-shell", box, base / "home", warden_bin()) as sandbox:
            yield sandbox


def test_execute_answers_output_stderr_and_exit_code(small):
    done = small.execute("echo out; echo err >&2; echo '[stderr]'; exit 3")
    assert done.exit_code == 3
    lines = done.output.split("\n")
    assert lines[:3] == ["out", "[stderr]", "[stderr] err"]
    assert "next command starts in a fresh shell" in lines[-1]
    assert small.execute("true").exit_code == 0


def test_output_that_looks_like_warden_s_framing_reaches_python_exactly(small):
    framing = "a\n[stderr]\nb\n[exit code 9]\n[the shell ended]"
    done = small.execute(f"printf '%s' '{framing}'")
    assert (done.output, done.exit_code, done.truncated) == (framing, 0, False)
    both = small.execute(f"printf '%s' '{framing}' >&2; printf 'x\\n'; exit 9")
    assert both.exit_code == 9
    assert both.output.startswith("x\n" + "\n".join(f"[stderr] {line}" for line in framing.split("\n")))


def test_a_timeout_is_124_and_keeps_the_sandbox(small):
    """A timeout ends the command, not the sandbox: files, working directory and variables
    written before it are still there."""
    small.execute("cd /tmp && X=1 && echo kept > before.txt")
    stopped = small.execute("sleep 10", timeout=1)
    assert stopped.exit_code == 124
    assert "did not finish within" in stopped.output
    assert "lives on" in stopped.output
    assert small.execute("pwd; echo $X; cat before.txt").output == "/tmp\n1\nkept\n"


async def test_an_output_past_the_limit_comes_whole_and_downloads_shrink_their_chunks(small):
    # 20000 bytes of stdout and 6000 of stderr under a 4 KiB limit: read from their files in
    # chunks, which halve until their base64 fits.
    command = "head -c 20000 /dev/zero | tr '\\0' x; head -c 6000 /dev/zero | tr '\\0' y >&2"
    for done in (small.execute(command), await small.aexecute(command)):
        assert (done.exit_code, done.truncated) == (0, False)
        assert done.output == "x" * 20000 + "\n[stderr] " + "y" * 6000
    data = bytes(range(256)) * 80  # 20 KiB: a 44 KiB chunk's base64 does not fit in 4 KiB
    assert [r.error for r in small.upload_files([("/tmp/blob", data)])] == [None]
    [sync] = small.download_files(["/tmp/blob"])
    [async_] = await small.adownload_files(["/tmp/blob"])
    assert sync.content == data and async_.content == data


def test_an_output_cut_all_the_same_says_how_to_get_the_rest(small):
    """Where the files are gone (the host shell's end takes its /tmp) or cannot be made (a
    /tmp no one may write), the output is what fit the limit."""
    redirect = "more bytes of stdout not shown: run the command again with its output redirected"
    ended = small.execute("head -c 20000 /dev/zero | tr '\\0' x; exit 5")
    assert (ended.exit_code, ended.truncated) == (5, True)
    assert ended.output.startswith("xxxx") and redirect in ended.output
    assert small.execute("chmod 555 /tmp").exit_code == 0
    plain = small.execute("cd /; head -c 20000 /dev/zero | tr '\\0' x")
    assert (plain.exit_code, plain.truncated) == (0, True)
    assert plain.output.startswith("xxxx") and redirect in plain.output
    assert small.execute("chmod 1777 /tmp; pwd").output == "/\n"


def test_an_output_past_max_output_size_is_cut_and_kept_in_the_sandbox():
    with scratch() as base:
        box = shell_toolbox(base)
        with WardenSandbox(
            "host-shell", box, base / "home", warden_bin(), max_output_size=100_000
        ) as sandbox:
            done = sandbox.execute("seq 1 50000; echo done >&2")  # 288894 bytes
            assert (done.exit_code, done.truncated) == (0, True)
            lines = done.output.split("\n")
            assert lines[:2] == ["1", "2"] and "[stderr] done" in lines
            note = lines[-1]
            assert "the first 100000 of 288894 bytes of stdout shown" in note
            path = note.split("they are all in ")[1].split(",")[0]
            kept = sandbox.execute(f"tail -n 1 {path}; wc -c <{path}")
            assert kept.output == "50000\n288894\n"
            # A whole output's files are gone some commands later.
            for _ in range(10):
                sandbox.execute("true")
            listed = sandbox.execute("ls -a /tmp").output.split()
            assert path[len("/tmp/") :] in listed
            assert len([name for name in listed if name.startswith(".warden-exec-")]) < 40


def test_a_timeout_above_the_policy_s_is_an_error_never_a_silent_cut():
    with scratch() as base:
        box = shell_toolbox(base)
        with pytest.raises(ValueError, match=r"timeout=45 is above 30 s, the timeout of 'host-shell'"):
            WardenSandbox("host-shell", box, base / "home", warden_bin(), timeout=45)
        with WardenSandbox("host-shell", box, base / "home", warden_bin(), timeout=20) as sandbox:
            refused = sandbox.execute("echo ran", timeout=31)
            assert refused.exit_code == 1 and "ran" not in refused.output.split()
            assert "timeout=31 is not allowed" in refused.output
            assert "at most 30 s (its policy's timeout)" in refused.output
            assert sandbox.execute("echo ran", timeout=30).output == "ran\n"


async def test_a_timeout_above_the_policy_s_is_an_error_async(small):
    refused = await small.aexecute("echo ran", timeout=600)
    assert refused.exit_code == 1 and "at most 30 s" in refused.output
    assert (await small.aexecute("echo ran", timeout=5)).output == "ran\n"


def _wait_for(condition, what: str) -> None:
    """Polls `condition` until it holds; a generous bound, for a machine under load."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.01)


def test_a_warden_killed_mid_call_answers_that_call_and_the_next_one_starts_a_new_one(small):
    small.execute("echo kept >/tmp/note")
    first = small.process
    answers = []
    running = threading.Thread(target=lambda: answers.append(small.execute("sleep 25")))
    running.start()
    _wait_for(lambda: first._pending, "the call in flight")
    os.kill(first.pid, signal.SIGKILL)
    running.join()
    [lost] = answers
    assert lost.exit_code == 1
    assert "killed by signal 9" in lost.output
    assert "the command was lost with warden's process" in lost.output
    again = small.execute("cat /tmp/note 2>&1; echo works")
    assert small.process is not first and small.process.alive
    assert again.exit_code == 0
    assert again.output.startswith("cat: /tmp/note: No such file or directory\nworks\n")
    assert "warden's process was killed by signal 9, so this command ran in a new one" in again.output


async def test_a_warden_that_keeps_dying_is_restarted_three_times_a_minute(small):
    for restart in range(4):
        process = small.process
        os.kill(process.pid, signal.SIGKILL)
        process._proc.wait()
        done = await small.aexecute("echo up") if restart % 2 else small.execute("echo up")
        if restart < 3:
            assert done.output.startswith("up\n") and "in a new session" in done.output
        else:
            assert done.exit_code == 1 and "killed by signal 9" in done.output
            assert "died again after 3 restarts within a minute" in done.output
    [failed] = small.download_files(["/tmp/x"])
    assert "died again after 3 restarts" in str(failed.error)


def test_python_runs_python3_unless_told_not_to():
    with scratch() as base:
        box = shell_toolbox(base)
        with WardenSandbox("host-shell", box, base / "home", warden_bin()) as aliased:
            assert aliased.execute("python -c 'print(6 * 7)'").output.strip() == "42"
        with WardenSandbox(
            "host-shell", box, base / "home", warden_bin(), python_alias=False
        ) as plain:
            assert ".warden-langchain" not in plain.execute("echo $PATH; ls -a /tmp").output


def test_a_broken_tool_leaves_the_shell_working():
    """A wasm policy whose WIT folder is missing: the shell still answers, and `warden tools`
    names the broken policy (its file, line and fix)."""
    broken = f'[executor]\nkind = "wasm"\ncomponent = "{WASM / "units.wasm"}"\nwit = "../no-such-wit"\n'
    with scratch() as base:
        box = shell_toolbox(base, extra={"units.toml": broken})
        with WardenSandbox("host-shell", box, base / "home", warden_bin()) as sandbox:
            assert sandbox.execute("echo still here").output == "still here\n"
        env = {**os.environ, **warden_env(base), "WARDEN_TOOLBOX": str(box)}
        listed = subprocess.run([warden_bin(), "tools"], env=env, capture_output=True, text=True)
        assert listed.returncode == 0, listed.stderr
        assert "units.toml:4:" in listed.stdout and "no-such-wit" in listed.stdout
        strict = subprocess.run(
            [warden_bin(), "--strict", "tools"], env=env, capture_output=True, text=True
        )
        assert strict.returncode != 0 and "units.toml:4:" in strict.stderr


@pytest.fixture
def watched() -> Iterator[tuple[WardenSandbox, Path]]:
    """The host shell, and a folder of its workspace the test may write."""
    with scratch() as base:
        box = shell_toolbox(base)
        with WardenSandbox("host-shell", box, base / "home", warden_bin()) as sandbox:
            yield sandbox, base / "workspace"


async def test_execute_hands_output_to_on_output_as_the_shell_prints_it(watched):
    """The last line can only be printed once `on_output` saw the first: on seeing it, the
    watcher makes the file the command waits for (in the workspace the shell may read)."""
    sandbox, workspace = watched
    for turn, run in enumerate(("sync", "async")):
        go = workspace / f"go-{turn}"
        pieces: list[tuple[str, str]] = []

        def watch(stream: str, text: str) -> None:
            pieces.append((stream, text))
            # A line's end may wait for what follows it (it could begin warden's framing).
            if "first" in "".join(t for s, t in pieces if s == "stdout"):
                go.touch()

        command = f"echo first; echo warn >&2; while [ ! -e {go} ]; do sleep 0.05; done; echo last"
        if run == "sync":
            done = sandbox.execute(command, timeout=10, on_output=watch)
        else:
            done = await sandbox.aexecute(command, timeout=10, on_output=watch)
        assert (done.output, done.exit_code) == ("first\nlast\n[stderr] warn", 0), done.output
        assert "".join(t for s, t in pieces if s == "stdout") == "first\nlast\n"
        assert "".join(t for s, t in pieces if s == "stderr") == "warn\n"


def test_env_sets_only_the_variables_the_policy_lets_a_caller_set():
    """`env=` narrows: the names the policy's `env_from_caller` allows reach the shell (in
    place of a literal of the same name); any other is refused before a command runs, naming
    what is allowed."""
    with scratch() as base:
        box = shell_toolbox(base)
        policy = box / "shell-host.toml"
        allowed = '[grants]\nenv_from_caller = ["PROJECT", "LANG"]\n'
        policy.write_text(policy.read_text().replace("[grants]\n", allowed, 1))
        with WardenSandbox(
            "host-shell", box, base / "home", warden_bin(), env={"PROJECT": "demo", "LANG": "C"}
        ) as sandbox:
            assert sandbox.execute("echo $PROJECT $LANG").output == "demo C\n"
        with WardenSandbox("host-shell", box, base / "home", warden_bin()) as sandbox:
            # Unset by the client: the policy's literal, or nothing.
            assert sandbox.execute("echo ${PROJECT:-unset} $LANG").output == "unset C.UTF-8\n"
        with pytest.raises(ValueError, match=r"HOME.*env_from_caller allows: PROJECT, LANG"):
            WardenSandbox("host-shell", box, base / "home", warden_bin(), env={"HOME": "/x"})


@pytest.mark.parametrize("detached", [False, True])
def test_image_chooses_among_the_images_the_policy_lists(detached):
    """`image=` narrows too: the docker shell's containers run the policy's `image`, or one of
    its `images` when the sandbox asks; any other image, or one for a host shell, is refused
    before a command runs, naming what is allowed."""
    require_docker()
    with scratch() as base:
        box = shell_toolbox(base)
        policy = box / "shell-docker.toml"
        text = re.sub(
            r'^image = .*$',
            'image = "warden-sandbox:latest"\nimages = ["warden-sandbox-debian:latest"]',
            policy.read_text(),
            count=1,
            flags=re.MULTILINE,
        )
        policy.write_text(text)
        home = base / "home"

        def sandbox(tool: str = "shell", **options: object) -> WardenSandbox:
            return WardenSandbox(tool, box, home, warden_bin(), detached=detached, **options)  # type: ignore[arg-type]

        debian = "test -e /etc/debian_version && echo debian || echo busybox"
        chosen = sandbox(image="warden-sandbox-debian:latest")
        try:
            assert chosen.execute(debian).output == "debian\n"
        finally:
            chosen.delete() if detached else chosen.close()
        plain = sandbox()
        try:
            assert plain.execute(debian).output == "busybox\n"
        finally:
            plain.delete() if detached else plain.close()
        allowed = r'\["warden-sandbox:latest", "warden-sandbox-debian:latest"\], not "alpine:3"'
        with pytest.raises(ValueError, match=allowed):
            sandbox(image="alpine:3")
        with pytest.raises(ValueError, match="runs no container image"):
            sandbox("host-shell", image="warden-sandbox:latest")
        if detached:
            for address in (home / "sandboxes" / "servers").glob("*.json"):
                os.kill(int(json.loads(address.read_text())["pid"]), signal.SIGTERM)


@pytest.mark.parametrize("tool", ["host-shell", "shell"])
def test_three_sleeps_at_once_on_one_sandbox_take_one_second(tool):
    """`execute` calls from several threads run at once, each its own process in the
    sandbox: 3 x `sleep 1` take one second, not three."""
    if tool == "shell":
        require_docker()
    with scratch() as base:
        box = shell_toolbox(base)
        with WardenSandbox(tool, box, base / "home", warden_bin()) as sandbox:
            assert sandbox.execute("true").exit_code == 0  # the shell started
            started = time.monotonic()
            with ThreadPoolExecutor(3) as pool:
                done = list(pool.map(lambda _: sandbox.execute("sleep 1; echo slept"), range(3)))
            elapsed = time.monotonic() - started
    assert [d.output for d in done] == ["slept\n"] * 3
    assert elapsed < 1.5, f"{elapsed:.2f} s"


@pytest.mark.parametrize("tool", ["host-shell", "shell"])
def test_commands_at_once_overlap_where_the_root_is_read_write_each_its_own_transaction(tool):
    """The host and docker shells with their grant read-write (each command a transaction):
    `execute` calls from several threads still run at once, each beside the session's shell
    in a view of its own (each waits for the other two to have started: commands that took
    turns would each say `alone`), and each one's file is in the folder."""
    if tool == "shell":
        require_docker()
    with scratch() as base:
        box = shell_toolbox(base)
        policy = box / ("shell-host.toml" if tool == "host-shell" else "shell-docker.toml")
        text = policy.read_text()
        assert 'access = "read-only"' in text
        policy.write_text(text.replace('access = "read-only"', 'access = "read-write"'))
        workspace = base / "workspace"
        workspace.chmod(0o777)
        seen_at = workspace if tool == "host-shell" else "/workspace"
        with WardenSandbox(tool, box, base / "home", warden_bin()) as sandbox:
            assert sandbox.execute("true").exit_code == 0  # the shell started

            def meet(i: int) -> str:
                return sandbox.execute(
                    f"touch /tmp/in{i}; n=0; until [ -e /tmp/in0 ] && [ -e /tmp/in1 ] && "
                    f"[ -e /tmp/in2 ]; do n=$((n+1)); [ $n -gt 300 ] && break; sleep 0.1; done; "
                    f"[ $n -gt 300 ] && echo alone || echo together; echo {i} > {seen_at}/f{i}"
                ).output

            with ThreadPoolExecutor(3) as pool:
                done = list(pool.map(meet, range(3)))
        assert done == ["together\n"] * 3
        assert [(workspace / f"f{i}").read_text() for i in range(3)] == ["0\n", "1\n", "2\n"]


async def test_commands_at_once_overlap_and_start_from_the_sandbox_s_state(small):
    """Each waits for a file the other makes (commands run one after the other would wait
    forever); both start from the state the last command left. The one that ran in the
    session's shell carries its `cd` and `export` on, the one beside it does not."""
    small.execute("cd /tmp && export V=1")
    first, second = await asyncio.gather(
        small.aexecute(
            "touch /tmp/a; until [ -e /tmp/b ]; do sleep 0.05; done; pwd; echo V=$V; "
            "mkdir -p /tmp/one && cd /tmp/one && export V=one"
        ),
        small.aexecute(
            "touch /tmp/b; until [ -e /tmp/a ]; do sleep 0.05; done; pwd; echo V=$V; "
            "mkdir -p /tmp/two && cd /tmp/two && export V=two"
        ),
    )
    assert (first.output, second.output) == ("/tmp\nV=1\n", "/tmp\nV=1\n")
    after = small.execute("pwd; echo V=$V").output
    assert after in ("/tmp/one\nV=one\n", "/tmp/two\nV=two\n")
