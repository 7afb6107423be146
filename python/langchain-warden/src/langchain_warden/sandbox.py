"""`WardenSandbox`: a deepagents sandbox backend on one warden shell session."""

from __future__ import annotations

import logging
import os
import uuid
import weakref
from collections.abc import Generator
from types import TracebackType
from typing import Any, TypeVar, cast

from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileOperationError,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox

from ._errors import WardenError, WardenStartError
from ._process import WardenProcess
from ._results import CallResult, ShellOutput, parse_shell
from ._toolbox import DEFAULT_SHELL, SHELL_TOOLBOX
from ._trace import call_params
from ._transfer import ChunkTooLarge, Failure, download, upload

T = TypeVar("T")

logger = logging.getLogger(__name__)

# `python` for the programs (and deepagents' own scripts) that name it, where the image or
# the host has only `python3`: a link in the sandbox's own /tmp, put first on PATH. Run before
# every `execute`, costing two builtins, so a fresh shell (after `exit` or a timeout) gets it;
# not before transfers, which need no `python` and run nothing of the session's.
_PRELUDE = (
    'case ":$PATH:" in *:/tmp/.warden-langchain/bin:*) ;; *) '
    "if ! command -v python >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then "
    '{ mkdir -p /tmp/.warden-langchain/bin && ln -sf "$(command -v python3)" '
    "/tmp/.warden-langchain/bin/python; } 2>/dev/null; fi; "
    'PATH="/tmp/.warden-langchain/bin:$PATH"; export PATH;; esac\n'
)


class WardenSandbox(BaseSandbox):
    """A deepagents `SandboxBackendProtocol` backed by one session of a warden shell tool.

    `tool` names a docker or host shell tool of the toolbox whose policy has `session = true`
    (`SHELL_TOOLBOX`'s `shell` and `host-shell` do). One
    `warden serve` process is started per sandbox, and with it one session: one container (or
    one confined host shell) whose working directory, variables and `/tmp` last from one
    `execute` to the next. Several sandboxes share nothing. `upload_files` and
    `download_files` move bytes through that shell itself (base64 in chunks), so they reach
    the sandbox's own `/tmp`, not only the folders the policy grants. Each chunk goes through a
    fresh `/bin/sh` with an empty environment, so functions, aliases or a `PATH` that earlier
    commands left in the session cannot stand in for the programs moving it; and answers that
    do not add up (a size that is no number or above `max_download_size`, a chunk that is not
    the bytes asked for, a file that changed meanwhile) fail that file with
    `permission_denied`, logged with what went wrong on this module's logger.

    `close()` (or leaving a `with` block, or interpreter exit) ends the process, and warden
    removes the session's container or kills its shell's processes.

    Args:
        tool: The shell tool's name (default `DEFAULT_SHELL`).
        toolbox: The folder of policy files (default `SHELL_TOOLBOX`).
        home: warden's home (component store, compile cache, call log); default warden's.
        warden: The `warden` binary; default: found as `find_warden` does.
        timeout: Seconds each command may run when `execute` is given none (the policy's
            `timeout` caps it either way).
        chunk_size: Bytes per transfer command. Downloads halve it when the policy's
            `output` limit cuts a chunk.
        max_download_size: The most bytes `download_files` reads of one file (100 MiB by
            default); a larger file fails with `permission_denied`. It bounds the memory and
            the rounds (size / chunk) a download may take, whatever the sandbox answers.
        python_alias: Make `python` run `python3` where only `python3` exists.
    """

    def __init__(
        self,
        tool: str = DEFAULT_SHELL,
        toolbox: str | os.PathLike[str] = SHELL_TOOLBOX,
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = None,
        chunk_size: int = 44 * 1024,
        max_download_size: int = 100 * 1024 * 1024,
        python_alias: bool = True,
    ) -> None:
        self._tool = tool
        self._timeout = timeout
        self._chunk = chunk_size
        self._max_download = max_download_size
        self._prelude = _PRELUDE if python_alias else ""
        self._process = WardenProcess(toolbox=toolbox, home=home, warden=warden)
        self._finalizer = weakref.finalize(self, self._process.close)
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
        self._id = f"warden-{tool}-{uuid.uuid4().hex[:12]}"

    # -- the protocol ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        """Unique for each sandbox: `warden-<tool>-<random>`."""
        return self._id

    def _arguments(self, command: str, timeout: float | None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"command": command}
        seconds = timeout if timeout is not None else self._timeout
        if seconds:  # 0 or None: the policy's own limit
            arguments["timeout"] = seconds
        return arguments

    def _run(self, command: str, timeout: float | None = None) -> ShellOutput:
        try:
            result = self._process.request(
                "tools/call", call_params(self._tool, self._arguments(command, timeout))
            )
        except WardenError as err:
            return ShellOutput("", f"warden failed: {err}", 1, [], False)
        return parse_shell(CallResult.from_mcp(result))

    async def _arun(self, command: str, timeout: float | None = None) -> ShellOutput:
        try:
            result = await self._process.arequest(
                "tools/call", call_params(self._tool, self._arguments(command, timeout))
            )
        except WardenError as err:
            return ShellOutput("", f"warden failed: {err}", 1, [], False)
        return parse_shell(CallResult.from_mcp(result))

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Runs `command` in the session's shell: stdout, then stderr's lines marked
        `[stderr]`, the exit code (124 for a timeout), and whether the output limit cut it."""
        return _response(self._run(self._prelude + command, timeout))

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """The async twin of `execute`."""
        return _response(await self._arun(self._prelude + command, timeout))

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Writes each file into the sandbox, making its parents; errors per file."""
        responses = []
        for path, data in files:
            failure = self._drive(upload(path, data, self._chunk))
            responses.append(FileUploadResponse(path=path, error=_error("upload", path, failure)))
        return responses

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """The async twin of `upload_files`."""
        responses = []
        for path, data in files:
            failure = await self._adrive(upload(path, data, self._chunk))
            responses.append(FileUploadResponse(path=path, error=_error("upload", path, failure)))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Reads each file out of the sandbox, at most `max_download_size` bytes of it;
        errors per file."""
        responses = []
        for path in paths:
            while True:
                try:
                    got = self._drive(download(path, self._chunk, self._max_download))
                    break
                except ChunkTooLarge:
                    self._shrink()
            responses.append(_downloaded(path, got))
        return responses

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """The async twin of `download_files`."""
        responses = []
        for path in paths:
            while True:
                try:
                    got = await self._adrive(download(path, self._chunk, self._max_download))
                    break
                except ChunkTooLarge:
                    self._shrink()
            responses.append(_downloaded(path, got))
        return responses

    def _shrink(self) -> None:
        if self._chunk <= 1024:
            raise WardenError(
                f"the output limit of {self._tool!r} is too small to download through: "
                "raise its policy's `output`"
            )
        self._chunk //= 2

    def _drive(self, steps: Generator[str, ShellOutput, T]) -> T:
        try:
            command = next(steps)
            while True:
                command = steps.send(self._run(command))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _adrive(self, steps: Generator[str, ShellOutput, T]) -> T:
        try:
            command = next(steps)
            while True:
                command = steps.send(await self._arun(command))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- life ------------------------------------------------------------------------------

    @property
    def process(self) -> WardenProcess:
        """The `warden serve` process behind this sandbox."""
        return self._process

    def close(self) -> None:
        """Ends the session: warden removes its container or kills its shell. Idempotent."""
        self._finalizer()

    def __enter__(self) -> WardenSandbox:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _error(action: str, path: str, failure: Failure | None) -> FileOperationError | None:
    """One of the protocol's error codes, or (warden failed, the command did not finish)
    warden's message: newer deepagents type the field `FileOperationError | str`. The codes
    cannot say what in the sandbox's answers did not add up: that goes to the log."""
    if failure is None:
        return None
    if failure.detail:
        logger.warning("%s of %s failed (%s): %s", action, path, failure.code, failure.detail)
    return cast("FileOperationError", failure.code)


def _downloaded(path: str, got: bytes | Failure) -> FileDownloadResponse:
    if isinstance(got, Failure):
        return FileDownloadResponse(path=path, error=_error("download", path, got))
    return FileDownloadResponse(path=path, content=got)


def _response(out: ShellOutput) -> ExecuteResponse:
    text = out.stdout
    if out.stderr:
        if text and not text.endswith("\n"):
            text += "\n"
        text += "\n".join(f"[stderr] {line}" for line in out.stderr.rstrip("\n").split("\n"))
    for note in out.notes:
        text = f"{text.rstrip(chr(10))}\n[{note}]"
    return ExecuteResponse(output=text, exit_code=out.exit_code, truncated=out.truncated)
