"""The wheels as a pip user installs them (scripts/test-wheels runs these in a fresh venv with
only the wheels and the tests' requirements, and no cargo on PATH): the package finds the
warden of the warden-bin wheel and runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from langchain_harness import installed

pytestmark = pytest.mark.skipif(
    not installed(), reason="only against the installed wheels (scripts/test-wheels)"
)


def test_the_wheel_puts_warden_and_its_helper_in_the_venv() -> None:
    from langchain_warden import find_warden

    assert shutil.which("cargo") is None, "the wheel test runs with no cargo on PATH"
    scripts = Path(sys.prefix) / "bin"
    found = Path(find_warden())
    assert found == (scripts / "warden").resolve()
    assert (scripts / "warden-helper").is_file()
    version = metadata.version("warden-bin")
    out = subprocess.run([found, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"warden {version}"
    assert metadata.version("langchain-warden") == version


def test_a_sandbox_with_no_toolbox_runs_the_host_shell_of_the_package() -> None:
    from langchain_warden import WardenSandbox

    with WardenSandbox(tool="host-shell") as sandbox:
        # It reads the package's workspace and writes its own /tmp.
        done = sandbox.execute("cat README.txt >/dev/null && echo hi >/tmp/x && cat /tmp/x")
        assert (done.exit_code, done.output) == (0, "hi\n"), done.output
