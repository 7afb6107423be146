"""Finding the `warden` binary: the `warden=` argument, then `WARDEN_BIN`, then `PATH`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ._errors import WardenNotFoundError

_FIX = (
    "pass warden='/path/to/warden', set WARDEN_BIN, or put warden on PATH "
    "(`cargo install --path .` in a checkout of warden)"
)


def find_warden(warden: str | os.PathLike[str] | None = None) -> str:
    """The absolute path of the `warden` program to run.

    Looks at `warden` (a path, or a name looked up on `PATH`), then the `WARDEN_BIN`
    environment variable, then `warden` on `PATH`; raises `WardenNotFoundError` naming the
    fix when none of them is an executable file.
    """
    if warden is not None:
        return _check(str(warden), "the warden= argument")
    env = os.environ.get("WARDEN_BIN")
    if env:
        return _check(env, "WARDEN_BIN")
    found = shutil.which("warden")
    if found is None:
        raise WardenNotFoundError(f"no warden binary: {_FIX}")
    return str(Path(found).resolve())


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
