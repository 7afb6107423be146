"""`WardenSandboxClient`: a sandbox client of the OpenAI Agents SDK (`SandboxAgent`) whose
sessions are warden shell sessions.

```python
from agents import Runner
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from langchain_warden.openai_agents import WardenSandboxClient, WardenSandboxClientOptions

sandbox = SandboxRunConfig(
    client=WardenSandboxClient(), options=WardenSandboxClientOptions(tool="host-shell")
)
result = await Runner.run(agent, "...", run_config=RunConfig(sandbox=sandbox))
```

Needs the `openai-agents` extra: `pip install 'langchain-warden[openai-agents]'`.
"""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import uuid
from pathlib import Path
from typing import Any, Literal, cast

from agents.sandbox import (
    ExecResult,
    ExecTimeoutError,
    Manifest,
    User,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    resolve_snapshot,
)
from agents.sandbox.session import (
    BaseSandboxSession,
    Dependencies,
    Instrumentation,
    SandboxSession,
    SandboxSessionState,
)
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.session.tar_workspace import shell_tar_exclude_args
from agents.sandbox.session.workspace_payloads import coerce_write_payload
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec
from agents.sandbox.util.tar_utils import UnsafeTarMemberError, validate_tar_bytes

from ._errors import WardenError
from ._results import ShellOutput
from ._session import WardenSession
from ._toolbox import DEFAULT_SHELL, SHELL_TOOLBOX
from ._transfer import Failure

__all__ = [
    "WORKSPACE",
    "WardenSandboxClient",
    "WardenSandboxClientOptions",
    "WardenSandboxSession",
    "WardenSandboxSessionState",
]

WORKSPACE = "/tmp/workspace"
"""The workspace root of a session whose manifest keeps the SDK's default root (`/workspace`):
the shipped shells grant `/workspace` (docker) or the package's folder (host) read-only, and
each session's `/tmp` is its own and writable."""

_SDK_ROOT = cast(str, Manifest.model_fields["root"].default)

# Where archives wait in the sandbox between the shell's `tar` and a transfer: the session's
# own /tmp, outside the workspace so that they are never part of it.
_ARCHIVES = "/tmp/.warden-openai-agents"


class WardenSandboxClientOptions(BaseSandboxClientOptions):
    """A new session's settings: which shell tool of the client's toolbox it runs in."""

    type: Literal["warden"] = "warden"
    tool: str = DEFAULT_SHELL
    """A docker or host shell tool with `session = true` (the shipped `shell`, a container of
    `warden-sandbox-debian:latest`, or `host-shell`, a confined host process)."""


class WardenSandboxSessionState(SandboxSessionState):
    """What a session's state records beside the SDK's: the shell tool it runs in."""

    type: Literal["warden"] = "warden"
    tool: str = DEFAULT_SHELL


class WardenSandboxSession(BaseSandboxSession):
    """An SDK sandbox session on one warden shell session (see `WardenSandboxClient`).

    `exec` runs each command in a subshell of the session's shell, in the workspace root, with
    the manifest's environment; `read` and `write` move bytes through that shell (base64 in
    chunks, any size up to the client's `max_download_size`); `persist_workspace` and
    `hydrate_workspace` are a `tar` of the workspace root moved the same way.
    """

    state: WardenSandboxSessionState

    def __init__(self, *, state: WardenSandboxSessionState, start: dict[str, Any]) -> None:
        self.state = state
        self._start = start
        self._warden: WardenSession | None = None
        self._limit = 0.0
        self._exports = ""
        self._root_ready = False

    # -- life ------------------------------------------------------------------------------

    async def _ensure_backend_started(self) -> None:
        if self._warden is not None and self._warden.alive:
            return
        # Starting warden blocks (a process, its toolbox, `warden audit` for the timeout).
        warden = await asyncio.to_thread(WardenSession, self.state.tool, **self._start)
        try:
            self._limit = await warden.alimit()
        except WardenError:
            await asyncio.to_thread(warden.close)
            raise
        self._warden = warden
        environment = await self.state.manifest.environment.resolve()
        self._exports = "".join(
            f"export {shlex.quote(f'{name}={value}')}; " for name, value in environment.items()
        )

    async def _after_start(self) -> None:
        self._root_ready = True

    async def _after_start_failed(self) -> None:
        await self._shutdown_backend()

    async def _shutdown_backend(self) -> None:
        warden, self._warden = self._warden, None
        self._root_ready = False
        if warden is not None:
            await asyncio.to_thread(warden.close)

    async def running(self) -> bool:
        return self._warden is not None and self._warden.alive

    def _should_compute_snapshot_fingerprint_on_persist(self) -> bool:
        # The fingerprint lets a resume skip restoring a workspace its backend kept; a warden
        # session never outlives its process, so a resume always restores.
        return False

    # -- commands --------------------------------------------------------------------------

    def _prepare_exec_command(
        self, *command: str | Path, shell: bool | list[str], user: str | User | None
    ) -> list[str]:
        if user:
            raise _no_users()
        return super()._prepare_exec_command(*command, shell=shell, user=None)

    async def _exec_internal(
        self, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        warden = self._session()
        # A subshell: what a command does to its shell (`cd`, variables, `exit`) ends with it,
        # as each of the SDK's commands expects a process of its own. In the workspace root
        # once it exists, as Docker's `workdir`.
        root = f"cd -- {shlex.quote(self.state.manifest.root)} && " if self._root_ready else ""
        text = f"({self._exports}{root}{shlex.join(str(part) for part in command)})"
        # The policy's timeout bounds every command: a longer one asked for runs under it.
        seconds = min(timeout, self._limit) if timeout else None
        out = await warden.aexecute(text, seconds)
        if out.stopped and out.exit_code == 124:
            raise ExecTimeoutError(
                command=command, timeout_s=seconds or self._limit, context={"notes": out.notes}
            )
        return ExecResult(
            stdout=out.stdout.encode(), stderr=_stderr(out).encode(), exit_code=out.exit_code
        )

    # -- files -----------------------------------------------------------------------------

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        if user is not None:
            raise _no_users()
        target = await self._validate_path_access(path)
        got = await self._session().adownload(target.as_posix())
        if isinstance(got, Failure):
            if got.code == "file_not_found":
                raise WorkspaceReadNotFoundError(path=path)
            raise WorkspaceArchiveReadError(path=path, context=_failed(got))
        return io.BytesIO(got)

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        if user is not None:
            raise _no_users()
        payload = coerce_write_payload(path=path, data=data)
        target = await self._validate_path_access(path, for_write=True)
        failure = await self._session().aupload(target.as_posix(), payload.stream.read())
        if failure is not None:
            raise WorkspaceArchiveWriteError(path=target, context=_failed(failure))

    async def persist_workspace(self) -> io.IOBase:
        """The workspace root as a tar of workspace-relative members, less the manifest's
        ephemeral paths, made by the sandbox's `tar` (as the SDK's shell-only backends do)."""
        warden = self._session()
        root = self._workspace_root_path()
        archive = f"{_ARCHIVES}/{uuid.uuid4().hex}.tar"
        excludes = " ".join(shell_tar_exclude_args(self._persist_workspace_skip_relpaths()))
        try:
            made = await warden.aexecute(
                f"(mkdir -p {_ARCHIVES} && tar {excludes} -C {shlex.quote(root.as_posix())} "
                f"-cf {archive} .)"
            )
            if made.exit_code != 0:
                raise WorkspaceArchiveReadError(path=root, context=_tar_failed(made))
            got = await warden.adownload(archive)
        finally:
            await warden.aexecute(f"rm -f -- {archive}")
        if isinstance(got, Failure):
            raise WorkspaceArchiveReadError(path=root, context=_failed(got))
        return io.BytesIO(got)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """Extracts a tar as `persist_workspace` makes it into the workspace root, once it
        has passed the SDK's checks of an archive (no member out of the root, no link out)."""
        warden = self._session()
        root = self._workspace_root_path()
        raw = data.read()
        if isinstance(raw, str):
            raw = raw.encode()
        try:
            validate_tar_bytes(bytes(raw), allow_external_symlink_targets=False)
        except UnsafeTarMemberError as err:
            context = {"reason": err.reason, "member": err.member}
            raise WorkspaceArchiveWriteError(path=root, context=context, cause=err) from err
        archive = f"{_ARCHIVES}/{uuid.uuid4().hex}.tar"
        try:
            failure = await warden.aupload(archive, bytes(raw))
            if failure is not None:
                raise WorkspaceArchiveWriteError(path=root, context=_failed(failure))
            quoted = shlex.quote(root.as_posix())
            done = await warden.aexecute(f"(mkdir -p -- {quoted} && tar -C {quoted} -xf {archive})")
            if done.exit_code != 0:
                raise WorkspaceArchiveWriteError(path=root, context=_tar_failed(done))
        finally:
            await warden.aexecute(f"rm -f -- {archive}")

    def _session(self) -> WardenSession:
        if self._warden is None:
            raise WardenError(
                "this sandbox session has no warden session: start it first (`async with "
                "session:`, or let `Runner` start it)"
            )
        return self._warden


class WardenSandboxClient(BaseSandboxClient[WardenSandboxClientOptions | None]):
    """The OpenAI Agents SDK's sandbox client for warden: each session is one session of a
    warden shell tool, in its own `warden serve` process.

    A `SandboxAgent` run with `RunConfig(sandbox=SandboxRunConfig(client=WardenSandboxClient(),
    options=WardenSandboxClientOptions(tool=...)))` runs its shell commands, file reads and
    writes and patches in that session, a container (`shell`) or a confined host process
    (`host-shell`) with exactly what the tool's policy grants, and as the policy's user (a
    manifest's `users`, `groups` or an agent's `run_as` are refused). The workspace root is
    the manifest's, or `WORKSPACE` (`/tmp/workspace`) for the SDK's default `/workspace`; it
    must be writable by the policy's user.

    The workspace is persisted and hydrated as tar archives, as the SDK's own clients do: when
    the session stops, a `tar` of the root is moved out of the sandbox into the run's snapshot;
    a session resumed from its state starts a new warden session and extracts that archive
    into it. An archive waits in the sandbox's `/tmp` on its way, beside the workspace (a host
    shell's `/tmp` holds 64 MiB), and may be at most `max_download_size` bytes.

    Each command runs with the timeout the SDK asks for, at most the policy's `timeout`.

    Args:
        toolbox: The folder of policy files (default `SHELL_TOOLBOX`).
        home: warden's home; default warden's.
        warden: The `warden` binary; default: found as `find_warden` does.
        max_download_size: The most bytes a file read or a workspace archive may have
            (100 MiB by default).
        max_output_size: The most bytes of a command's stdout, and of its stderr, that `exec`
            answers (10 MiB by default); warden's `output` limit cuts nothing below it.
        python_alias: Make `python` run `python3` where only `python3` exists.
        instrumentation: The SDK's session instrumentation (events), as its clients take it.
        dependencies: The SDK's session dependencies (e.g. a remote snapshot's client).
    """

    backend_id = "warden"
    supports_default_options = True

    def __init__(
        self,
        toolbox: str | os.PathLike[str] = SHELL_TOOLBOX,
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        *,
        max_download_size: int = 100 * 1024 * 1024,
        max_output_size: int = 10 * 1024 * 1024,
        python_alias: bool = True,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self._start: dict[str, Any] = {
            "toolbox": toolbox,
            "home": home,
            "warden": warden,
            "max_download_size": max_download_size,
            "max_output_size": max_output_size,
            "python_alias": python_alias,
        }
        self._instrumentation = instrumentation or Instrumentation()
        self._dependencies = dependencies

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: WardenSandboxClientOptions | None = None,
    ) -> SandboxSession:
        """A new session (warden starts when the session does)."""
        options = options or WardenSandboxClientOptions()
        manifest = _supported(manifest or Manifest())
        self._validate_manifest_for_create(manifest)
        if manifest.root == _SDK_ROOT:
            manifest = manifest.model_copy(update={"root": WORKSPACE}, deep=True)
        session_id = uuid.uuid4()
        state = WardenSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            tool=options.tool,
        )
        inner = WardenSandboxSession(state=state, start=self._start)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Ends the session's warden session: warden removes its container or its shell."""
        inner = session._inner
        if not isinstance(inner, WardenSandboxSession):
            raise TypeError(
                f"WardenSandboxClient.delete takes a session it made, not a "
                f"{type(inner).__name__}"
            )
        await inner.shutdown()
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """A session from a saved state: a new warden session, whose workspace the state's
        snapshot hydrates when the session starts."""
        if not isinstance(state, WardenSandboxSessionState):
            raise TypeError(
                f"WardenSandboxClient.resume takes a WardenSandboxSessionState, not a "
                f"{type(state).__name__}: resume a session with the client that made it"
            )
        state.assert_path_grants_rebound()
        _supported(state.manifest)
        inner = WardenSandboxSession(state=state, start=self._start)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        """A session state from `serialize_session_state`'s payload."""
        return self._deserialize_session_state_payload(payload, WardenSandboxSessionState)


def _supported(manifest: Manifest) -> Manifest:
    """`manifest`, or `ValueError` for what a warden session cannot give."""
    if manifest.users or manifest.groups:
        raise ValueError(
            "a warden session cannot make the manifest's users and groups: every command runs "
            "as its policy's user (the policy's `user =`); leave `users` and `groups` out"
        )
    grant = next((g for g in manifest.extra_path_grants if g.host_path is not None), None)
    if grant is not None:
        raise ValueError(
            f"a warden session cannot map the host path of the grant {grant.path!r}: grant "
            "the folder in the tool's policy ([grants] fs) and omit host_path"
        )
    return manifest


def _no_users() -> ValueError:
    return ValueError(
        "a warden session runs every command as its policy's user (the policy's `user =`): "
        "leave the agent's run_as and the call's user unset"
    )


def _stderr(out: ShellOutput) -> str:
    """stderr with warden's notes after it (an output cut, a shell that ended), one a line."""
    notes = "".join(f"[{note}]\n" for note in out.notes)
    if notes and out.stderr and not out.stderr.endswith("\n"):
        return f"{out.stderr}\n{notes}"
    return out.stderr + notes


def _failed(failure: Failure) -> dict[str, object]:
    context: dict[str, object] = {"reason": failure.code}
    if failure.detail:
        context["detail"] = failure.detail
    return context


def _tar_failed(out: ShellOutput) -> dict[str, object]:
    return {"reason": "tar_failed", "exit_code": out.exit_code, "stderr": _stderr(out)}
