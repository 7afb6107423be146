"""One session of a warden shell tool, the core that `WardenSandbox` (deepagents) and
`WardenSandboxClient` (the OpenAI Agents SDK) put their own protocols on: commands with their
whole output, files moved in and out through the shell, the policy's timeout, and a `warden
serve` process replaced when it dies. It imports neither framework."""

from __future__ import annotations

import asyncio
import base64
import collections
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Generator, Mapping
from typing import Any, TypeVar, Union

from . import _capture
from ._audit import policy_timeout
from ._errors import WardenError, WardenProcessError, WardenStartError
from ._http import HttpSession
from ._process import _METHOD_NOT_FOUND, WardenProcess, Watcher, how_it_ended
from ._results import CallResult, ShellOutput, parse_shell
from ._trace import call_params
from ._transfer import ChunkTooLarge, Failure, download, upload
from ._wire import Base64

T = TypeVar("T")

logger = logging.getLogger(__name__)

# `python` for the programs (and deepagents' own scripts) that name it, where the image or
# the host has only `python3`: a link in the sandbox's own /tmp, put first on PATH. Run before
# every command, costing two builtins, so a fresh shell (after `exit` or a timeout) gets it;
# not before transfers, which need no `python` and run nothing of the session's.
_PRELUDE = (
    'case ":$PATH:" in *:/tmp/.warden-langchain/bin:*) ;; *) '
    "if ! command -v python >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then "
    '{ mkdir -p /tmp/.warden-langchain/bin && ln -sf "$(command -v python3)" '
    "/tmp/.warden-langchain/bin/python; } 2>/dev/null; fi; "
    'PATH="/tmp/.warden-langchain/bin:$PATH"; export PATH;; esac\n'
)

# A dead warden process is replaced at most this many times within this many seconds.
_RESTARTS = 3
_RESTART_WINDOW = 60.0

# Spent output files are removed, in one `rm` before a command, once this many wait.
_SPENT_BATCH = 16


Channel = Union[WardenProcess, HttpSession]
"""What a session's requests go through: its own `warden serve` process (stdio), or an MCP
session of a shared server over HTTP."""


def _read_params(session: WardenSession, path: str) -> dict[str, str]:
    return {"tool": session.tool, "path": path}


def _write_params(session: WardenSession, path: str, data: bytes, new: bool) -> dict[str, Any]:
    return {
        "tool": session.tool,
        "path": path,
        "data": Base64(data),
        "new": new,
    }


_IN_CHUNKS = object()
"""What `_refusal` says of a file to move in chunks through the shell instead."""

# Why a `warden/read` or a `warden/write` fails with the file itself.
_READ_CODES = frozenset({"file_not_found", "is_directory", "permission_denied", "invalid_path"})
_WRITE_CODES = frozenset({"is_directory", "exists", "invalid_path", "permission_denied"})


def session_choices(
    tool: str, env: Mapping[str, str] | None, image: str | None
) -> dict[str, Any] | None:
    """The `_meta` of a session's `initialize` that makes the client's choices for `tool`:
    variables of the names its policy's `env_from_caller` allows (`warden/env`), and an image
    its docker policy lists (`warden/image`). warden checks each, and refuses the session
    otherwise."""
    meta: dict[str, Any] = {}
    if env:
        meta["warden/env"] = {tool: dict(env)}
    if image is not None:
        meta["warden/image"] = {tool: image}
    return meta or None


class WardenSession:
    """One `warden serve` process and its session of the shell tool `tool`; or, with
    `channel`, the session that `channel()` opens (an `HttpSession` of a shared server, which
    is not restarted: when it is gone, calls answer so).

    Args (as `WardenSandbox` documents them): `tool`, `toolbox`, `home`, `warden`,
    `timeout`, `chunk_size`, `upload_chunk_size`, `max_download_size`, `max_output_size`,
    `python_alias`, `env`.
    Raises `WardenStartError` when warden does not start or `tool` is no shell tool of the
    toolbox, and `ValueError` for a `timeout` above the policy's or an `env` name it does not
    let a caller set.
    """

    def __init__(
        self,
        tool: str,
        toolbox: str | os.PathLike[str],
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = None,
        chunk_size: int = 44 * 1024,
        upload_chunk_size: int = 1024 * 1024,
        max_download_size: int = 100 * 1024 * 1024,
        max_output_size: int = 10 * 1024 * 1024,
        python_alias: bool = True,
        env: Mapping[str, str] | None = None,
        image: str | None = None,
        channel: Callable[[], Channel] | None = None,
    ) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout={timeout}: pass a number of seconds above 0, or none")
        self.tool = tool
        self._start: dict[str, Any] = {"toolbox": toolbox, "home": home, "warden": warden}
        # Set at each process's `initialize` (a restarted one's too); warden checks each
        # against the policy.
        self._session_meta = session_choices(tool, env, image)
        self._timeout = timeout
        self._policy_timeout: float | None = None
        self._chunk = chunk_size
        # Files are read and written in one request until warden or the policy says it
        # allows none.
        self._transfers = True
        self._upload_chunk = upload_chunk_size
        self._max_download = max_download_size
        self._max_output = max_output_size
        self._prelude = _PRELUDE if python_alias else ""
        self._lock = threading.Lock()
        self._restarts: collections.deque[float] = collections.deque()
        self._spent: list[str] = []
        self._closed = False
        self._restartable = channel is None
        self._open: Callable[[], Channel] = channel or (
            lambda: WardenProcess(**self._start, session_meta=self._session_meta)
        )
        self._process = self._open()
        # The finalizer closes whichever process is current then.
        self._current: list[Channel] = [self._process]
        self._finalizer = weakref.finalize(self, _close_current, self._current)
        try:
            tools = self._process.request("tools/list", {}, timeout=60)["tools"]
        except (WardenError, KeyError) as err:
            self.close()
            raise WardenStartError(f"warden did not list its tools: {err}") from None
        schemas = {t.get("name"): t.get("inputSchema") or {} for t in tools}
        if tool not in schemas:
            self.close()
            raise WardenStartError(
                f"the toolbox has no tool {tool!r} (it has: "
                f"{', '.join(sorted(map(str, schemas)))}): pass tool= a docker or host shell "
                "tool, or add its policy (SHELL_TOOLBOX's shell-docker.toml, shell-host.toml)"
            )
        if "command" not in (schemas[tool].get("properties") or {}):
            self.close()
            raise WardenStartError(
                f"{tool!r} is not a shell tool (it takes no `command`): pass tool= a docker or "
                'host tool whose argv is ["/bin/sh", "-c", "{command}"]'
            )
        if timeout:
            try:
                limit = self.limit()
            except WardenError as err:
                self.close()
                raise WardenStartError(f"could not read {tool!r}'s timeout: {err}") from None
            if timeout > limit:
                self.close()
                raise ValueError(
                    f"timeout={timeout:g} is above {limit:g} s, the timeout of {tool!r}'s "
                    f"policy: pass timeout= at most {limit:g}, or raise the policy's "
                    "[limits] timeout"
                )

    # -- what the protocols use -------------------------------------------------------------

    def limit(self) -> float:
        """The policy's timeout in seconds, read once from `warden audit --json` (which
        blocks); `WardenError` when it cannot be read."""
        if self._policy_timeout is None:
            self._policy_timeout = policy_timeout(self.tool, **self._start)
        return self._policy_timeout

    async def alimit(self) -> float:
        """The async twin of `limit`: only the first call waits, off the event loop."""
        if self._policy_timeout is None:
            return await asyncio.to_thread(self.limit)
        return self._policy_timeout

    def execute(
        self, command: str, timeout: float | None = None, watcher: Watcher | None = None
    ) -> ShellOutput:
        """Runs `command` in the session's shell, its whole output up to `max_output_size` a
        stream (see `_capture`); `timeout` seconds, or the session's, or the policy's. With
        `watcher`, the output goes to it as the shell prints it, and the command runs as it
        is: its output is what the policy's `output` limit keeps (cuts noted)."""
        if watcher is not None:
            return _capture.cut(self._run(self._prelude + command, timeout, watcher))
        spent = self._take_spent()
        try:
            captured = self._drive(self._capture(command, spent), timeout)
        except BaseException:
            self._spend(spent)  # not removed after all: a later command will
            raise
        self._spend(captured.spent)
        return captured.output

    async def aexecute(
        self, command: str, timeout: float | None = None, watcher: Watcher | None = None
    ) -> ShellOutput:
        """The async twin of `execute` (`watcher` is called on warden's reader thread)."""
        if watcher is not None:
            return _capture.cut(await self._arun(self._prelude + command, timeout, watcher))
        spent = self._take_spent()
        try:
            captured = await self._adrive(self._capture(command, spent), timeout)
        except BaseException:
            self._spend(spent)  # not removed after all: a later command will
            raise
        self._spend(captured.spent)
        return captured.output

    def upload(self, path: str, data: bytes, *, new: bool = False) -> Failure | None:
        """Writes `data` to the absolute `path`, making its parents; with `new`, a path that
        exists fails as `exists`. None, or why it failed: in one request where the policy
        allows it (its `transfer`), else through the shell in chunks."""
        if self._transfers:
            try:
                process, _ = self._live()
                answer = process.request("warden/write", _write_params(self, path, data, new))
                wrote = self._write_answer(answer, len(data))
            except WardenError as err:
                self._transfer_refused(err)
                wrote = _IN_CHUNKS
            if wrote is not _IN_CHUNKS:
                return wrote  # type: ignore[return-value]
        return self._drive(upload(path, data, self._upload_chunk, new=new))

    async def aupload(self, path: str, data: bytes, *, new: bool = False) -> Failure | None:
        """The async twin of `upload`."""
        if self._transfers:
            try:
                process, _ = await asyncio.to_thread(self._live)
                params = _write_params(self, path, data, new)
                answer = await process.arequest("warden/write", params)
                wrote = self._write_answer(answer, len(data))
            except WardenError as err:
                self._transfer_refused(err)
                wrote = _IN_CHUNKS
            if wrote is not _IN_CHUNKS:
                return wrote  # type: ignore[return-value]
        return await self._adrive(upload(path, data, self._upload_chunk, new=new))

    def download(self, path: str) -> bytes | Failure:
        """The bytes of the regular file at the absolute `path` (at most `max_download_size`),
        or why they could not be read: in one request where the policy allows it (its
        `transfer`), else through the shell in chunks."""
        if self._transfers:
            try:
                process, _ = self._live()
                read = self._read_answer(process.request("warden/read", _read_params(self, path)))
            except WardenError as err:
                self._transfer_refused(err)
                read = None
            if read is not None:
                return read
        while True:
            try:
                return self._drive(download(path, self._chunk, self._max_download))
            except ChunkTooLarge:
                self._shrink()

    async def adownload(self, path: str) -> bytes | Failure:
        """The async twin of `download`."""
        if self._transfers:
            try:
                process, _ = await asyncio.to_thread(self._live)
                answer = await process.arequest("warden/read", _read_params(self, path))
                read = self._read_answer(answer)
            except WardenError as err:
                self._transfer_refused(err)
                read = None
            if read is not None:
                return read
        while True:
            try:
                return await self._adrive(download(path, self._chunk, self._max_download))
            except ChunkTooLarge:
                self._shrink()

    def request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """A request of warden's own (never a tool call) in this session."""
        process, _ = self._live()
        return process.request(method, params)

    async def arequest(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The async twin of `request`."""
        process, _ = await asyncio.to_thread(self._live)
        return await process.arequest(method, params)

    def _read_answer(self, answer: Mapping[str, Any]) -> bytes | Failure | None:
        """The bytes a `warden/read` answered, checked against its size and our bound; why
        the file could not be read; None to move it in chunks (it is larger than the
        policy's `transfer`, the policy allows no reads, or the read failed otherwise)."""
        refused = self._refusal(answer, _READ_CODES)
        if refused is not None:
            return None if refused is _IN_CHUNKS else refused  # type: ignore[return-value]
        size, data = answer.get("size"), answer.get("data")
        if not isinstance(size, int) or not isinstance(data, str):
            return Failure("permission_denied", f"warden/read answered {str(answer)[:80]}")
        if size > self._max_download:
            return Failure(
                "permission_denied",
                f"it has {size} bytes, more than max_download_size ({self._max_download}): "
                "raise that to download it",
            )
        got = base64.b64decode(data)
        if len(got) != size:
            return Failure("permission_denied", f"{len(got)} bytes where warden said {size}")
        return got

    def _write_answer(self, answer: Mapping[str, Any], size: int) -> Failure | None | object:
        """None when a `warden/write` wrote the `size` bytes; why the file could not be
        written; `_IN_CHUNKS` to move it through the shell (it is larger than the policy's
        `transfer`, the policy allows no transfers, or the write failed otherwise)."""
        refused = self._refusal(answer, _WRITE_CODES)
        if refused is not None:
            return refused
        if answer.get("size") != size:
            return Failure("permission_denied", f"warden/write answered {str(answer)[:80]}")
        return None

    def _refusal(
        self, answer: Mapping[str, Any], codes: frozenset[str]
    ) -> Failure | object | None:
        """None when a `warden/read` or `warden/write` answered no error; else the failure
        when the file is the reason (one of `codes`), or `_IN_CHUNKS` (noting a policy that
        allows no transfers)."""
        error = answer.get("error")
        if not isinstance(error, dict):
            return None
        file = error.get("file")
        if file in codes:
            # What did not add up goes to the log, as for a transfer in chunks.
            detail = str(error.get("message")) if error.get("suspect") else None
            return Failure(file, detail)
        if file is None and error.get("kind") == "unavailable":
            self._transfers = False  # the policy allows no transfers
        return _IN_CHUNKS

    def _transfer_refused(self, err: WardenError) -> None:
        """After a `warden/read` or `warden/write` that was not answered, the file is moved in
        chunks: this time (a process that died), or from now on (a warden that has no such
        request)."""
        if getattr(err, "code", None) == _METHOD_NOT_FOUND:
            self._transfers = False

    # -- running commands -----------------------------------------------------------------

    def _capture(self, command: str, spent: list[str]) -> _capture.Execute:
        return _capture.execute(
            self._prelude + command,
            uuid.uuid4().hex[:16],
            spent,
            chunk=lambda: self._chunk,
            shrink=self._shrink,
            limit=self._max_output,
        )

    def _take_spent(self) -> list[str]:
        """The spent files for the next command to remove, once there are enough of them."""
        with self._lock:
            if len(self._spent) < _SPENT_BATCH:
                return []
            spent, self._spent = self._spent, []
            return spent

    def _spend(self, paths: list[str]) -> None:
        with self._lock:
            self._spent.extend(paths)

    def _arguments(self, command: str, timeout: float | None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"command": command}
        seconds = timeout if timeout is not None else self._timeout
        if seconds:  # 0 or None: the policy's own limit
            arguments["timeout"] = seconds
        return arguments

    def _live(self) -> tuple[Channel, str | None]:
        """The process to call, and a note when it is a new one in place of one that died."""
        with self._lock:
            process = self._process
            if process.alive or self._closed:
                return process, None
            if not self._restartable:
                raise WardenError(process.ended())
            why, code = process.ended(), process.returncode
            now = time.monotonic()
            while self._restarts and now - self._restarts[0] >= _RESTART_WINDOW:
                self._restarts.popleft()
            if len(self._restarts) >= _RESTARTS:
                raise WardenProcessError(
                    f"{why}\nwarden's process died again after {_RESTARTS} restarts within a "
                    "minute, the most this sandbox makes: find why it dies (its last words "
                    "above), then close this sandbox and make a new one"
                )
            self._restarts.append(now)
            process.close()
            self._process = self._current[0] = self._open()
            self._spent.clear()  # the new session has its own /tmp
        logger.warning("warden's process died and was restarted, in a new session: %s", why)
        how = "stopped answering" if code is None else how_it_ended(code)
        return self._process, (
            f"warden's process {how}, so this command ran in a new one, in a new session: "
            "the shell's working directory, variables and files in /tmp are gone"
        )

    def _run(
        self, command: str, timeout: float | None = None, watcher: Watcher | None = None
    ) -> ShellOutput:
        process = None
        try:
            process, note = self._live()
            result = process.request(
                "tools/call",
                call_params(self.tool, self._arguments(command, timeout)),
                watcher=watcher,
            )
        except WardenError as err:
            return self._unanswered(err, process)
        return _noted(parse_shell(CallResult.from_mcp(result)), note)

    async def _arun(
        self, command: str, timeout: float | None = None, watcher: Watcher | None = None
    ) -> ShellOutput:
        process = None
        try:
            if self._process.alive:
                process, note = self._process, None
            else:  # starting a new process blocks
                process, note = await asyncio.to_thread(self._live)
            result = await process.arequest(
                "tools/call",
                call_params(self.tool, self._arguments(command, timeout)),
                watcher=watcher,
            )
        except WardenError as err:
            return self._unanswered(err, process)
        return _noted(parse_shell(CallResult.from_mcp(result)), note)

    def _unanswered(self, err: WardenError, process: Channel | None) -> ShellOutput:
        """The answer of a call warden did not answer: lost with its process when that died
        under it (and the session was not being closed), else warden's failure."""
        if isinstance(err, WardenProcessError) and process is not None and not self._closed:
            return _lost(process)
        return _failed(err)

    def _shrink(self) -> None:
        if self._chunk <= 1024:
            raise WardenError(
                f"the output limit of {self.tool!r} is too small to download through: "
                "raise its policy's `output`"
            )
        self._chunk //= 2

    def _drive(self, steps: Generator[str, ShellOutput, T], timeout: float | None = None) -> T:
        """Runs the commands `steps` yields in turn, the first one with `timeout`."""
        try:
            command = next(steps)
            command = steps.send(self._run(command, timeout))
            while True:
                command = steps.send(self._run(command))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _adrive(
        self, steps: Generator[str, ShellOutput, T], timeout: float | None = None
    ) -> T:
        """The async twin of `_drive`."""
        try:
            command = next(steps)
            command = steps.send(await self._arun(command, timeout))
            while True:
                command = steps.send(await self._arun(command))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- life ------------------------------------------------------------------------------

    @property
    def process(self) -> Channel:
        """The `warden serve` process behind this session (a new one after a restart), or
        its HTTP session."""
        return self._process

    @property
    def alive(self) -> bool:
        """Whether the session is open and its process running."""
        return not self._closed and self._process.alive

    def close(self) -> None:
        """Ends the session: warden removes its container or kills its shell. Idempotent."""
        self._closed = True
        self._finalizer()


def _close_current(current: list[Channel]) -> None:
    current[0].close()


def _failed(err: WardenError) -> ShellOutput:
    """The answer of a call warden did not answer."""
    return ShellOutput("", f"warden failed: {err}", 1, [], False, stopped=True)


def _lost(process: Channel) -> ShellOutput:
    """The answer of a call whose warden process died under it."""
    note = (
        "the command was lost with warden's process (it may have run in part); the next "
        "command starts a new warden process, in a new session"
    )
    return ShellOutput("", f"warden failed: {process.ended()}", 1, [note], False, stopped=True)


def _noted(out: ShellOutput, note: str | None) -> ShellOutput:
    if note:
        out.notes.insert(0, note)
    return out
