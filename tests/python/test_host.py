"""The shipped host shell (policies/shell-host.toml) through a real MCP client: listed with
its hints, confined, and a parallel batch where one command hangs and one fails leaves the
others' answers untouched."""

import shutil

import anyio
import pytest

from harness import ROOT, Toolbox, session

pytestmark = pytest.mark.anyio


def error_kind(result) -> str:
    return (result.meta or {}).get("warden/error", {}).get("kind", "")


@pytest.fixture
def host_box(tmp_path) -> Toolbox:
    box = Toolbox(tmp_path)
    shutil.copy(ROOT / "policies" / "shell-host.toml", box.dir / "shell-host.toml")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.txt").write_text("granted file\n")
    (tmp_path / "secret.txt").write_text("MARKER-mcp-host\n")
    # The command runs as nobody; the folders above the root must let it pass.
    for p in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
        p.chmod(p.stat().st_mode | 0o055)
    return box


async def test_the_host_shell_answers_confined_over_mcp(host_box):
    async with session("stdio", host_box) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        shell = tools["host-shell"]
        # A read-only root and no network: it can change nothing and reach no one.
        assert shell.annotations.readOnlyHint is True
        assert shell.annotations.openWorldHint is False
        ok = await s.call_tool("host-shell", {"command": "id -un; cat README.txt"})
        denied = await s.call_tool("host-shell", {"command": "cat ../secret.txt"})
    assert ok.isError is False, ok.content[0].text
    assert ok.content[0].text.startswith("nobody\ngranted file\n")
    assert denied.isError is True
    assert error_kind(denied) == "exit_status"
    assert "MARKER-mcp-host" not in denied.content[0].text
    # Beside the root, the sandbox's own root has nothing of the host's.
    assert "No such file" in denied.content[0].text


async def test_net_grants_make_a_host_tool_open_world(host_box):
    # The shipped policy with its commented net line on, as a second tool beside it.
    shipped = (host_box.dir / "shell-host.toml").read_text()
    assert 'name = "host-shell"' in shipped and "# net = [" in shipped
    granted = shipped.replace('name = "host-shell"', 'name = "host-net"').replace(
        "# net = [", "net = ["
    )
    (host_box.dir / "host-net.toml").write_text(granted)
    async with session("stdio", host_box) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    # Granted hosts are a world beyond the sandbox, so the tool is not read-only either.
    assert tools["host-net"].annotations.openWorldHint is True
    assert tools["host-net"].annotations.readOnlyHint is False
    assert tools["host-shell"].annotations.openWorldHint is False
    assert tools["host-shell"].annotations.readOnlyHint is True


async def test_a_parallel_batch_keeps_every_answer(host_box):
    commands = {
        "fast": {"command": "echo fast"},
        "hang": {"command": "sleep 60", "timeout": 1},
        "fail": {"command": "echo partial; exit 3"},
        "bomb": {"command": "b() { b | b & }; b; sleep 60", "timeout": 2},
        "also-fast": {"command": "echo also"},
    }
    results = {}
    # The bomb in a session of its own: commands of one session run at once in one sandbox,
    # and share its process limit, which the bomb uses up.
    async with session("stdio", host_box) as s, session("stdio", host_box) as apart:

        async def run(name, args):
            on = apart if name == "bomb" else s
            results[name] = await on.call_tool("host-shell", args)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for name, args in commands.items():
                    tg.start_soon(run, name, args)
    assert set(results) == set(commands)
    assert results["fast"].isError is False and results["fast"].content[0].text.startswith("fast")
    assert results["also-fast"].content[0].text.startswith("also")
    assert error_kind(results["hang"]) == "timeout"
    assert error_kind(results["fail"]) == "exit_status"
    assert "partial" in results["fail"].content[0].text
    assert results["bomb"].isError is True
