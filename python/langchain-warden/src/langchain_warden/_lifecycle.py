"""Sandboxes that outlive their process: the background server that holds them, and the
registry that finds them by id or label.

A detached sandbox is one MCP session of a `warden serve --http 127.0.0.1:0` started in the
background, one per warden home and toolbox, by the first detached sandbox that needs it (in a
session of its own: it outlives the Python process that started it). Its URL, bearer token and
process id are in `<home>/sandboxes/servers/<key>.json`, which warden itself writes (0600);
each sandbox's record, `<home>/sandboxes/<id>.json` (0600), names its session, server, tool,
toolbox, labels, ttl and time of creation. `<home>/sandboxes` and `servers` are 0700: only
their owner (and root) can read an id's session or a token, and the server answers no
request without the token.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._binary import find_warden
from ._errors import WardenError, WardenStartError
from ._http import HttpSession


class SandboxNotFound(WardenError):
    """No live sandbox has this id (it was deleted, idle past its ttl, or never made here)."""


@dataclass(frozen=True)
class SandboxInfo:
    """A detached sandbox as its registry record has it."""

    id: str
    tool: str
    toolbox: str
    labels: dict[str, str] = field(default_factory=dict)
    ttl: float | None = None
    created: float = 0.0
    """Seconds since the epoch."""


@dataclass(frozen=True)
class Server:
    """A background `warden serve --http`, as its address file has it."""

    url: str
    token: str
    pid: int


SERVER_IDLE = 600.0
"""Seconds a background server goes on with no sandbox and no request before it stops (a new
sandbox starts another)."""


def warden_home(home: str | os.PathLike[str] | None) -> Path:
    """The warden home as warden resolves it: `home`, else `WARDEN_HOME`, else
    `$XDG_DATA_HOME/warden`, else `~/.local/share/warden`."""
    if home is not None:
        return Path(home).expanduser().resolve()
    if os.environ.get("WARDEN_HOME"):
        return Path(os.environ["WARDEN_HOME"]).expanduser().resolve()
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]).resolve() / "warden"
    return Path.home() / ".local" / "share" / "warden"


def new_id(tool: str) -> str:
    """A sandbox id: `warden-<tool>-<random>`."""
    return f"warden-{tool}-{uuid.uuid4().hex[:12]}"


class Registry:
    """The detached sandboxes of one warden home, and their servers."""

    def __init__(self, home: str | os.PathLike[str] | None) -> None:
        self.home = warden_home(home)
        self.root = self.home / "sandboxes"
        self.servers = self.root / "servers"

    # -- servers -------------------------------------------------------------------------

    def server(self, toolbox: Path, warden: str | os.PathLike[str] | None) -> tuple[str, Server]:
        """The server of `toolbox` in this home (its key and address), started when none
        answers."""
        key = hashlib.sha256(str(toolbox).encode()).hexdigest()[:16]
        _private_dir(self.root)
        _private_dir(self.servers)
        with _locked(self.servers / f"{key}.lock"):
            address = self.servers / f"{key}.json"
            found = self._answering(address)
            if found is None:
                found = self._start(address, toolbox, warden)
        return key, found

    def server_of(self, key: str) -> Server:
        """The server `key` names; `SandboxNotFound` when it is not running."""
        found = self._answering(self.servers / f"{_safe(key)}.json")
        if found is None:
            raise SandboxNotFound(f"the sandbox's server ({key}) is no longer running")
        return found

    def _answering(self, address: Path) -> Server | None:
        """The server `address` names, if it answers with its token."""
        try:
            data = json.loads(address.read_text())
            found = Server(str(data["url"]), str(data["token"]), int(data["pid"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise WardenError(f"cannot read the sandbox server's address {address}: {err}")
        try:
            # A session no server holds: 404 from a server that took the token.
            HttpSession(found.url, found.token, session_id="probe").held()
        except WardenError:
            return None
        return found

    def _start(self, address: Path, toolbox: Path, warden: str | os.PathLike[str] | None) -> Server:
        """Starts the server of `toolbox` in the background and waits for its address."""
        address.unlink(missing_ok=True)
        argv = [
            find_warden(warden),
            "serve",
            "--toolbox",
            str(toolbox),
            "--home",
            str(self.home),
            "--http",
            "127.0.0.1:0",
            "--session-idle",
            "0",
            "--stop-idle",
            f"{SERVER_IDLE:g}s",
            "--address-file",
            str(address),
        ]
        log = address.with_suffix(".log")
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            # A session of its own, its output in the log: the server outlives this process
            # and is no child that this process's end would take along.
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=descriptor,
                stderr=descriptor,
                start_new_session=True,
            )
        except OSError as err:
            raise WardenStartError(f"could not start {argv[0]}: {err}") from err
        finally:
            os.close(descriptor)
        _BACKGROUND.append(process)  # no "still running" warning when this object goes
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = self._answering(address)
            if found is not None:
                return found
            if process.poll() is not None:
                break
            time.sleep(0.02)
        tail = log.read_text(errors="replace")[-2000:]
        raise WardenStartError(f"`{' '.join(argv)}` did not start serving; its log:\n{tail}")

    # -- records -------------------------------------------------------------------------

    def add(self, info: SandboxInfo, server: str, session: str) -> None:
        """Records a new sandbox."""
        record = {
            "id": info.id,
            "tool": info.tool,
            "toolbox": info.toolbox,
            "labels": info.labels,
            "ttl": info.ttl,
            "created": info.created,
            "server": server,
            "session": session,
        }
        _write_private(self._record(info.id), json.dumps(record))

    def find(self, sandbox_id: str) -> tuple[SandboxInfo, str, str]:
        """The sandbox `sandbox_id` names: its record, its server's key and its session;
        `SandboxNotFound` when there is none, `PermissionError` when it is another user's."""
        try:
            data = json.loads(self._record(sandbox_id).read_text())
        except FileNotFoundError:
            raise SandboxNotFound(
                f"no sandbox {sandbox_id!r} in the warden home {self.home}: it was deleted, "
                "or idle past its ttl, or made with another home"
            ) from None
        return _info(data), str(data["server"]), str(data["session"])

    def remove(self, sandbox_id: str) -> None:
        """Forgets a sandbox."""
        self._record(sandbox_id).unlink(missing_ok=True)

    def records(self) -> Iterator[str]:
        """The ids of the recorded sandboxes."""
        if self.root.is_dir():
            for path in sorted(self.root.glob("*.json")):
                yield path.stem

    def _record(self, sandbox_id: str) -> Path:
        return self.root / f"{_safe(sandbox_id)}.json"


_BACKGROUND: list[subprocess.Popen[bytes]] = []


def _info(data: Mapping[str, Any]) -> SandboxInfo:
    ttl = data.get("ttl")
    return SandboxInfo(
        id=str(data["id"]),
        tool=str(data["tool"]),
        toolbox=str(data["toolbox"]),
        labels={str(k): str(v) for k, v in (data.get("labels") or {}).items()},
        ttl=None if ttl is None else float(ttl),
        created=float(data.get("created") or 0.0),
    )


def _safe(name: str) -> str:
    """`name` as a file name of the registry: no path can be smuggled in through an id."""
    if not name or "/" in name or name.startswith(".") or "\0" in name:
        raise SandboxNotFound(f"{name!r} is no sandbox id")
    return name


def _private_dir(path: Path) -> None:
    """Makes `path` a folder only its owner may enter (0700); refuses one of another user."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid != os.geteuid():
        raise WardenError(f"{path} belongs to another user: refusing to keep sandboxes there")
    path.chmod(0o700)


def _write_private(path: Path, text: str) -> None:
    """Writes `path` whole (a temporary file renamed into place), readable by its owner
    alone (0600)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.replace(temporary, path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path` (so two processes do not start two servers)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)



def list_sandboxes(
    labels: Mapping[str, str] | None = None, home: str | os.PathLike[str] | None = None
) -> list[SandboxInfo]:
    """The live detached sandboxes of this user in the warden home `home` (default warden's)
    whose labels include `labels`, oldest first. Records of sandboxes that are gone (deleted
    elsewhere, idle past their ttl, or their server stopped) are removed on the way."""
    registry = Registry(home)
    wanted = dict(labels or {})
    found = []
    for sandbox_id in registry.records():
        try:
            info, key, session = registry.find(sandbox_id)
        except SandboxNotFound:
            continue
        if any(info.labels.get(k) != v for k, v in wanted.items()):
            continue
        if live_session(registry, sandbox_id, key, session) is not None:
            found.append(info)
    return sorted(found, key=lambda i: i.created)


def delete_sandbox(sandbox_id: str, home: str | os.PathLike[str] | None = None) -> None:
    """Ends the detached sandbox `sandbox_id` (its shell or container) and removes its
    record; `SandboxNotFound` when no live sandbox has that id."""
    registry = Registry(home)
    _, key, session = registry.find(sandbox_id)
    channel = live_session(registry, sandbox_id, key, session)
    if channel is None:
        raise SandboxNotFound(f"the sandbox {sandbox_id!r} is gone already")
    channel.delete()
    registry.remove(sandbox_id)


def live_session(registry: Registry, sandbox_id: str, key: str, session: str) -> HttpSession | None:
    """The session of the sandbox `sandbox_id`, if its server still holds it; else None,
    and its record removed."""
    try:
        server = registry.server_of(key)
        channel = HttpSession(server.url, server.token, session_id=session)
        if channel.held():
            return channel
    except SandboxNotFound:
        pass
    registry.remove(sandbox_id)
    return None
