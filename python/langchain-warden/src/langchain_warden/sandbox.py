"""`WardenSandbox`: a deepagents sandbox backend on one warden shell session."""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import json
import logging
import os
import threading
import time
from types import TracebackType
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

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

from ._errors import WardenError, WardenSnapshotError
from ._http import HttpSession
from ._lifecycle import (
    Registry,
    SandboxInfo,
    SandboxNotFound,
    list_sandboxes,
    live_session,
    new_id,
)
from ._process import McpError, Watcher, resolve_toolbox
from ._results import ShellOutput
from ._session import Channel, WardenSession, session_choices
from ._toolbox import DEFAULT_SHELL, SHELL_TOOLBOX
from ._transfer import Failure

logger = logging.getLogger(__name__)

# The JSON-RPC error code of a snapshot request warden refused (warden-mcp's `snapshot`).
_SNAPSHOT_REFUSED = -32011

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


SESSION_OPTIONS = frozenset(
    {
        "timeout",
        "chunk_size",
        "upload_chunk_size",
        "max_download_size",
        "max_output_size",
        "python_alias",
    }
)
"""The constructor's options that `connect` takes too: how this process uses the sandbox."""


class WardenSandbox(BaseSandbox):
    """A deepagents `SandboxBackendProtocol` backed by one session of a warden shell tool.

    `tool` names a docker or host shell tool of the toolbox whose policy has `session = true`
    (`SHELL_TOOLBOX`'s `shell` and `host-shell` do). One
    `warden serve` process is started per sandbox, and with it one session: one container (or
    one confined host shell) whose working directory, variables and `/tmp` last from one
    `execute` to the next. Several sandboxes share nothing.

    `execute` and `aexecute` calls made at once (from several threads or tasks) run at once,
    each its own process in the same sandbox: a command that starts while another one runs
    starts from the sandbox's working directory and exported variables as the last command
    that ended left them, and its own `cd` and `export` are not carried back. Commands that
    do not overlap keep the session's `cd` and variables. Each command keeps its own timeout,
    output and capture files; a timeout of one ends that one alone. (A policy with net grants,
    whose gate serves one command at a time, runs them one after another.)

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

    A detached sandbox (`detached=True`, or given `labels=` or `ttl=`) outlives its Python
    process: it is one MCP session of a `warden serve --http` on loopback that runs in the
    background, one per warden home and toolbox, started by the first detached sandbox that
    needs it. `WardenSandbox.connect(id)` reattaches to it from any process of the same user
    (its shell session as it was: files, working directory, variables);
    `WardenSandbox.list(labels=...)` finds the live ones; `delete()` ends one (its shell or
    container), and so does `ttl` seconds without a call. `close()` only lets go of it. Its
    record (`<home>/sandboxes/<id>.json`) and its server's URL and token
    (`<home>/sandboxes/servers/`) are readable by their owner alone, and the server answers
    nothing without the token. A detached sandbox whose server stopped is gone, not
    restarted.

    Args:
        tool: The shell tool's name (default `DEFAULT_SHELL`).
        toolbox: The folder of policy files (default `SHELL_TOOLBOX`).
        home: warden's home (component store, compile cache, call log); default warden's.
        warden: The `warden` binary; default: found as `find_warden` does.
        timeout: Seconds each command may run when `execute` is given none; at most the
            policy's `timeout` (more raises `ValueError`). Default, or 0: the policy's.
        chunk_size: Bytes per download command (and per read of a cut output). Downloads
            halve it when the policy's `output` limit cuts a chunk.
        upload_chunk_size: Bytes per upload command: its input, which the `output` limit
            does not hold (1 MiB by default).
        max_download_size: The most bytes `download_files` reads of one file (100 MiB by
            default); a larger file fails with `permission_denied`. It bounds the memory and
            the rounds (size / chunk) a download may take, whatever the sandbox answers.
        max_output_size: The most bytes `execute` answers of a command's stdout, and of its
            stderr (10 MiB by default); a larger one is cut, and left in the sandbox's
            `/tmp` for the model to read in parts.
        python_alias: Make `python` run `python3` where only `python3` exists.
        env: Variables for the session's shell, of the names the policy lets a caller set
            (`[grants] env_from_caller`; a literal `env` entry of the same name is the
            default); any other name raises `ValueError`, naming those the policy allows.
        image: The image a docker shell's container runs: the policy's `image` or one of
            its `images`; any other raises `ValueError`, naming those the policy allows.
            Default: the policy's `image`.
        detached: Make the sandbox outlive this process (see above).
        labels: Names and values to find the sandbox by (`list`); makes it detached.
        ttl: Seconds the sandbox may sit without a call before warden ends it (its shell or
            container gone); makes it detached. None: until `delete()`.
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
        upload_chunk_size: int = 1024 * 1024,
        max_download_size: int = 100 * 1024 * 1024,
        max_output_size: int = 10 * 1024 * 1024,
        python_alias: bool = True,
        env: Mapping[str, str] | None = None,
        image: str | None = None,
        detached: bool = False,
        labels: Mapping[str, str] | None = None,
        ttl: float | None = None,
    ) -> None:
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl={ttl}: pass a number of seconds above 0, or none")
        options: dict[str, Any] = {
            "timeout": timeout,
            "chunk_size": chunk_size,
            "upload_chunk_size": upload_chunk_size,
            "max_download_size": max_download_size,
            "max_output_size": max_output_size,
            "python_alias": python_alias,
        }
        self._tool = tool
        self._id = new_id(tool)
        # What `fork` makes another sandbox with.
        self._made: dict[str, Any] = {
            "tool": tool, "toolbox": toolbox, "home": home, "warden": warden, "env": env,
            "image": image, "detached": detached, "labels": labels, "ttl": ttl, **options,
        }
        self._registry: Registry | None = None
        if not (detached or labels is not None or ttl is not None):
            self._session = WardenSession(
                tool, toolbox, home, warden, env=env, image=image, **options
            )
            return
        registry = Registry(home)
        box = resolve_toolbox(toolbox)
        key, server = registry.server(box, warden)
        session_meta = session_choices(tool, env, image)

        opened: builtins.list[HttpSession] = []

        def channel() -> Channel:
            opened.append(
                HttpSession(server.url, server.token, session_meta=session_meta, idle=ttl)
            )
            return opened[-1]

        try:
            self._session = WardenSession(
                tool, box, registry.home, warden, env=env, image=image, channel=channel, **options
            )
        except BaseException:
            for session in opened:  # a sandbox that failed to start leaves no session behind
                with contextlib.suppress(WardenError):
                    session.delete()
            raise
        info = SandboxInfo(self._id, tool, str(box), dict(labels or {}), ttl, time.time())
        registry.add(info, key, cast(HttpSession, self._session.process).session_id)
        self._registry = registry

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
        if timeout:
            try:
                refused = self._refused(timeout, self._session.limit())
            except WardenError as err:
                refused = _warden_failed(err)
            if refused is not None:
                return refused
        return _response(self._session.execute(command, timeout, on_output))

    async def aexecute(
        self, command: str, *, timeout: int | None = None, on_output: Watcher | None = None
    ) -> ExecuteResponse:
        """The async twin of `execute` (`on_output` is called on warden's reader thread, not
        the event loop's)."""
        if timeout:
            try:
                refused = self._refused(timeout, await self._session.alimit())
            except WardenError as err:
                refused = _warden_failed(err)
            if refused is not None:
                return refused
        return _response(await self._session.aexecute(command, timeout, on_output))

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> str:
        """Snapshots this sandbox: its `/tmp` and its shell's working directory and exported
        variables (not running processes, functions or aliases), kept in warden's home outside
        every grant, and where the history of its read-write roots stood (their changes are
        each command's transaction). Answers the snapshot's id, which any process of the same
        home may `restore` or make a sandbox `from_snapshot` with. `WardenSnapshotError` says
        why not (its `kind`: `too_large` past the policy's `transfer`, `full` past the home's
        bounds)."""
        return _snapshot_id(_snapshot_answer(lambda: self._session.request(
            "warden/snapshot", {"tool": self._tool})))

    async def asnapshot(self) -> str:
        """The async twin of `snapshot`."""
        answer = await _asnapshot_answer(self._session.arequest(
            "warden/snapshot", {"tool": self._tool}))
        return _snapshot_id(answer)

    def restore(self, snap_id: str, *, force: bool = False) -> None:
        """Puts snapshot `snap_id` into this sandbox: its `/tmp` becomes the snapshot's
        (what is there now is removed), and its shell's directory and exported variables the
        snapshot's; the calls committed to its read-write roots since are undone, newest first.
        Refused (`WardenSnapshotError`) for a snapshot taken under another policy
        (`policy_changed`), one warden cannot find (`not_found`), an archive warden did not
        write (`refused`), or roots changed since by no call (`conflict`; with `force`, what
        changed is replaced)."""
        self._restore(snap_id, fork=False, force=force)

    async def arestore(self, snap_id: str, *, force: bool = False) -> None:
        """The async twin of `restore`."""
        await self._arestore(snap_id, fork=False, force=force)

    def _restore(self, snap_id: str, *, fork: bool, force: bool = False) -> None:
        params = {"tool": self._tool, "snapshot": snap_id, "fork": fork, "force": force}
        _snapshot_answer(lambda: self._session.request("warden/restore", params))

    async def _arestore(self, snap_id: str, *, fork: bool, force: bool = False) -> None:
        params = {"tool": self._tool, "snapshot": snap_id, "fork": fork, "force": force}
        await _asnapshot_answer(self._session.arequest("warden/restore", params))

    def fork(self) -> WardenSandbox:
        """A new sandbox (made with this one's arguments) holding this one's state now: a
        snapshot of this one, restored into the new one, which starts while the snapshot is
        taken. The two share nothing after. Its read-write roots are copies of this one's,
        made for it (in warden's home, gone with it): what it writes there reaches the real
        folders only through `commit()`."""
        forked = WardenSandbox(**self._made)
        try:
            starting = threading.Thread(target=forked._start, name="warden-fork-start")
            starting.start()
            try:
                snap_id = self.snapshot()
            finally:
                starting.join()
            forked._restore(snap_id, fork=True)
        except BaseException:
            forked.close()
            raise
        return forked

    async def afork(self) -> WardenSandbox:
        """The async twin of `fork`."""
        forked = await asyncio.to_thread(lambda: WardenSandbox(**self._made))
        try:
            starting = asyncio.ensure_future(forked._astart())
            try:
                snap_id = await self.asnapshot()
            finally:
                await starting
            await forked._arestore(snap_id, fork=True)
        except BaseException:
            forked.close()
            raise
        return forked

    def _start(self) -> None:
        # Only to save the time of a start (none where the fork's sandbox must see copies of
        # read-write roots, made at the restore): one that failed says why there.
        with contextlib.suppress(WardenError):
            self._session.request("warden/start", {"tool": self._tool, "fork": True})

    async def _astart(self) -> None:
        with contextlib.suppress(WardenError):
            await self._session.arequest("warden/start", {"tool": self._tool, "fork": True})

    def commit(self) -> str | None:
        """In a fork, applies to the real read-write roots what it changed in its copies of
        them since the fork (or its last commit), as one call: answers that call's id, which
        `warden undo` puts back (None: nothing to commit). `WardenSnapshotError` says why not
        (its `kind`: `conflict`, naming the paths the real roots changed meanwhile, and
        nothing is applied; `not_a_fork` for a sandbox that writes the real folders;
        `in_place` where its commands write the copies untracked: a docker shell whose
        user warden cannot act as)."""
        answer = _snapshot_answer(lambda: self._session.request(
            "warden/commit", {"tool": self._tool}))
        return _call_id(answer)

    async def acommit(self) -> str | None:
        """The async twin of `commit`."""
        answer = await _asnapshot_answer(self._session.arequest(
            "warden/commit", {"tool": self._tool}))
        return _call_id(answer)

    @classmethod
    def from_snapshot(cls, snap_id: str, **kwargs: Any) -> WardenSandbox:
        """A new sandbox (`kwargs` as the constructor takes them) holding snapshot
        `snap_id`, its read-write roots rewound as `restore` does."""
        return cls._made_from(snap_id, fork=False, **kwargs)

    @classmethod
    async def afrom_snapshot(cls, snap_id: str, **kwargs: Any) -> WardenSandbox:
        """The async twin of `from_snapshot`."""
        return await cls._amade_from(snap_id, fork=False, **kwargs)

    @classmethod
    def _made_from(cls, snap_id: str, *, fork: bool, **kwargs: Any) -> WardenSandbox:
        sandbox = cls(**kwargs)
        try:
            sandbox._restore(snap_id, fork=fork)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    @classmethod
    async def _amade_from(cls, snap_id: str, *, fork: bool, **kwargs: Any) -> WardenSandbox:
        sandbox = await asyncio.to_thread(lambda: cls(**kwargs))
        try:
            await sandbox._arestore(snap_id, fork=fork)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    # deepagents 0.7: `execute_with_offload` below keeps a large output in a file.
    enable_capture_offload = True

    def execute_with_offload(
        self,
        command: str,
        capture_path: str,
        *,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: int | None = None,
    ) -> Any:
        """deepagents 0.7's `execute` for large outputs (see `_offload`): the command runs in
        the session's shell as `execute` runs it; an output over `max_inline_bytes` is written
        to `capture_path` (or the same path under `/tmp` where the sandbox cannot write that)
        and answered as a preview naming where it lies."""
        from . import _offload

        response = self.execute(command, timeout=timeout)
        data = _offload_bytes(response, max_inline_bytes, max_capture_bytes)
        if data is None:
            return _offload.inline(response)
        for path in dict.fromkeys((capture_path, _offload.fallback(capture_path))):
            if self._session.upload(path, data) is None:
                return _offload.kept(response, capture_path, path)
        return _offload.inline(response)  # nowhere to keep it: whole, as without offload

    async def aexecute_with_offload(
        self,
        command: str,
        capture_path: str,
        *,
        max_inline_bytes: int,
        max_capture_bytes: int | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 (the command's, not an asyncio timeout)
    ) -> Any:
        """The async twin of `execute_with_offload`."""
        from . import _offload

        response = await self.aexecute(command, timeout=timeout)
        data = _offload_bytes(response, max_inline_bytes, max_capture_bytes)
        if data is None:
            return _offload.inline(response)
        for path in dict.fromkeys((capture_path, _offload.fallback(capture_path))):
            if await self._session.aupload(path, data) is None:
                return _offload.kept(response, capture_path, path)
        return _offload.inline(response)

    def write(self, file_path: str, content: str) -> WriteResult:
        """Creates `file_path` (and its parents) holding `content`; a file that exists is an
        error and stays as it is (deepagents 0.6's `write`, which the standard tests hold;
        0.7's overwrites)."""
        return _written(file_path, self._session.upload(file_path, content.encode(), new=True))

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """The async twin of `write`."""
        failure = await self._session.aupload(file_path, content.encode(), new=True)
        return _written(file_path, failure)

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
            failure = self._session.upload(path, data)
            responses.append(FileUploadResponse(path=path, error=_error("upload", path, failure)))
        return responses

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """The async twin of `upload_files`."""
        responses = []
        for path, data in files:
            failure = await self._session.aupload(path, data)
            responses.append(FileUploadResponse(path=path, error=_error("upload", path, failure)))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Reads each file out of the sandbox, at most `max_download_size` bytes of it;
        errors per file."""
        return [_downloaded(path, self._session.download(path)) for path in paths]

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """The async twin of `download_files`."""
        return [_downloaded(path, await self._session.adownload(path)) for path in paths]

    def _refused(self, timeout: float, limit: float) -> ExecuteResponse | None:
        """The error answering a `timeout` the policy does not allow, or None."""
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

    # -- life ------------------------------------------------------------------------------

    @property
    def process(self) -> Channel:
        """The `warden serve` process behind this sandbox (a new one after a restart); for a
        detached sandbox, its HTTP session of the background server."""
        return self._session.process

    @property
    def detached(self) -> bool:
        """Whether the sandbox outlives this process (`connect`, `list`, `delete`)."""
        return self._registry is not None

    def close(self) -> None:
        """Ends the session: warden removes its container or kills its shell. A detached
        sandbox is only let go of (it lives on: `delete()` ends it). Idempotent."""
        self._session.close()

    def delete(self) -> None:
        """Ends the sandbox: its shell or container, and a detached one's record. Idempotent."""
        if self._registry is not None:
            cast(HttpSession, self._session.process).delete()
            self._registry.remove(self._id)
        self.close()

    async def adelete(self) -> None:
        """The async twin of `delete`."""
        await asyncio.to_thread(self.delete)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> WardenSandbox:
        """Reattaches to the live detached sandbox `sandbox_id` (made in the warden home
        `home`, by this user, in any process): its shell session as it was. `options` are
        the constructor's `timeout`, `chunk_size`, `upload_chunk_size`, `max_download_size`,
        `max_output_size` and `python_alias`. `SandboxNotFound` when no live sandbox has that
        id; `PermissionError` when it is another user's."""
        unknown = set(options) - SESSION_OPTIONS
        if unknown:
            raise TypeError(f"connect() takes no {', '.join(sorted(unknown))}")
        registry = Registry(home)
        info, key, session = registry.find(sandbox_id)
        channel = live_session(registry, sandbox_id, key, session)
        if channel is None:
            raise SandboxNotFound(
                f"the sandbox {sandbox_id!r} is gone: it was deleted, or idle past its ttl, "
                "or its server stopped"
            )
        sandbox = cls.__new__(cls)
        sandbox._tool, sandbox._id, sandbox._registry = info.tool, info.id, registry
        sandbox._session = WardenSession(
            info.tool, info.toolbox, registry.home, warden, channel=lambda: channel, **options
        )
        return sandbox

    @classmethod
    def list(
        cls,
        labels: Mapping[str, str] | None = None,
        home: str | os.PathLike[str] | None = None,
    ) -> builtins.list[SandboxInfo]:
        """The live detached sandboxes of this user in the warden home `home` whose labels
        include `labels` (`list_sandboxes`)."""
        return list_sandboxes(labels, home)

    def __enter__(self) -> WardenSandbox:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _warden_failed(err: WardenError) -> ExecuteResponse:
    return ExecuteResponse(output=f"warden failed: {err}", exit_code=1, truncated=False)


def _snapshot_answer(request: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A snapshot request's answer, a refusal raised as `WardenSnapshotError`."""
    try:
        return request()
    except McpError as err:
        raise _snapshot_error(err) from None


async def _asnapshot_answer(request: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await request
    except McpError as err:
        raise _snapshot_error(err) from None


def _snapshot_error(err: McpError) -> WardenError:
    if err.code == _SNAPSHOT_REFUSED and isinstance(err.data, dict):
        return WardenSnapshotError(err.message, str(err.data.get("kind")))
    return err


def _snapshot_id(answer: dict[str, Any]) -> str:
    return str(answer["snapshot"]["id"])


def _call_id(answer: dict[str, Any]) -> str | None:
    call_id = answer.get("call_id")
    return None if call_id is None else str(call_id)


def _offload_bytes(
    response: ExecuteResponse, inline: int, cap: int | None
) -> bytes | None:
    """The bytes of an output to keep in a file (at most `cap`, which marks the answer
    truncated), or None for one small enough to answer whole."""
    data = response.output.encode()
    if len(data) <= inline:
        return None
    if cap is not None and len(data) > cap:
        response.truncated = True
        return data[:cap]
    return data


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
