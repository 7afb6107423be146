"""A deep agent's sandbox in lockstep with LangGraph's checkpoints.

LangGraph checkpoints the agent's state after every step and can resume a thread from an
earlier checkpoint (time travel) or start another thread from one (a fork); the files the
tools changed stay as they are. Two pieces tie them:

- `WardenThreadSandbox` is the agent's backend: a `WardenSandbox` for each LangGraph thread
  (`thread_id` of the run's config), made with the same arguments on the thread's first use.
- `WardenCheckpointMiddleware(backend)` snapshots the thread's sandbox after each tool call
  that may change it and records the snapshot's id in the graph's state
  (`warden_snapshot`), so every checkpoint after a tool step names the sandbox as it was
  then. Before each model call it compares: a thread whose state names another snapshot
  than its sandbox holds (a resumed checkpoint, another process) has its sandbox restored
  to it; a thread with no sandbox yet gets one made from it: a fork of the snapshot when
  another thread took it (a forked thread, whose read-write roots are then copies, which
  its sandbox's `commit()` applies to the real folders), else a sandbox from it (a thread
  resumed by a new process, its read-write roots rewound).

Calls of one step that run at once each take a snapshot when they end; the state keeps the
one taken last, which began after every call of the step had ended.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import ToolMessage
from langgraph.config import get_config
from langgraph.types import Command

from .sandbox import WardenSandbox

# deepagents' tools that only read the sandbox: no snapshot after them.
READS = frozenset({"ls", "read_file", "glob", "grep"})


def _latest(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    """The snapshot taken last of two (each `{"id", "taken_ns", "thread"}`: the thread
    that took it)."""
    if old is None or new is None:
        return new or old
    return max(old, new, key=lambda s: s["taken_ns"])


class CheckpointState(AgentState[Any]):
    """The agent's state with the snapshot its sandbox was in after the last tool step."""

    warden_snapshot: NotRequired[Annotated[dict[str, Any] | None, _latest]]


def thread_id() -> str:
    """The LangGraph thread of the run this code runs in ("" outside one)."""
    try:
        config = get_config()
    except RuntimeError:
        return ""
    return str(config.get("configurable", {}).get("thread_id", ""))


class WardenThreadSandbox(WardenSandbox):
    """A `WardenSandbox` for each LangGraph thread: the arguments are `WardenSandbox`'s,
    each thread's sandbox made with them on its first use. Every method acts on the sandbox
    of the thread the calling code runs in. `close()` closes them all."""

    def __init__(self, **kwargs: Any) -> None:  # noqa: D107 (the class says it)
        self._made = kwargs
        self._tool = kwargs.get("tool", "host-shell")
        self._id = f"warden-threads-{self._tool}"
        self._registry = None
        self._threads: dict[str, tuple[WardenSandbox, str | None]] = {}
        self._lock = threading.Lock()

    @property
    def _session(self) -> Any:  # what every WardenSandbox method acts through
        return self.sandbox()._session

    def sandbox(self, thread: str | None = None) -> WardenSandbox:
        """The sandbox of `thread` (default: the current one), made on first use."""
        key = thread_id() if thread is None else thread
        with self._lock:
            if key not in self._threads:
                self._threads[key] = (WardenSandbox(**self._made), None)
            return self._threads[key][0]

    def holds(self, thread: str) -> str | None:
        """The snapshot the sandbox of `thread` was last snapshotted at or restored to; None
        for a thread with no sandbox, or one never snapshotted."""
        with self._lock:
            found = self._threads.get(thread)
        return found[1] if found else None

    def mark(self, thread: str, snap_id: str) -> None:
        with self._lock:
            sandbox, _ = self._threads[thread]
            self._threads[thread] = (sandbox, snap_id)

    def adopt(self, thread: str, snap_id: str, *, fork: bool = False) -> None:
        """Puts the sandbox of `thread` in snapshot `snap_id`: restored, or (a thread with no
        sandbox yet) made from it, as a fork of it when `fork` (another thread took it)."""
        with self._lock:
            found = self._threads.get(thread)
        if found is None:
            made = WardenSandbox._made_from(snap_id, fork=fork, **self._made)
            with self._lock:
                self._threads[thread] = (made, snap_id)
            return
        found[0].restore(snap_id)
        self.mark(thread, snap_id)

    def close(self) -> None:
        with self._lock:
            sandboxes, self._threads = [s for s, _ in self._threads.values()], {}
        for sandbox in sandboxes:
            sandbox.close()


class WardenCheckpointMiddleware(AgentMiddleware[CheckpointState]):
    """Keeps the threads' sandboxes of `backend` in step with the graph's checkpoints (see
    the module)."""

    state_schema = CheckpointState

    def __init__(self, backend: WardenThreadSandbox) -> None:
        super().__init__()
        self.backend = backend

    def before_model(self, state: CheckpointState, runtime: Any) -> dict[str, Any] | None:
        wanted = state.get("warden_snapshot")
        thread = thread_id()
        if wanted and self.backend.holds(thread) != wanted["id"]:
            taken_by = wanted.get("thread", thread)  # checkpoints before it was kept: this one
            self.backend.adopt(thread, wanted["id"], fork=taken_by != thread)
        return None

    async def abefore_model(self, state: CheckpointState, runtime: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.before_model, state, runtime)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        result = handler(request)
        if request.tool_call["name"] in READS:
            return result
        thread = thread_id()
        sandbox = self.backend.sandbox(thread)
        taken_ns = time.time_ns()
        snap_id = sandbox.snapshot()
        self.backend.mark(thread, snap_id)
        return _recorded(result, {"id": snap_id, "taken_ns": taken_ns, "thread": thread})

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        result = await handler(request)
        if request.tool_call["name"] in READS:
            return result
        thread = thread_id()
        sandbox = await asyncio.to_thread(self.backend.sandbox, thread)
        taken_ns = time.time_ns()
        snap_id = await sandbox.asnapshot()
        self.backend.mark(thread, snap_id)
        return _recorded(result, {"id": snap_id, "taken_ns": taken_ns, "thread": thread})


def _recorded(result: Any, snapshot: dict[str, Any]) -> Any:
    """The tool's result, with the snapshot in the state update it makes."""
    if isinstance(result, ToolMessage):
        return Command(update={"messages": [result], "warden_snapshot": snapshot})
    if isinstance(result, Command) and isinstance(result.update, dict):
        return Command(
            graph=result.graph,
            update={**result.update, "warden_snapshot": snapshot},
            resume=result.resume,
            goto=result.goto,
        )
    return result
