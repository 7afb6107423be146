"""Finding the `warden` binary, in this order:

1. the `warden=` argument (a path, or a name looked up on `PATH`);
2. the `WARDEN_BIN` environment variable (likewise);
3. the `warden` that the installed `warden-bin` distribution put in the environment's scripts
   (a dependency of this package, so `pip install langchain-warden` brings it);
4. `warden` on `PATH`.

The binary found must be the warden release this package drives, its own version: its
`--version` is asked once per binary (path and modification time), and another release is a
`WardenVersionError`.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

from ._errors import WardenNotFoundError, WardenVersionError

# This package's version when it runs without its metadata (its source folder on sys.path, not
# installed); the tests hold it equal to pyproject.toml's.
_SOURCE_VERSION = "0.1.0"

_FIX = (
    "pip install langchain-warden (it brings warden, as the warden-bin wheel), or pass "
    "warden='/path/to/warden', set WARDEN_BIN, or put warden on PATH "
    "(`cargo install --path .` in a checkout of warden)"
)

# (path, modification time in ns) -> the version that binary printed.
_versions: dict[tuple[str, int], str] = {}


def find_warden(warden: str | os.PathLike[str] | None = None) -> str:
    """The absolute path of the `warden` program to run, looked up in the module's order.

    Raises `WardenNotFoundError` naming the fix when none is an executable file, and
    `WardenVersionError` when the one found is not `expected_version()`.
    """
    env = os.environ.get("WARDEN_BIN")
    if warden is not None:
        path = _check(str(warden), "the warden= argument")
    elif env:
        path = _check(env, "WARDEN_BIN")
    elif (bundled := bundled_warden()) is not None:
        path = _check(str(bundled), "the warden-bin distribution")
    elif (found := shutil.which("warden")) is not None:
        path = str(Path(found).resolve())
    else:
        raise WardenNotFoundError(f"no warden binary: {_FIX}")
    _check_version(path)
    return path


def bundled_warden() -> Path | None:
    """The `warden` the installed `warden-bin` distribution lists, or None without one."""
    try:
        dist = importlib.metadata.distribution("warden-bin")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name == "warden" and file.parent.name in ("bin", "scripts"):
            return Path(str(dist.locate_file(file))).resolve()
    return None


def expected_version() -> str:
    """The warden release this package drives: the package's own version."""
    try:
        return importlib.metadata.version("langchain-warden")
    except importlib.metadata.PackageNotFoundError:
        return _SOURCE_VERSION


def _check(candidate: str, source: str) -> str:
    path = Path(candidate).expanduser()
    if os.sep not in candidate and not path.exists():
        found = shutil.which(candidate)
        if found is not None:
            return str(Path(found).resolve())
    if not path.is_file():
        raise WardenNotFoundError(f"{source} names {candidate!r}, which is not a file: {_FIX}")
    if not os.access(path, os.X_OK):
        raise WardenNotFoundError(
            f"{source} names {candidate!r}, which is not executable (chmod +x it): {_FIX}"
        )
    return str(path.resolve())


def _check_version(path: str) -> None:
    key = (path, os.stat(path).st_mtime_ns)
    if key not in _versions:
        _versions[key] = _version_of(path)
    found, expected = _versions[key], expected_version()
    if found != expected:
        raise WardenVersionError(
            f"{path} is warden {found}, but langchain-warden {expected} drives warden "
            f"{expected}: pip install warden-bin=={expected}, or point warden= or WARDEN_BIN "
            f"at a warden {expected} build"
        )


def _version_of(path: str) -> str:
    """The version `path --version` prints (`warden 0.1.0`)."""
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise WardenNotFoundError(f"`{path} --version` failed ({err}): {_FIX}") from None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2 or words[0] != "warden":
        answer = (done.stdout + done.stderr).strip()[:200]
        raise WardenNotFoundError(
            f"`{path} --version` answered {answer!r} (exit status {done.returncode}), not "
            f"`warden VERSION`: it is no warden binary; {_FIX}"
        )
    return words[1]
