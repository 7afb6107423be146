"""`WardenSandboxProvider`: detached `WardenSandbox`es by id, as deepagents-code's sandbox
providers (E2B's, Runloop's) hand them out: `get_or_create(sandbox_id=None, **kwargs)` and
`delete(sandbox_id)`. The deepagents this package supports defines no provider interface to
subclass; this class has the same two methods (and their async twins)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ._lifecycle import delete_sandbox
from ._toolbox import DEFAULT_SHELL, SHELL_TOOLBOX
from .sandbox import SESSION_OPTIONS, WardenSandbox


class WardenSandboxProvider:
    """Makes detached sandboxes of the shell tool `tool` of `toolbox` in the warden home
    `home`, and finds them again by id from any process of the same user.

    Args:
        tool, toolbox, home, warden: As `WardenSandbox` takes them.
        **defaults: `WardenSandbox`'s other keyword arguments for the sandboxes it makes
            (`labels`, `ttl`, `timeout`, `env`, ...); `get_or_create`'s own override them.
    """

    def __init__(
        self,
        tool: str = DEFAULT_SHELL,
        toolbox: str | os.PathLike[str] = SHELL_TOOLBOX,
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        **defaults: Any,
    ) -> None:
        self._tool, self._toolbox, self._home, self._warden = tool, toolbox, home, warden
        self._defaults = defaults

    def get_or_create(self, sandbox_id: str | None = None, **kwargs: Any) -> WardenSandbox:
        """The live sandbox `sandbox_id` (`SandboxNotFound` when there is none; of `kwargs`,
        only the options `connect` takes apply), or a new detached one made with `kwargs`."""
        options = {**self._defaults, **kwargs}
        if sandbox_id is not None:
            kept = {k: v for k, v in options.items() if k in SESSION_OPTIONS}
            return WardenSandbox.connect(sandbox_id, self._home, self._warden, **kept)
        options.setdefault("detached", True)
        return WardenSandbox(self._tool, self._toolbox, self._home, self._warden, **options)

    async def aget_or_create(self, sandbox_id: str | None = None, **kwargs: Any) -> WardenSandbox:
        """The async twin of `get_or_create`."""
        return await asyncio.to_thread(self.get_or_create, sandbox_id, **kwargs)

    def delete(self, sandbox_id: str) -> None:
        """Ends the sandbox `sandbox_id` (its shell or container) and removes its record;
        `SandboxNotFound` when no live sandbox has that id."""
        delete_sandbox(sandbox_id, self._home)

    async def adelete(self, sandbox_id: str) -> None:
        """The async twin of `delete`."""
        await asyncio.to_thread(self.delete, sandbox_id)
