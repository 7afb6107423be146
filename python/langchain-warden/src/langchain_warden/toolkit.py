"""`WardenToolkit`: warden's tools as LangChain tools, over one `warden serve` process."""

# No `from __future__ import annotations`: LangChain reads `_run`'s type hints on every call,
# and string annotations would be compiled each time.

import contextvars
import json
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, BaseToolkit, ToolException
from pydantic import ConfigDict, PrivateAttr

from ._errors import WardenError, WardenStartError
from ._process import WardenProcess
from ._results import CallResult
from ._toolbox import SHELL_TOOLBOX
from ._trace import call_params

# The id of the tool call being run, when the tool was invoked with a ToolCall (as
# create_agent's tool node does): the tool then answers a ToolMessage of its own.
_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "warden_call_id", default=None
)

ReviewFunction = Callable[[str, Mapping[str, Any]], "bool | tuple[bool, str]"]
"""Decides a call that warden holds for review: given the tool's name and arguments, answers
True to approve, False to reject, or (decision, reason)."""

ReviewChangesFunction = Callable[[str, Mapping[str, Any], str], "bool | tuple[bool, str]"]
"""Decides whether a call's changes are kept (a tool with `[review] changes = true`): given the
tool's name, its arguments and what warden shows of the changes (a line each, then a diff),
answers True to keep them, False to discard them, or (decision, reason)."""

_CHANGED = re.compile(
    r"\AThe tool `(?P<name>[^`]*)` ran with (?P<args>[^\n]*?) and changed files\. Approve to keep "
    r"its changes, reject to discard them\.\n(?P<changes>.*)\Z",
    re.DOTALL,
)

_ASKED = re.compile(
    r"\AThe tool `(?P<name>[^`]*)` needs your review before it runs\.\n"
    r"Arguments: (?P<args>[^\n]*)\nDigest: sha256:[0-9a-f]{64}\Z",
)


class WardenToolkit(BaseToolkit):
    """Every tool of a warden toolbox as a LangChain `BaseTool`, over one `warden serve`.

    One process, so one warden session, serves all the toolkit's tools: a model turn's
    parallel calls run concurrently through warden's dispatcher, and a shell tool's session
    (its `cd`, variables, `/tmp`) lasts across calls until `close()`.

    Invoked with a `ToolCall` (as `create_agent`'s tool node does), a tool answers a
    `ToolMessage`: warden's answer, `status="error"` for every warden error (the message is
    warden's, for the model), and an `artifact` with warden's `usage`, `error` (`kind`,
    `message`) and `structured` result. No exception escapes a call: a warden that died
    answers an error message too.

    Tools whose policy requires review: warden asks the toolkit, which approves a call only
    when a person did, through `human_in_the_loop()` (LangChain's HumanInTheLoopMiddleware)
    or the `review` function; without either, the call is rejected.

    Args:
        toolbox: The folder of policy files (default `SHELL_TOOLBOX`).
        home: warden's home (component store, compile cache, call log); default warden's.
        warden: The `warden` binary; default: found as `find_warden` does.
        review: Decides calls held for review that no HumanInTheLoopMiddleware approved.
        review_changes: Decides whether the changes of a call of a tool with
            `[review] changes = true` are kept; without it they are discarded
            (HumanInTheLoopMiddleware reviews calls before they run, not what they changed).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _process: WardenProcess = PrivateAttr()
    _specs: list[dict[str, Any]] = PrivateAttr()
    _gated: set[str] = PrivateAttr(default_factory=set)
    _approved: list[tuple[str, Any]] = PrivateAttr(default_factory=list)
    _approved_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _review: ReviewFunction | None = PrivateAttr(default=None)
    _review_changes: ReviewChangesFunction | None = PrivateAttr(default=None)
    _finalizer: Any = PrivateAttr()

    def __init__(
        self,
        toolbox: str | os.PathLike[str] = SHELL_TOOLBOX,
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        *,
        review: ReviewFunction | None = None,
        review_changes: ReviewChangesFunction | None = None,
    ) -> None:
        super().__init__()
        self._review = review
        self._review_changes = review_changes
        self._process = WardenProcess(
            toolbox=toolbox, home=home, warden=warden, reviewer=self._elicit
        )
        self._finalizer = weakref.finalize(self, self._process.close)
        try:
            self._specs = list(self._process.request("tools/list", {}, timeout=60)["tools"])
        except (WardenError, KeyError) as err:
            self.close()
            raise WardenStartError(f"warden did not list its tools: {err}") from None

    def get_tools(self) -> list[BaseTool]:
        """One tool per warden tool: its JSON Schema as `args_schema`, its WIT docs as its
        description."""
        return [
            WardenTool(
                name=spec["name"],
                description=spec.get("description") or spec["name"],
                args_schema=spec.get("inputSchema") or {"type": "object", "properties": {}},
                toolkit=self,
            )
            for spec in self._specs
        ]

    def human_in_the_loop(self, tools: Iterable[str] | None = None, **kwargs: Any) -> Any:
        """A `HumanInTheLoopMiddleware` that pauses the agent before each call of `tools`
        (default: all of this toolkit's) for a person's decision; the calls it lets through
        are the ones warden's review then approves. Pass the agent a checkpointer, and resume
        with `Command(resume=...)` as the middleware documents. `kwargs` go to the middleware.
        """
        from langchain.agents.middleware import HumanInTheLoopMiddleware

        names = list(tools) if tools is not None else [spec["name"] for spec in self._specs]
        unknown = set(names) - {spec["name"] for spec in self._specs}
        if unknown:
            raise ValueError(f"no such tools in the toolbox: {', '.join(sorted(unknown))}")
        self._gated.update(names)
        return HumanInTheLoopMiddleware(interrupt_on={name: True for name in names}, **kwargs)

    # -- review ----------------------------------------------------------------------------

    def _approve_while(self, name: str, arguments: Any) -> tuple[str, Any] | None:
        if name not in self._gated or _CALL_ID.get() is None:
            return None
        token = (name, arguments)
        with self._approved_lock:
            self._approved.append(token)
        return token

    def _release(self, token: tuple[str, Any] | None) -> None:
        if token is not None:
            with self._approved_lock:
                try:
                    self._approved.remove(token)
                except ValueError:
                    pass

    def _elicit(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        changed = _CHANGED.match(str(params.get("message", "")))
        if changed is not None:
            return self._decide_changes(changed)
        asked = _ASKED.match(str(params.get("message", "")))
        if asked is None:
            return _decision(False, "langchain-warden could not read the review request")
        name = asked["name"]
        try:
            arguments = json.loads(asked["args"])
        except ValueError:
            arguments = None
        with self._approved_lock:
            if (name, arguments) in self._approved:
                self._approved.remove((name, arguments))
                return _decision(True, "approved by a person in HumanInTheLoopMiddleware")
        if self._review is None:
            return _decision(
                False,
                "this call needs a person's review: add toolkit.human_in_the_loop() to the "
                "agent's middleware, or pass WardenToolkit(review=...)",
            )
        answer = self._review(name, arguments if isinstance(arguments, dict) else {})
        approved, reason = answer if isinstance(answer, tuple) else (answer, "")
        return _decision(
            bool(approved), reason or ("approved" if approved else "rejected by the reviewer")
        )

    def _decide_changes(self, changed: re.Match[str]) -> Mapping[str, Any]:
        if self._review_changes is None:
            return _decision(
                False,
                "what this call changed needs a person's review, and no one was asked: pass "
                "WardenToolkit(review_changes=...)",
            )
        try:
            arguments = json.loads(changed["args"])
        except ValueError:
            arguments = None
        answer = self._review_changes(
            changed["name"], arguments if isinstance(arguments, dict) else {}, changed["changes"]
        )
        kept, reason = answer if isinstance(answer, tuple) else (answer, "")
        return _decision(bool(kept), reason or ("kept" if kept else "discarded by the reviewer"))

    # -- calls ---------------------------------------------------------------------------

    def call(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        """Calls a tool; a warden that failed answers an error result (`kind` `warden`)."""
        token = self._approve_while(name, dict(arguments))
        try:
            return CallResult.from_mcp(
                self._process.request("tools/call", call_params(name, arguments))
            )
        except WardenError as err:
            return _failed(err)
        finally:
            self._release(token)

    async def acall(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        """The async twin of `call`."""
        token = self._approve_while(name, dict(arguments))
        try:
            return CallResult.from_mcp(
                await self._process.arequest("tools/call", call_params(name, arguments))
            )
        except WardenError as err:
            return _failed(err)
        finally:
            self._release(token)

    # -- life ------------------------------------------------------------------------------

    @property
    def process(self) -> WardenProcess:
        """The `warden serve` process behind the toolkit."""
        return self._process

    def close(self) -> None:
        """Ends the process and its session (shells, containers). Idempotent."""
        self._finalizer()

    def __enter__(self) -> "WardenToolkit":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _decision(approve: bool, reason: str) -> dict[str, Any]:
    return {
        "action": "accept",
        "content": {"decision": "approve" if approve else "reject", "reason": reason},
    }


def _failed(err: WardenError) -> CallResult:
    message = str(err)
    return CallResult(
        text=f"Error (warden): {message}", is_error=True, kind="warden", message=message
    )


class WardenTool(BaseTool):
    """One warden tool. Invoked with a `ToolCall` it answers a `ToolMessage` (see
    `WardenToolkit`); invoked with plain arguments, warden's text, or a `ToolException` with
    warden's message (returned as text, `handle_tool_error` being set)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    toolkit: WardenToolkit
    handle_tool_error: bool | str | Callable[[ToolException], str] | None = True

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        token = _CALL_ID.set(_call_id(input))
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        token = _CALL_ID.set(_call_id(input))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _CALL_ID.reset(token)

    def _run(self, **arguments: Any) -> Any:
        return self._answer(self.toolkit.call(self.name, arguments))

    async def _arun(self, **arguments: Any) -> Any:
        return self._answer(await self.toolkit.acall(self.name, arguments))

    def _answer(self, result: CallResult) -> Any:
        call_id = _CALL_ID.get()
        if call_id is None:
            if result.is_error:
                raise ToolException(result.text)
            return result.text
        artifact: dict[str, Any] = {"usage": result.usage}
        if result.is_error:
            artifact["error"] = {"kind": result.kind, "message": result.message}
        if result.structured is not None:
            artifact["structured"] = result.structured
        return ToolMessage(
            content=result.text,
            tool_call_id=call_id,
            name=self.name,
            status="error" if result.is_error else "success",
            artifact=artifact,
        )


def _call_id(value: Any) -> str | None:
    if isinstance(value, dict) and value.get("type") == "tool_call" and value.get("id"):
        return str(value["id"])
    return None
