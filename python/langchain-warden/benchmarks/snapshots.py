"""One side-by-side run of a sandbox's snapshot, restore and fork holding 50 MB of changes in
its `/tmp` (ten 5 MB files of random bytes), on the host shell and the Debian docker shell,
beside their floors: `cp -a` of the same files on the host, 50 MB written and synced (what
keeping a new snapshot's archive costs, past the page cache as warden writes it and through
it), and `docker commit` plus `docker run` of a container
holding them. Each snapshot and fork is of a changed state (a new one the home writes),
never of one it keeps already. Then a fork of each shell with a read-write root of 10 MB in
1,000 files (the fork copies it) and the commit of 10 files the fork changed, beside a `cp -a`
of that root.

    WARDEN_BIN=target/release/warden python python/langchain-warden/benchmarks/snapshots.py

Run from the root of a warden checkout, in a venv holding langchain-warden and deepagents. It
prints a Markdown table, median and p90 of each figure over a few runs.
"""

from __future__ import annotations

import mmap
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import ROOT, docker_ok, measure  # this folder's benchmark of tool calls

from langchain_warden import WardenSandbox

FILL = "mkdir -p /tmp/work && for i in 0 1 2 3 4 5 6 7 8 9; do head -c 5000000 /dev/urandom >/tmp/work/f$i; done"
STAMP = "date +%s%N >/tmp/work/stamp"
RUNS = 5


def rows(tool: str, base: Path) -> list[tuple[str, float, float]]:
    kwargs = {"tool": tool, "toolbox": base / "policies", "home": base / "home"}
    out = []
    with WardenSandbox(**kwargs) as sandbox:
        assert sandbox.execute(FILL).exit_code == 0
        snap = sandbox.snapshot()

        def timed(run: Callable[[], object]) -> float:
            # A file changed first, untimed: each snapshot is a new one, its archive written,
            # not one the home keeps already (found by its digest, and answered at once).
            assert sandbox.execute(STAMP).exit_code == 0
            started = time.perf_counter()
            made = run()
            took = time.perf_counter() - started
            if isinstance(made, WardenSandbox):
                made.close()  # a fork's close (a container's removal) is not the fork's
            return took

        out.append((f"{tool}: snapshot of 50 MB", *medians([timed(sandbox.snapshot) for _ in range(RUNS + 1)])))
        out.append((f"{tool}: restore of 50 MB", *measure(lambda: sandbox.restore(snap), RUNS, warmup=1)))
        out.append((f"{tool}: fork (snapshot, new sandbox, restore)", *medians([timed(sandbox.fork) for _ in range(RUNS + 1)])))
    return out


def medians(times: list[float]) -> tuple[float, float]:
    """The median and p90 of `times` after the first (a warm-up)."""
    kept = sorted(times[1:])
    return statistics.median(kept), kept[int(len(kept) * 0.9)]


def with_root(tool: str, base: Path) -> list[tuple[str, float, float]]:
    """A fork of `tool` with a read-write root of 10 MB in 1,000 files, and its commit of 10
    changed files, beside a `cp -a` of the root."""
    shipped = "shell-host.toml" if tool == "host-shell" else "shell-docker.toml"
    root = base / f"rw-{tool}"
    for d in range(10):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(100):
            (root / f"d{d}" / f"f{f}").write_bytes(os.urandom(10_000))
    subprocess.run(["chown", "-R", "nobody:nogroup", str(root)], check=True)
    (base / "policies" / f"rw-{tool}.toml").write_text(
        (base / "policies" / shipped).read_text()
        .replace(f'name = "{tool}"', f'name = "rw-{tool}"')
        .replace('host = "../workspace"', f'host = "../rw-{tool}"')
        .replace('access = "read-only"', 'access = "read-write"')
    )
    seen = root if tool == "host-shell" else "/workspace"
    kwargs = {"tool": f"rw-{tool}", "toolbox": base / "policies", "home": base / "home"}
    forks, commits, copies = [], [], []
    with WardenSandbox(**kwargs) as sandbox:
        sandbox.execute("true")
        for n in range(RUNS + 1):
            started = time.perf_counter()
            fork = sandbox.fork()
            forks.append(time.perf_counter() - started)
            fork.execute(f"cd {seen} && for i in 0 1 2 3 4 5 6 7 8 9; do head -c 10000 /dev/urandom >d$i/f$n; done")
            started = time.perf_counter()
            fork.commit()
            commits.append(time.perf_counter() - started)
            fork.close()
            started = time.perf_counter()
            subprocess.run(["cp", "-a", str(root), str(base / f"rw-copy-{tool}-{n}")], check=True)
            copies.append(time.perf_counter() - started)

    return [
        (f"{tool}: fork with a read-write root of 10 MB in 1,000 files", *medians(forks)),
        (f"{tool}: the fork's commit of 10 changed files", *medians(commits)),
        ("floor: `cp -a` of that root", *medians(copies)),
    ]


def floors(base: Path) -> list[tuple[str, float, float]]:
    src = base / "src"
    src.mkdir()
    subprocess.run(["sh", "-c", FILL.replace("/tmp/work", str(src))], check=True)
    n = [0]

    def copy() -> None:
        n[0] += 1
        subprocess.run(["cp", "-a", str(src), str(base / f"copy{n[0]}")], check=True)

    data = os.urandom(50_000_000)

    def synced() -> None:
        n[0] += 1
        with open(base / f"synced{n[0]}", "wb") as f:
            f.write(data)
            os.fsync(f.fileno())

    # Page-aligned, as a write past the page cache needs, and a whole number of 4 KiB blocks.
    aligned = mmap.mmap(-1, -(-len(data) // 4096) * 4096)
    aligned[: len(data)] = data

    def direct() -> None:
        n[0] += 1
        fd = os.open(base / f"direct{n[0]}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
        try:
            os.write(fd, aligned)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)

    out = [
        ("floor: `cp -a` of the 50 MB", *measure(copy, RUNS, warmup=1)),
        # What a new snapshot's archive costs to keep: written and synced, as the store does
        # (past the page cache where the filesystem allows it), and through the cache.
        ("floor: 50 MB written past the page cache (`O_DIRECT`) and synced", *measure(direct, RUNS, warmup=1)),
        ("floor: 50 MB written through the page cache and synced", *measure(synced, RUNS, warmup=1)),
    ]
    if docker_ok():
        image = "warden-sandbox-debian:latest"
        box = subprocess.run(
            ["docker", "run", "-d", image, "sh", "-c", f"{FILL} && sleep 600"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        subprocess.run(["docker", "exec", box, "sh", "-c", "while [ ! -e /tmp/work/f9 ]; do sleep 0.1; done"], check=True)

        def commit_and_run() -> None:
            made = subprocess.run(["docker", "commit", box], capture_output=True, text=True, check=True).stdout.strip()
            run = subprocess.run(["docker", "run", "-d", made, "true"], capture_output=True, text=True, check=True).stdout.strip()
            subprocess.run(["docker", "rm", "-f", run], capture_output=True, check=True)
            subprocess.run(["docker", "rmi", made], capture_output=True, check=True)

        out.append(("floor: `docker commit` + `docker run` of a container holding them", *measure(commit_and_run, RUNS, warmup=1)))
        subprocess.run(["docker", "rm", "-f", box], capture_output=True)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        (base / "policies").mkdir()
        (base / "workspace").mkdir()
        for name in ("shell-host.toml", "shell-docker.toml"):
            shutil.copy(ROOT / "policies" / name, base / "policies" / name)
        table = rows("host-shell", base)
        if docker_ok():
            table += rows("shell", base)
        table += floors(base)
        table += with_root("host-shell", base)
        if docker_ok():
            table += with_root("shell", base)
    print("| figure | median | p90 |\n|---|---:|---:|")
    for name, median, p90 in table:
        print(f"| {name} | {median * 1e3:.1f} ms | {p90 * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
