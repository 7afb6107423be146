"""A tool's limits as its policy sets them, from what `warden audit --json` prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

from ._errors import WardenError
from ._process import warden_argv

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?")
_SECONDS = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}


def policy_timeout(
    tool: str,
    toolbox: str | os.PathLike[str],
    home: str | os.PathLike[str] | None,
    warden: str | os.PathLike[str] | None,
) -> float:
    """Seconds `tool`'s policy lets a call run (its `[limits] timeout`)."""
    written = _limits(tool, toolbox, home, warden).get("timeout")
    match = _DURATION.fullmatch(str(written))
    if match is None:
        raise WardenError(f"`warden audit --json` gives {tool!r} a timeout of {written!r}")
    return float(match[1]) * _SECONDS[match[2]]


def _limits(
    tool: str,
    toolbox: str | os.PathLike[str],
    home: str | os.PathLike[str] | None,
    warden: str | os.PathLike[str] | None,
) -> dict[str, Any]:
    argv = [*warden_argv(warden, "audit", toolbox, home), "--json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        report = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as err:
        raise WardenError(f"`{' '.join(argv)}` failed: {err}") from None
    if not isinstance(report, dict):
        raise WardenError(
            f"`{' '.join(argv)}` failed (exit status {done.returncode}): {done.stderr.strip()}"
        )
    for policy in report.get("policies") or []:
        for entry in policy.get("tools") or []:
            if entry.get("name") == tool and isinstance(entry.get("limits"), dict):
                return dict(entry["limits"])
    raise WardenError(f"`{' '.join(argv)}` lists no tool {tool!r}: its policy did not load")
