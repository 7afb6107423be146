"""`[review] changes = true` on the shipped host and docker shells with their root read-write,
through a real MCP client: each call runs, then its user sees what it changed (every path, a
diff) and decides; approved changes are kept byte-exact, rejected ones never reach the
folder."""

import os
import subprocess

import pytest
from mcp import types

from harness import ROOT, Toolbox, session, warden_bin

pytestmark = pytest.mark.anyio

COMMAND = (
    "echo new > notes.txt && echo changed >> README.txt && rm gone.txt && mkdir d && "
    "chmod 700 d && ln -s /etc/shadow d/link"
)


SHELLS = {"shell-host.toml": "host-shell", "shell-docker.toml": "shell"}


@pytest.fixture(params=sorted(SHELLS))
def box(tmp_path, request) -> Toolbox:
    box = Toolbox(tmp_path)
    text = (ROOT / "policies" / request.param).read_text()
    text = text.replace('access = "read-only"', 'access = "read-write"')
    # A call of its own for each command: a session's commands are committed unreviewed.
    text = text.replace("\nsession = true", "\n# session = true")
    assert 'access = "read-write"' in text and "\nsession = true" not in text, "policy changed"
    (box.dir / request.param).write_text(text + "\n[review]\nchanges = true\n")
    box.shell = SHELLS[request.param]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    workspace.chmod(0o777)
    (workspace / "README.txt").write_text("granted file\n")
    (workspace / "gone.txt").write_text("to be removed\n")
    # The command runs as nobody: what it changes must be its to change.
    for f in ("README.txt", "gone.txt"):
        (workspace / f).chmod(0o666)
    for p in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
        p.chmod(p.stat().st_mode | 0o055)
    return box


def tree(root) -> dict:
    """Every entry below `root`: a file's bytes and mode, a folder's mode, a link's target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[rel] = ("dir", st.st_mode & 0o7777)
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", st.st_mode & 0o7777, f.read())
    return out


def reviewer(answer: dict, asked: list):
    async def elicit(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content=answer)

    return elicit


async def test_approved_changes_are_kept_and_every_path_was_shown(box):
    workspace = box.root / "workspace"
    asked = []
    callback = reviewer({"decision": "approve"}, asked)
    async with session("stdio", box, elicitation_callback=callback) as s:
        result = await s.call_tool(box.shell, {"command": COMMAND})
        quiet = await s.call_tool(box.shell, {"command": "cat README.txt"})
    assert result.isError is False, result.content[0].text
    assert quiet.isError is False and len(asked) == 1, "a call that changed nothing asks nothing"
    shown = asked[0]
    for path in ("notes.txt", "README.txt", "gone.txt", "d", "d/link"):
        assert str(workspace / path) in shown, f"{path} not shown:\n{shown}"
    assert "+new" in shown and "+changed" in shown and "-to be removed" in shown, shown
    assert "a link to /etc/shadow" in shown and "root:" not in shown, shown
    after = tree(workspace)
    assert after["notes.txt"][2] == b"new\n"
    assert after["README.txt"][2] == b"granted file\nchanged\n"
    assert "gone.txt" not in after
    assert after["d"] == ("dir", 0o700)
    assert after["d/link"] == ("link", "/etc/shadow")


async def test_rejected_changes_never_reach_the_folder(box):
    workspace = box.root / "workspace"
    before = tree(workspace)
    asked = []
    callback = reviewer({"decision": "reject", "reason": "not these files"}, asked)
    async with session("stdio", box, elicitation_callback=callback) as s:
        result = await s.call_tool(box.shell, {"command": COMMAND})
    assert len(asked) == 1
    assert result.isError is True
    assert result.meta["warden/error"]["kind"] == "rejected"
    text = result.content[0].text
    assert "not these files" in text and "Nothing it wrote" in text, text
    assert tree(workspace) == before


async def test_without_a_reviewer_the_changes_are_discarded(box):
    workspace = box.root / "workspace"
    before = tree(workspace)
    async with session("stdio", box) as s:
        result = await s.call_tool(box.shell, {"command": COMMAND})
    assert result.isError is True
    assert result.meta["warden/error"]["kind"] == "rejected"
    assert tree(workspace) == before


def test_a_session_shell_cannot_promise_review_of_changes(box):
    (policy,) = box.dir.glob("shell-*.toml")
    policy.write_text(policy.read_text().replace("\n# session = true", "\nsession = true"))
    out = subprocess.run(
        [str(warden_bin()), "audit"], env={**os.environ, **box.env()}, capture_output=True
    )
    said = out.stdout.decode() + out.stderr.decode()
    assert "cannot be honoured" in said and "session = true" in said, said
