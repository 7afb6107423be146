"""langchain-warden as a pip user gets it: the shell toolbox it ships, an import without
deepagents, and the `warden` binary it finds and checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import langchain_warden._binary as binary
from langchain_harness import ROOT, require_docker, scratch, warden_bin
from langchain_warden import (
    SHELL_TOOLBOX,
    WardenExecutionPolicy,
    WardenNotFoundError,
    WardenSandbox,
    WardenVersionError,
    find_warden,
)

SHELLS = {"shell-host.toml": "host-shell", "shell-docker.toml": "shell"}
WORKSPACE_README = SHELL_TOOLBOX.parent / "workspace" / "README.txt"


# -- the shipped toolbox ----------------------------------------------------------------------


def test_the_shipped_toolbox_is_the_repositorys_shell_policies():
    assert sorted(p.name for p in SHELL_TOOLBOX.iterdir()) == sorted(SHELLS)
    for name in SHELLS:
        shipped = (SHELL_TOOLBOX / name).read_bytes()
        assert shipped == (ROOT / "policies" / name).read_bytes(), f"{name} differs from policies/"
    assert WORKSPACE_README.is_file()


@pytest.mark.parametrize("tool", [None, "host-shell"])
def test_a_sandbox_with_no_toolbox_runs_the_shipped_shell_on_its_workspace(tool):
    if tool is None:
        require_docker()
    with scratch() as base:
        chosen = {"tool": tool} if tool is not None else {}
        with WardenSandbox(**chosen, home=base / "home", warden=warden_bin()) as sandbox:
            assert sandbox.id.startswith(f"warden-{tool or 'shell'}-")
            read = sandbox.execute("cat README.txt")
            assert read.exit_code == 0, read
            assert read.output == WORKSPACE_README.read_text()
            written = sandbox.execute("touch new.txt")
            assert written.exit_code != 0 and "Read-only file system" in written.output


def test_the_execution_policy_with_no_toolbox_runs_the_shipped_host_shell():
    with scratch() as base:
        policy = WardenExecutionPolicy(tool="host-shell", home=base / "home", warden=warden_bin())
        shell = policy.spawn(workspace=base, env={}, command=["/bin/sh"])
        out, err = shell.communicate("cat README.txt\n", timeout=60)
        assert shell.returncode == 0 and out == WORKSPACE_README.read_text(), err
        default = WardenExecutionPolicy(home=base / "home", warden=warden_bin())
        assert default.tool == "shell"
        default.check()  # the shipped toolbox has the default tool


# -- without a framework -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("missing", "name", "extra", "other"),
    [
        ("deepagents", "WardenSandbox", "deepagents", "WardenSandboxClient"),
        ("agents", "WardenSandboxClient", "openai-agents", "WardenSandbox"),
    ],
    ids=["deepagents", "openai-agents"],
)
def test_the_toolkit_imports_without_a_framework_and_its_names_name_the_extra(
    missing, name, extra, other
):
    """Each framework is an extra: without it, the rest of the package imports (the other
    framework's name too) and its own names say which extra to install."""
    program = f"""
import sys
sys.modules[{missing!r}] = None  # as if not installed
import langchain_warden
from langchain_warden import *
from langchain_warden import WardenExecutionPolicy, WardenToolkit, {other}
try:
    from langchain_warden import {name}
except ImportError as err:
    print(err)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"{name} needs {missing}" in done.stdout, done.stdout
    assert f"pip install 'langchain-warden[{extra}]'" in done.stdout, done.stdout


# -- finding the binary -----------------------------------------------------------------------


def fake_warden(folder: Path, version: str, *, count: Path | None = None) -> Path:
    """An executable `folder/warden` that prints `warden VERSION`, noting each run in `count`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "warden"
    note = f'echo run >> "{count}"\n' if count is not None else ""
    path.write_text(f'#!/bin/sh\n{note}echo "warden {version}"\n')
    path.chmod(0o755)
    return path


def fake_warden_bin(site: Path, version: str) -> Path:
    """A `warden-bin` distribution in the folder `site` as pip installs one: its RECORD names
    the binary in the scripts folder beside `site`."""
    info = site / "warden_bin-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: warden-bin\nVersion: 0.1.0\n")
    (info / "RECORD").write_text(
        "../bin/warden,,\nwarden_bin-0.1.0.dist-info/METADATA,,\n"
        "warden_bin-0.1.0.dist-info/RECORD,,\n"
    )
    return fake_warden(site.parent / "bin", version)


def test_the_binary_is_the_argument_then_warden_bin_env_then_the_wheels_then_path(
    tmp_path, monkeypatch
):
    version = binary.expected_version()
    argument = fake_warden(tmp_path / "argument", version)
    env = fake_warden(tmp_path / "env", version)
    on_path = fake_warden(tmp_path / "path", version)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("WARDEN_BIN", str(env))
    # Distributions are looked up on sys.path: here only the fake warden-bin's folder.
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    bundled = fake_warden_bin(tmp_path / "site", version)

    assert find_warden(argument) == str(argument)
    assert find_warden() == str(env)
    monkeypatch.delenv("WARDEN_BIN")
    assert binary.bundled_warden() == bundled
    assert find_warden() == str(bundled)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "empty")])
    assert binary.bundled_warden() is None
    assert find_warden() == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(WardenNotFoundError, match="^no warden binary: pip install langchain-"):
        find_warden()


def test_another_release_is_refused_naming_both_versions_and_the_fix(tmp_path):
    expected = binary.expected_version()
    other = fake_warden(tmp_path, "9.9.9")
    with pytest.raises(WardenVersionError) as raised:
        find_warden(other)
    message = str(raised.value)
    assert f"{other} is warden 9.9.9" in message and f"drives warden {expected}" in message
    assert f"pip install warden-bin=={expected}" in message and "WARDEN_BIN" in message
    assert isinstance(raised.value, WardenNotFoundError)


def test_the_version_is_asked_once_per_binary_until_it_changes(tmp_path):
    count = tmp_path / "runs"
    warden = fake_warden(tmp_path / "bin", binary.expected_version(), count=count)
    find_warden(warden)
    find_warden(warden)
    assert count.read_text().count("run") == 1
    stat = warden.stat()
    os.utime(warden, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    find_warden(warden)
    assert count.read_text().count("run") == 2


def test_a_program_that_is_no_warden_is_refused(tmp_path):
    impostor = tmp_path / "warden"
    impostor.write_text("#!/bin/sh\necho hello\n")
    impostor.chmod(0o755)
    with pytest.raises(WardenNotFoundError, match="answered 'hello'.*not `warden VERSION`"):
        find_warden(impostor)


def test_the_package_the_wheel_it_pins_and_the_crates_are_one_release():
    pyproject = (ROOT / "python" / "langchain-warden" / "pyproject.toml").read_text()
    cargo = (ROOT / "Cargo.toml").read_text()
    [own] = re.findall(r'(?m)^version = "(.*)"$', pyproject)
    [pinned] = re.findall(r'"warden-bin==(.*)"', pyproject)
    crates = re.search(r'(?ms)^\[workspace\.package\]$.*?^version = "(.*?)"$', cargo)
    assert crates is not None, "Cargo.toml has no [workspace.package] version"
    assert own == pinned == binary._SOURCE_VERSION == crates.group(1)
    built = subprocess.run([warden_bin(), "--version"], capture_output=True, text=True, check=True)
    assert built.stdout.split() == ["warden", own]
