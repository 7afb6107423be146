"""`WardenExecutionPolicy`: LangChain's `ShellToolMiddleware` shell inside `warden exec`."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from langchain.agents.middleware._execution import BaseExecutionPolicy

from ._errors import WardenStartError
from ._process import warden_argv
from ._toolbox import DEFAULT_SHELL, SHELL_TOOLBOX


@dataclass
class WardenExecutionPolicy(BaseExecutionPolicy):
    """Runs `ShellToolMiddleware`'s persistent shell as `warden exec TOOL -- bash`.

    The shell gets exactly the sandbox a call of the docker or host tool `tool` gets: for a
    host tool the policy's user, granted roots, environment, rlimits, Landlock, seccomp and
    new namespaces; for a docker tool a fresh hardened container; for both only the policy's
    `net` grants. `cd` and variables last as long as the middleware's shell does; the
    middleware's `env` is not passed in (the shell sees only the policy's `env` grants), and
    its `workspace` matters only as warden's working directory.

    Args:
        tool: The docker or host tool whose sandbox the shell runs in (default `DEFAULT_SHELL`).
        toolbox: The folder of policy files (default `SHELL_TOOLBOX`).
        home: warden's home; default warden's.
        warden: The `warden` binary; default: found as `find_warden` does.
        session_timeout: `warden exec --timeout`: how long the whole shell may live
            (`"none"`, the default, lets it live as long as the middleware keeps it; each
            command is still bounded by the middleware's `command_timeout`).
    """

    tool: str = DEFAULT_SHELL
    toolbox: str | os.PathLike[str] = SHELL_TOOLBOX
    home: str | os.PathLike[str] | None = None
    warden: str | os.PathLike[str] | None = None
    session_timeout: str = "none"

    _checked: bool = field(default=False, init=False, repr=False)

    def check(self) -> None:
        """Raises `WardenStartError` when the toolbox does not load, has no tool `tool`, or
        `tool` requires a person's review (`warden tools --json`), so that a wrong name or a
        shell no one can approve fails at start rather than as a command that never answers.
        `spawn()` checks once. The shell runs in a session of its own, with no terminal to ask
        a reviewer on: per-command review is the toolkit's (`WardenToolkit`, each command a
        call) or LangChain's `HumanInTheLoopMiddleware`."""
        argv = warden_argv(self.warden, "tools", self.toolbox, self.home)
        try:
            done = subprocess.run(
                [*argv, "--json"], capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise WardenStartError(f"`{' '.join(argv)}` failed: {err}") from None
        if done.returncode != 0:
            raise WardenStartError(f"the toolbox did not load: {done.stderr.strip()}")
        tools = {str(t.get("name")): t for t in json.loads(done.stdout)}
        if self.tool not in tools:
            raise WardenStartError(
                f"the toolbox has no tool {self.tool!r} (it has: {', '.join(sorted(tools))}): "
                "pass tool= a docker or host shell tool"
            )
        if tools[self.tool].get("review_required"):
            raise WardenStartError(
                f"{self.tool!r} requires a person's review of each call ([review] required = "
                "true in its policy), and `warden exec` refuses it where no one can be asked, "
                "as here: review each command with WardenToolkit (each command a call) or "
                "LangChain's HumanInTheLoopMiddleware, and pass tool= a tool without review"
            )
        self._checked = True

    def command_line(self, command: Sequence[str]) -> list[str]:
        """`warden exec --toolbox DIR [--home DIR] --timeout T TOOL -- COMMAND...`."""
        argv = warden_argv(self.warden, "exec", self.toolbox, self.home)
        return [*argv, "--timeout", self.session_timeout, self.tool, "--", *command]

    def spawn(
        self,
        *,
        workspace: Path,
        env: Mapping[str, str],
        command: Sequence[str],
    ) -> subprocess.Popen[str]:
        """Starts the shell in warden's sandbox, on plain pipes (text, line-buffered)."""
        if not self._checked:
            self.check()
        return subprocess.Popen(
            self.command_line(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workspace,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            env=dict(os.environ),
            start_new_session=True,
        )
