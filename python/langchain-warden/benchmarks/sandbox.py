"""One side-by-side run of a deep agent's sandbox costs: `WardenSandbox` on the host shell, the
docker shell and the docker shell with a warm pool, beside deepagents' unsandboxed
`LocalShellBackend` (the floor).

    WARDEN_BIN=target/release/warden python python/langchain-warden/benchmarks/sandbox.py

Run from the root of a warden checkout, in a venv holding langchain-warden and its test
requirements (deepagents). Docker rows need an engine and warden's Debian sandbox image
(`warden sandbox-image --debian`). It prints a Markdown table, median and p90 of each figure:

- creation + first command: the backend made and `execute("true")` answered (a detached
  sandbox is deleted after, a pooled container of the shared server taking its place);
- a later command: `execute("true")` on a live backend;
- 1 MiB up and 1 MiB down: `upload_files` and `download_files` of one 1 MiB file in `/tmp`,
  back to back, and again with 0.3 s of rest before each (as an agent's transfers come, a
  model's turn apart: the shells a sandbox starts beside its session's for transfers are then
  ready);
- a command beside a busy shell: `execute` writing a file of the workspace while another
  thread's `execute` holds the session's shell, so that it runs in a shell started beside it
  (read-write: with a view of its own, its own transaction; for a docker container, warden
  joins it itself rather than through an `exec`); the floor's is a plain command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import ROOT, docker_ok, measure  # this folder's benchmark of tool calls
from deepagents.backends import LocalShellBackend

from langchain_warden import WardenSandbox

MIB = bytes(range(256)) * 4096


def toolbox(base: Path) -> Path:
    """The shipped shell policies, the docker one again with a warm pool, and both again
    with their workspace read-write (`rw-…`), which anyone may write."""
    box = base / "policies"
    box.mkdir()
    (base / "workspace").mkdir()
    (base / "workspace").chmod(0o777)
    for name in ("shell-host.toml", "shell-docker.toml"):
        shutil.copy(ROOT / "policies" / name, box / name)
        shipped = (ROOT / "policies" / name).read_text()
        tool = "host-shell" if name == "shell-host.toml" else "shell"
        rw = shipped.replace(f'name = "{tool}"', f'name = "rw-{tool}"', 1)
        rw = rw.replace('access = "read-only"', 'access = "read-write"')
        (box / f"rw-{name}").write_text(rw)
    pooled = (ROOT / "policies" / "shell-docker.toml").read_text()
    pooled = pooled.replace('name = "shell"', 'name = "pooled-shell"', 1)
    pooled = pooled.replace("session = true", "session = true\npool = 2", 1)
    (box / "shell-pooled.toml").write_text(pooled)
    return box


def beside_row(name: str, make: Callable[[], object], where: str) -> tuple[str, float, float]:
    """A command writing `where/beside` while another thread's command holds the session's
    shell (until `/tmp/go` is there)."""
    backend = make()
    try:
        backend.execute("rm -f /tmp/go")
        held = threading.Thread(
            target=lambda: backend.execute("until [ -e /tmp/go ]; do sleep 0.05; done")
        )
        held.start()
        time.sleep(0.5)
        write = f"echo beside > {where}/beside"
        figures = measure(lambda: backend.execute(write), 30, warmup=2)
        row = (f"{name}: a command beside a busy shell", *figures)
        backend.execute("touch /tmp/go")
        held.join()
        backend.execute("rm -f /tmp/go")
    finally:
        end(backend)
    return row


def rows_of(name: str, make: Callable[[], object], count: int) -> list[tuple[str, float, float]]:
    """The four figures of one backend."""

    def created() -> None:
        backend = make()
        try:
            assert backend.execute("true").exit_code == 0
        finally:
            end(backend)

    rows = [(f"{name}: creation + first command", *measure(created, count, warmup=2))]
    backend = make()
    try:
        later = measure(lambda: backend.execute("true"), 50, warmup=2)
        rows.append((f"{name}: a later command", *later))
        path = "/tmp/bench-mib"

        def up() -> None:
            [done] = backend.upload_files([(path, MIB)])
            assert done.error is None, done.error

        def down() -> None:
            [done] = backend.download_files([path])
            assert done.content == MIB, done.error

        rows.append((f"{name}: 1 MiB up", *measure(up, 10, warmup=2)))
        rows.append((f"{name}: 1 MiB down", *measure(down, 10, warmup=2)))
        rows.append((f"{name}: 1 MiB up, 0.3 s apart", *measure(up, 10, warmup=2, apart=0.3)))
        rows.append((f"{name}: 1 MiB down, 0.3 s apart", *measure(down, 10, warmup=2, apart=0.3)))
    finally:
        end(backend)
    return rows


def stop_servers(home: Path) -> None:
    """Stops the home's background servers (detached sandboxes'), and so their containers."""
    for address in (home / "sandboxes" / "servers").glob("*.json"):
        pid = json.loads(address.read_text()).get("pid")
        if isinstance(pid, int):
            os.kill(pid, signal.SIGTERM)


def end(backend: object) -> None:
    """Ends a backend: a detached sandbox is deleted (closing only lets go of it)."""
    if getattr(backend, "detached", False):
        backend.delete()  # type: ignore[attr-defined]
    else:
        getattr(backend, "close", lambda: None)()


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-sandbox-", dir=ROOT / "target"))
    base.chmod(0o755)
    try:
        box = toolbox(base)
        home = base / "home"
        local = base / "local"
        local.mkdir()
        rows = rows_of(
            "LocalShellBackend (floor)",
            lambda: LocalShellBackend(root_dir=str(local), virtual_mode=False),
            20,
        )
        rows += rows_of("host shell", lambda: WardenSandbox("host-shell", box, home), 20)
        workspace = base / "workspace"
        rows.append(
            beside_row(
                "LocalShellBackend (floor)",
                lambda: LocalShellBackend(root_dir=str(local), virtual_mode=False),
                str(local),
            )
        )
        rows.append(
            beside_row(
                "host shell, read-write",
                lambda: WardenSandbox("rw-host-shell", box, home),
                str(workspace),
            )
        )
        if docker_ok():
            rows.append(
                beside_row("docker shell", lambda: WardenSandbox("shell", box, home), "/tmp")
            )
            rows.append(
                beside_row(
                    "docker shell, read-write",
                    lambda: WardenSandbox("rw-shell", box, home),
                    "/workspace",
                )
            )
            rows += rows_of("docker shell", lambda: WardenSandbox("shell", box, home), 10)
            rows += rows_of(
                "docker shell, pool = 2", lambda: WardenSandbox("pooled-shell", box, home), 10
            )
            # Detached sandboxes share one server per home, whose pool outlives each of them.
            rows += rows_of(
                "docker shell, pool = 2, detached",
                lambda: WardenSandbox("pooled-shell", box, home, detached=True),
                10,
            )
        else:
            print("(no Docker engine answers: no docker rows)", file=sys.stderr)
    finally:
        stop_servers(base / "home")
        shutil.rmtree(base, ignore_errors=True)
    print(f"warden: {os.environ.get('WARDEN_BIN', 'as langchain-warden finds it')}")
    print("| | median | p90 |\n|---|---|---|")
    for name, median, p90 in rows:
        print(f"| {name} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
