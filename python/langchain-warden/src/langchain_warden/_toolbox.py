"""The toolbox the package ships, so that its shells need no checkout of warden."""

from __future__ import annotations

from pathlib import Path

SHELL_TOOLBOX = Path(__file__).parent / "toolbox"
"""The default toolbox of `WardenToolkit`, `WardenSandbox` and `WardenExecutionPolicy`: warden's
`policies/shell-host.toml`, the tool `host-shell` (a confined host process: Linux 6.2 or later
with Landlock), and `policies/shell-docker.toml`, the tool `shell` (a hardened container of the
image `warden-sandbox-debian:latest`, which `warden sandbox-image --debian` builds). Both are
granted only the package's `workspace` folder beside it, read-only."""

DEFAULT_SHELL = "shell"
"""The tool `WardenSandbox` and `WardenExecutionPolicy` run when given no `tool=`: the docker
shell of `SHELL_TOOLBOX`, a container of its own per session; `"host-shell"` needs no Docker."""
