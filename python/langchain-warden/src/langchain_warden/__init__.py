"""warden for LangChain, LangGraph and deep agents: tools, a sandbox and a shell policy.

- `WardenToolkit`: warden's tools as LangChain tools, one `warden serve` per toolkit.
- `WardenSandbox`: a deepagents sandbox backend on one warden shell session (needs the
  `deepagents` extra: `pip install 'langchain-warden[deepagents]'`).
- `WardenExecutionPolicy`: `ShellToolMiddleware`'s shell inside `warden exec`.
- `SHELL_TOOLBOX`: the toolbox they use by default, warden's host and docker shells.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._binary import find_warden
from ._errors import (
    WardenError,
    WardenNotFoundError,
    WardenProcessError,
    WardenStartError,
    WardenVersionError,
)
from ._toolbox import SHELL_TOOLBOX
from .policy import WardenExecutionPolicy
from .toolkit import WardenTool, WardenToolkit

if TYPE_CHECKING:
    from .sandbox import WardenSandbox as WardenSandbox

# WardenSandbox is not in __all__: `import *` would then need deepagents.
__all__ = [
    "SHELL_TOOLBOX",
    "WardenError",
    "WardenExecutionPolicy",
    "WardenNotFoundError",
    "WardenProcessError",
    "WardenStartError",
    "WardenTool",
    "WardenToolkit",
    "WardenVersionError",
    "find_warden",
]


def __getattr__(name: str) -> Any:
    # WardenSandbox is imported on first use, as it imports deepagents, which only the
    # `deepagents` extra installs: the toolkit and the execution policy need only LangChain.
    if name != "WardenSandbox":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from .sandbox import WardenSandbox
    except ImportError as err:
        if err.name is None or err.name.split(".")[0] != "deepagents":
            raise
        raise ImportError(
            f"WardenSandbox needs deepagents, which could not be imported ({err}): "
            "pip install 'langchain-warden[deepagents]'"
        ) from err
    globals()[name] = WardenSandbox
    return WardenSandbox
