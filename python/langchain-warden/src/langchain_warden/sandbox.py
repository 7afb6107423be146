"""`WardenSandbox`: a deepagents sandbox backend on one warden shell session."""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Generator
from types import TracebackType
from typing import Any, TypeVar, cast

from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileInfo,
    FileOperationError,
    FileUploadResponse,
    GlobResult,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox

from . import _capture
from ._audit import policy_timeout
from ._errors import WardenError, WardenProcessError, WardenStartError
from ._process import WardenProcess, Watcher, how_it_ended
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

# A dead warden process is replaced at most this many times within this many seconds.
_RESTARTS = 3
_RESTART_WINDOW = 60.0

# Spent output files are removed, in one `rm` before a command, once this many wait.
_SPENT_BATCH = 16

# deepagents 0.6's glob (0.7's answers absolute paths, and files only): paths relative to the
# search root, directories included and marked.
_GLOB = """python3 -c "
import glob
import os
import json
import base64

path = base64.b64decode('{path}').decode('utf-8')
pattern = base64.b64decode('{pattern}').decode('utf-8')

try:
    os.chdir(path)
    matches = sorted(glob.glob(pattern, recursive=True))
    for m in matches:
        try:
            st = os.stat(m)
        except OSError:
            continue
        print(json.dumps({{
            'path': m,
            'size': st.st_size,
            'mtime': st.st_mtime,
            'is_dir': os.path.isdir(m),
        }}))
except FileNotFoundError:
    print(json.dumps({{'error': 'path_not_found'}}))
except NotADirectoryError:
    print(json.dumps({{'error': 'not_a_directory'}}))
except PermissionError:
    print(json.dumps({{'error': 'permission_denied'}}))
" 2>&1"""


class WardenSandbox(BaseSandbox):
    """A deepagents `SandboxBackendProtocol` backed by one session of a warden shell tool.

    `tool` names a docker or host shell tool of the toolbox whose policy has `session = true`
    (`SHELL_TOOLBOX`'s `shell` and `host-shell` do). One
    `warden serve` process is started per sandbox, and with it one session: one container (or
    one confined host shell) whose working directory, variables and `/tmp` last from one
    `execute` to the next. Several sandboxes share nothing.

    `execute` answers a command's whole output whatever the policy's `output` limit, up to
    `max_output_size` bytes a stream: the command's stdout and stderr go to files in the
    sandbox's `/tmp`, and what the limit cuts is read from them in chunks; an output cut all
    the same says so, and how to get the rest. So deepagents' `read`, `ls`, `grep` and `edit`,
    which run through `execute`, work on files of any size.

    `upload_files` and `download_files` move bytes through that shell itself (base64 in
    chunks), so they reach the sandbox's own `/tmp`, not only the folders the policy grants.
    Each chunk goes through a fresh `/bin/sh` with an empty environment, so functions,
    aliases or a `PATH` that earlier commands left in the session cannot stand in for the
    programs moving it; and answers that do not add up (a size that is no number or above
    `max_download_size`, a chunk that is not the bytes asked for, a file that changed
    meanwhile) fail that file with `permission_denied`, logged with what went wrong on this
    module's logger.

    Where deepagents 0.7's `BaseSandbox` and langchain-tests' `SandboxIntegrationTests`
    disagree, it answers as the tests (and deepagents 0.6) do: `write` refuses a file that
    exists, and `glob` answers paths relative to its root, directories included.

    When the `warden serve` process dies, the call then running answers that it was lost,
    and the next call starts a new process, in a new session (its answer says so), at most
    3 times a minute; after that, calls answer an error until the minute has passed.

    `close()` (or leaving a `with` block, or interpreter exit) ends the process, and warden
    removes the session's container or kills its shell's processes.

    Args:
        tool: The shell tool's name (default `DEFAULT_SHELL`).
        toolbox: The folder of policy files (default `SHELL_TOOLBOX`).
        home: warden's home (component store, compile cache, call log); default warden's.
        warden: The `warden` binary; default: found as `find_warden` does.
        timeout: Seconds each command may run when `execute` is given none; at most the
            policy's `timeout` (more raises `ValueError`). Default, or 0: the policy's.
        chunk_size: Bytes per transfer command. Downloads halve it when the policy's
            `output` limit cuts a chunk.
        max_download_size: The most bytes `download_files` reads of one file (100 MiB by
            default); a larger file fails with `permission_denied`. It bounds the memory and
            the rounds (size / chunk) a download may take, whatever the sandbox answers.
        max_output_size: The most bytes `execute` answers of a command's stdout, and of its
            stderr (10 MiB by default); a larger one is cut, and left in the sandbox's
            `/tmp` for the model to read in parts.
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
        max_output_size: int = 10 * 1024 * 1024,
        python_alias: bool = True,
    ) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout={timeout}: pass a number of seconds above 0, or none")
        self._tool = tool
        self._start: dict[str, Any] = {"toolbox": toolbox, "home": home, "warden": warden}
        self._timeout = timeout
        self._policy_timeout: float | None = None
        self._chunk = chunk_size
        self._max_download = max_download_size
        self._max_output = max_output_size
        self._prelude = _PRELUDE if python_alias else ""
        self._lock = threading.Lock()
        self._restarts: collections.deque[float] = collections.deque()
        self._spent: list[str] = []
        self._closed = False
        self._process = WardenProcess(**self._start)
        # The finalizer closes whichever process is current then.
        self._current = [self._process]
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
                limit = self._limit()
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
        self._id = f"warden-{tool}-{uuid.uuid4().hex[:12]}"

    # -- the protocol ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        """Unique for each sandbox: `warden-<tool>-<random>`."""
        return self._id

    def execute(
        self, command: str, *, timeout: int | None = None, on_output: Watcher | None = None
    ) -> ExecuteResponse:
        """Runs `command` in the session's shell: its whole stdout, then stderr's lines marked
        `[stderr]`, the exit code (124 for a timeout), and whether an output was cut. A
        `timeout` above the policy's answers an error naming it, and runs nothing.

        With `on_output`, each piece of the output is handed to `on_output(stream, text)`
        (`stream` is `stdout` or `stderr`) as the shell prints it, on warden's reader thread
        (keep it quick). The command then runs as it is, its output not captured to files:
        the answer (and the stream) carry what the policy's `output` limit keeps, and say
        when it cut some."""
        refused = self._refused(timeout) if timeout else None
        if refused is not None:
            return refused
        if on_output is not None:
            out = self._run(self._prelude + command, timeout, on_output)
            return _response(_capture.cut(out))
        spent = self._take_spent()
        try:
            captured = self._drive(self._capture(command, spent), timeout)
        except BaseException:
            self._spend(spent)  # not removed after all: a later command will
            raise
        self._spend(captured.spent)
        return _response(captured.output)

    async def aexecute(
        self, command: str, *, timeout: int | None = None, on_output: Watcher | None = None
    ) -> ExecuteResponse:
        """The async twin of `execute` (`on_output` is called on warden's reader thread, not
        the event loop's)."""
        refused = None
        if timeout:  # the first one asks `warden audit`, which blocks
            known = self._policy_timeout is not None
            refused = self._refused(timeout) if known else await asyncio.to_thread(
                self._refused, timeout
            )
        if refused is not None:
            return refused
        if on_output is not None:
            out = await self._arun(self._prelude + command, timeout, on_output)
            return _response(_capture.cut(out))
        spent = self._take_spent()
        try:
            captured = await self._adrive(self._capture(command, spent), timeout)
        except BaseException:
            self._spend(spent)  # not removed after all: a later command will
            raise
        self._spend(captured.spent)
        return _response(captured.output)

    def write(self, file_path: str, content: str) -> WriteResult:
        """Creates `file_path` (and its parents) holding `content`; a file that exists is an
        error and stays as it is (deepagents 0.6's `write`, which the standard tests hold;
        0.7's overwrites)."""
        failure = self._drive(upload(file_path, content.encode("utf-8"), self._chunk, new=True))
        return _written(file_path, failure)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """The async twin of `write`."""
        steps = upload(file_path, content.encode("utf-8"), self._chunk, new=True)
        return _written(file_path, await self._adrive(steps))

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """The files and directories under `path` (default `/`) matching `pattern` (`**`
        recursive), sorted, as paths relative to `path` (deepagents 0.6's `glob`, which the
        standard tests hold; 0.7's answers absolute paths, and files only)."""
        root = path or "/"
        return _globbed(self.execute(_glob_command(pattern, root)), root)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        """The async twin of `glob`."""
        root = path or "/"
        return _globbed(await self.aexecute(_glob_command(pattern, root)), root)

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

    def _refused(self, timeout: float) -> ExecuteResponse | None:
        """The error answering a `timeout` the policy does not allow, or None."""
        try:
            limit = self._limit()
        except WardenError as err:
            return ExecuteResponse(output=f"warden failed: {err}", exit_code=1, truncated=False)
        if 0 < timeout <= limit:
            return None
        return ExecuteResponse(
            output=(
                f"Error: timeout={timeout:g} is not allowed: a command of {self._tool!r} may "
                f"run at most {limit:g} s (its policy's timeout); pass a timeout above 0 and "
                f"at most {limit:g}, or none. The command did not run."
            ),
            exit_code=1,
            truncated=False,
        )

    def _limit(self) -> float:
        """The policy's timeout in seconds, read once from `warden audit --json`."""
        if self._policy_timeout is None:
            self._policy_timeout = policy_timeout(self._tool, **self._start)
        return self._policy_timeout

    def _arguments(self, command: str, timeout: float | None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"command": command}
        seconds = timeout if timeout is not None else self._timeout
        if seconds:  # 0 or None: the policy's own limit
            arguments["timeout"] = seconds
        return arguments

    def _live(self) -> tuple[WardenProcess, str | None]:
        """The process to call, and a note when it is a new one in place of one that died."""
        with self._lock:
            process = self._process
            if process.alive or self._closed:
                return process, None
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
            self._process = self._current[0] = WardenProcess(**self._start)
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
                call_params(self._tool, self._arguments(command, timeout)),
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
                call_params(self._tool, self._arguments(command, timeout)),
                watcher=watcher,
            )
        except WardenError as err:
            return self._unanswered(err, process)
        return _noted(parse_shell(CallResult.from_mcp(result)), note)

    def _unanswered(self, err: WardenError, process: WardenProcess | None) -> ShellOutput:
        """The answer of a call warden did not answer: lost with its process when that died
        under it (and the sandbox was not being closed), else warden's failure."""
        if isinstance(err, WardenProcessError) and process is not None and not self._closed:
            return _lost(process)
        return _failed(err)

    def _shrink(self) -> None:
        if self._chunk <= 1024:
            raise WardenError(
                f"the output limit of {self._tool!r} is too small to download through: "
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
    def process(self) -> WardenProcess:
        """The `warden serve` process behind this sandbox (a new one after a restart)."""
        return self._process

    def close(self) -> None:
        """Ends the session: warden removes its container or kills its shell. Idempotent."""
        self._closed = True
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


def _close_current(current: list[WardenProcess]) -> None:
    current[0].close()


def _failed(err: WardenError) -> ShellOutput:
    """The answer of a call warden did not answer."""
    return ShellOutput("", f"warden failed: {err}", 1, [], False, stopped=True)


def _lost(process: WardenProcess) -> ShellOutput:
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


def _written(path: str, failure: Failure | None) -> WriteResult:
    """`write`'s answer, worded as deepagents 0.6's."""
    if failure is None:
        return WriteResult(path=path)
    if failure.code == "exists":
        return WriteResult(error=f"Error: File already exists: {path!r}")
    return WriteResult(error=f"Failed to write file '{path}': {_error('write', path, failure)}")


def _glob_command(pattern: str, root: str) -> str:
    return _GLOB.format(path=_b64(root), pattern=_b64(pattern))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _globbed(result: ExecuteResponse, root: str) -> GlobResult:
    """`glob`'s answer from its script's JSON lines, as deepagents 0.6 reads them: an error
    record wins over the matches, and lines that are no JSON are skipped."""
    matches: list[FileInfo] = []
    error: str | None = None
    for line in result.output.strip().split("\n"):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "error" in data:
            error = data["error"]
        elif isinstance(data, dict) and "path" in data:
            matches.append({"path": data["path"], "is_dir": data["is_dir"]})
    if error is not None:
        return GlobResult(matches=None, error=f"Path '{root}': {error}")
    return GlobResult(matches=matches)


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
