"""warden for LangChain, LangGraph and deep agents: tools, a sandbox and a shell policy.

- `WardenToolkit`: warden's tools as LangChain tools, one `warden serve` per toolkit.
- `WardenSandbox`: a deepagents sandbox backend on one warden shell session.
- `WardenExecutionPolicy`: `ShellToolMiddleware`'s shell inside `warden exec`.
"""

from ._binary import find_warden
from ._errors import WardenError, WardenNotFoundError, WardenProcessError, WardenStartError
from .policy import WardenExecutionPolicy
from .sandbox import WardenSandbox
from .toolkit import WardenTool, WardenToolkit

__all__ = [
    "WardenError",
    "WardenExecutionPolicy",
    "WardenNotFoundError",
    "WardenProcessError",
    "WardenSandbox",
    "WardenStartError",
    "WardenTool",
    "WardenToolkit",
    "find_warden",
]
