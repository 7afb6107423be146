"""Fixtures of the MCP tests (the harness is in harness.py)."""

from pathlib import Path

import pytest

from harness import ROOT, Toolbox


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def toolbox(tmp_path: Path) -> Toolbox:
    """noop and add (trivial, with its WIT docs); units_convert and units_add (units); the
    hostile fixture's tools (spin, sleep, boom, fail, ...) with a 3 s deadline and a read-write
    folder, so they may write."""
    box = Toolbox(tmp_path)
    wit = ROOT / "guest-sdk" / "fixtures" / "trivial" / "wit"
    box.policy("trivial.toml", "trivial", f'wit = "{wit}"\n[limits]\ntimeout = "10s"')
    box.policy("units.toml", "units", top='prefix = "units_"')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    box.policy(
        "hostile.toml",
        "hostile",
        f'[grants]\nfs = [{{ host = "{scratch}", guest = "/scratch", access = "read-write" }}]\n'
        '[limits]\ntimeout = "3s"',
    )
    return box
