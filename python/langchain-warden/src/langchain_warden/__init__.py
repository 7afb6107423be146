"""warden for LangChain, LangGraph and deep agents: tools, a sandbox and a shell policy.

- `WardenToolkit`: warden's tools as LangChain tools, one `warden serve` per toolkit.
- `WardenSandbox`: a deepagents sandbox backend on one warden shell session (needs the
  `deepagents` extra: `pip install 'langchain-warden[deepagents]'`).
- `WardenSandboxClient`: the OpenAI Agents SDK's sandbox client for `SandboxAgent`, each
  session a warden shell session (module `langchain_warden.openai_agents`; needs the
  `openai-agents` extra: `pip install 'langchain-warden[openai-agents]'`).
- `WardenSandboxProvider`: deepagents-code's `SandboxProvider` (`get_or_create`, `delete`)
  of detached `WardenSandbox`es; `list_sandboxes`, `delete_sandbox` and `SandboxInfo` find
  and end them by id or label.
- `WardenExecutionPolicy`: `ShellToolMiddleware`'s shell inside `warden exec`.
- `SHELL_TOOLBOX`: the toolbox they use by default, warden's host and docker shells.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._binary import find_warden
from ._errors import (
    WardenError,
    WardenNotFoundError,
    WardenProcessError,
    WardenSnapshotError,
    WardenStartError,
    WardenVersionError,
)
from ._lifecycle import SandboxInfo, SandboxNotFound, delete_sandbox, list_sandboxes
from ._toolbox import SHELL_TOOLBOX
from .policy import WardenExecutionPolicy
from .toolkit import WardenTool, WardenToolkit

if TYPE_CHECKING:
    from .checkpoints import WardenCheckpointMiddleware as WardenCheckpointMiddleware
    from .checkpoints import WardenThreadSandbox as WardenThreadSandbox
    from .openai_agents import WardenSandboxClient as WardenSandboxClient
    from .openai_agents import WardenSandboxClientOptions as WardenSandboxClientOptions
    from .provider import WardenSandboxProvider as WardenSandboxProvider
    from .sandbox import WardenSandbox as WardenSandbox

# The lazy names (below) are not in __all__: `import *` would then need their frameworks.
__all__ = [
    "SHELL_TOOLBOX",
    "SandboxInfo",
    "SandboxNotFound",
    "WardenError",
    "WardenExecutionPolicy",
    "WardenNotFoundError",
    "WardenProcessError",
    "WardenSnapshotError",
    "WardenStartError",
    "WardenTool",
    "WardenToolkit",
    "WardenVersionError",
    "delete_sandbox",
    "find_warden",
    "list_sandboxes",
]


# Imported on first use, as each imports a framework that only its extra installs: the toolkit
# and the execution policy need only LangChain. By name: (module, the framework's package, extra).
_LAZY = {
    "WardenSandbox": ("sandbox", "deepagents", "deepagents"),
    "WardenSandboxProvider": ("provider", "deepagents", "deepagents"),
    "WardenThreadSandbox": ("checkpoints", "deepagents", "deepagents"),
    "WardenCheckpointMiddleware": ("checkpoints", "deepagents", "deepagents"),
    "WardenSandboxClient": ("openai_agents", "agents", "openai-agents"),
    "WardenSandboxClientOptions": ("openai_agents", "agents", "openai-agents"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, package, extra = _LAZY[name]
    try:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    except ImportError as err:
        if err.name is None or err.name.split(".")[0] != package:
            raise
        raise ImportError(
            f"{name} needs {package}, which could not be imported ({err}): "
            f"pip install 'langchain-warden[{extra}]'"
        ) from err
    globals()[name] = value
    return value
