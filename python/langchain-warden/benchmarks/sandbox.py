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
  ready).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import ROOT, docker_ok, measure  # this folder's benchmark of tool calls
from deepagents.backends import LocalShellBackend

from langchain_warden import WardenSandbox

MIB = bytes(range(256)) * 4096


def toolbox(base: Path) -> Path:
    """The shipped shell policies, and the docker one again with a warm pool."""
    box = base / "policies"
    box.mkdir()
    (base / "workspace").mkdir()
    for name in ("shell-host.toml", "shell-docker.toml"):
        shutil.copy(ROOT / "policies" / name, box / name)
    pooled = (ROOT / "policies" / "shell-docker.toml").read_text()
    pooled = pooled.replace('name = "shell"', 'name = "pooled-shell"', 1)
    pooled = pooled.replace("session = true", "session = true\npool = 2", 1)
    (box / "shell-pooled.toml").write_text(pooled)
    return box


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
        if docker_ok():
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
