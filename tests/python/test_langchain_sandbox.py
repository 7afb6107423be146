"""WardenSandbox beyond the standard suite: what `execute` answers, a small `output` limit, and
the `python` alias."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from langchain_harness import WASM, scratch, shell_toolbox, warden_bin, warden_env
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


async def test_the_output_limit_truncates_and_downloads_shrink_their_chunks(small):
    cut = small.execute("head -c 20000 /dev/zero | tr '\\0' x")
    assert cut.truncated is True
    assert "[warden: output truncated," in cut.output
    data = bytes(range(256)) * 80  # 20 KiB: a 44 KiB chunk's base64 does not fit in 4 KiB
    assert [r.error for r in small.upload_files([("/tmp/blob", data)])] == [None]
    [sync] = small.download_files(["/tmp/blob"])
    [async_] = await small.adownload_files(["/tmp/blob"])
    assert sync.content == data and async_.content == data


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
