"""WardenSandboxClient: a `SandboxAgent` of the OpenAI Agents SDK run by `Runner.run` with its
shell in a warden host shell, the model a scripted Responses API on loopback (the one test
double); its workspace persisted to a snapshot and hydrated into a new warden session; and
the session's own API (bytes in and out, timeouts, what it refuses)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from agents import Runner, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel
from agents.run import RunConfig
from agents.sandbox import (
    ExecTimeoutError,
    LocalSnapshotSpec,
    Manifest,
    SandboxAgent,
    SandboxRunConfig,
    User,
    WorkspaceReadNotFoundError,
)
from openai import AsyncOpenAI

from harness import loopback_server
from langchain_harness import ScriptedResponses, scratch, shell_toolbox, tool_outputs, warden_bin
from langchain_warden import WardenSandboxClient, WardenSandboxClientOptions
from langchain_warden.openai_agents import WORKSPACE

pytestmark = pytest.mark.anyio

HOST_SHELL = WardenSandboxClientOptions(tool="host-shell")

# What the model's `apply_patch` call says: a new file, which the SDK writes through the session.
PLAN = "*** Begin Patch\n*** Add File: notes/plan.txt\n+planned in warden\n*** End Patch\n"


@dataclass
class World:
    base: Path
    client: WardenSandboxClient
    port: int

    def agent(self) -> SandboxAgent:
        """A sandbox agent whose model is the scripted endpoint."""
        openai = AsyncOpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key="scripted", max_retries=0
        )
        return SandboxAgent(
            name="coder",
            instructions="Use the shell.",
            model=OpenAIResponsesModel(model="gpt-scripted", openai_client=openai),
        )

    def sandbox(self, **config: object) -> RunConfig:
        """A run's config: this client, the host shell, snapshots in the test's folder."""
        config.setdefault("options", HOST_SHELL)
        config.setdefault("snapshot", LocalSnapshotSpec(base_path=self.base / "snapshots"))
        return RunConfig(sandbox=SandboxRunConfig(client=self.client, **config))


@pytest.fixture
def world() -> Iterator[World]:
    # The SDK would send its traces to OpenAI: there is no network here, and nothing to send.
    set_tracing_disabled(True)
    ScriptedResponses.script.clear()
    ScriptedResponses.requests.clear()
    with scratch() as base, loopback_server(ScriptedResponses) as port:
        box = shell_toolbox(base)
        (base / "secret.txt").write_text("the host's, not the sandbox's\n")
        client = WardenSandboxClient(box, base / "home", warden_bin())
        yield World(base, client, port)
    assert not ScriptedResponses.script, "the model was asked less than scripted"


def exec_command(cmd: str, call_id: str) -> list[tuple[str, dict[str, object], str]]:
    """A model turn calling the sandbox's shell tool once."""
    return [("exec_command", {"cmd": cmd}, call_id)]


def snapshot_files(folder: Path) -> dict[str, bytes]:
    """The regular files of the one workspace archive persisted in `folder`, by name."""
    [archive] = folder.glob("*.tar")
    with tarfile.open(archive) as tar:
        return {
            member.name.removeprefix("./"): tar.extractfile(member).read()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.isfile()
        }


async def test_a_sandbox_agent_s_shell_runs_in_warden_s_sandbox(world):
    """The agent writes a file and reads it back in the workspace, patches in another, sees a
    command fail, and runs as warden's confined user: the workspace folder it was granted is read-only, the
    host's files outside the grants are not there, and what it wrote is in the sandbox's own
    /tmp, persisted to the run's snapshot, not on the host."""
    granted = world.base / "workspace"
    ScriptedResponses.script.extend(
        [
            exec_command("echo written in warden > hello.txt && pwd", "write"),
            exec_command("cat hello.txt; id -u", "read"),
            [("apply_patch", PLAN, "patch")],
            exec_command("cat notes/plan.txt", "planned"),
            exec_command("cat missing.txt", "missing"),
            exec_command(f"touch {granted}/new.txt", "read-only"),
            exec_command(f"cat {world.base}/secret.txt", "host"),
            "All done.",
        ]
    )
    result = await Runner.run(
        world.agent(), "Write hello.txt, then read it.", run_config=world.sandbox()
    )
    assert result.final_output == "All done."
    seen = tool_outputs(ScriptedResponses.requests)
    assert "Process exited with code 0" in seen["write"]
    assert seen["write"].rstrip().endswith(WORKSPACE)
    assert seen["read"].rstrip().endswith("written in warden\n65534")  # nobody, not root
    assert "notes/plan.txt" in seen["patch"], seen["patch"]
    assert seen["planned"].rstrip().endswith("planned in warden")
    assert "Process exited with code 1" in seen["missing"]
    assert "No such file" in seen["missing"]
    assert "Process exited with code 1" in seen["read-only"]
    assert "Read-only file system" in seen["read-only"] or "denied" in seen["read-only"]
    assert not (granted / "new.txt").exists()
    assert "No such file" in seen["host"] and "the host's" not in seen["host"]
    assert snapshot_files(world.base / "snapshots") == {
        "hello.txt": b"written in warden\n",
        "notes/plan.txt": b"planned in warden",  # the patch format ends no line
    }
    assert not Path(WORKSPACE, "hello.txt").exists(), "the host shell's /tmp is its own"


async def test_a_resumed_session_is_a_new_warden_session_hydrated_from_the_snapshot(world):
    """A session persisted when it stops resumes, from its state's JSON, as a new warden
    session whose workspace the snapshot's archive fills: the agent reads what was written
    in the first one, binary and nested files included."""
    blob = bytes(range(256)) * 300  # several transfer chunks
    session = await world.client.create(
        options=HOST_SHELL, snapshot=LocalSnapshotSpec(base_path=world.base / "snapshots")
    )
    async with session:
        await session.write(Path("data/blob.bin"), io.BytesIO(blob))
        done = await session.exec("echo kept > notes.txt && ln -s notes.txt link")
        assert done.ok(), done.stderr
    payload = world.client.serialize_session_state(session.state)
    state = world.client.deserialize_session_state(payload)

    ScriptedResponses.script.extend(
        [exec_command("cat link; wc -c < data/blob.bin; ls", "after"), "Resumed."]
    )
    result = await Runner.run(
        world.agent(), "What is there?", run_config=world.sandbox(session_state=state)
    )
    assert result.final_output == "Resumed."
    after = tool_outputs(ScriptedResponses.requests)["after"]
    assert "kept\n76800\n" in after
    assert after.rstrip().endswith("data\nlink\nnotes.txt")
    files = snapshot_files(world.base / "snapshots")
    assert files["notes.txt"] == b"kept\n" and files["data/blob.bin"] == blob


@pytest.fixture
async def session(world) -> AsyncIterator[object]:
    """A started session of the host shell, without a model."""
    session = await world.client.create(options=HOST_SHELL)
    async with session:
        yield session
    await world.client.delete(session)


async def test_files_move_as_bytes_and_a_missing_one_is_not_found(session):
    data = bytes(range(256)) * 4 + b"\x00\xff"
    await session.write(Path("deep/er/data.bin"), io.BytesIO(data))
    assert (await session.read(Path("deep/er/data.bin"))).read() == data
    assert (await session.read(Path(f"{WORKSPACE}/deep/er/data.bin"))).read() == data
    with pytest.raises(WorkspaceReadNotFoundError):
        await session.read(Path("nothing.txt"))
    listed = await session.ls(Path("deep/er"))
    assert [Path(entry.path).name for entry in listed] == ["data.bin"]


async def test_exec_runs_each_command_in_the_workspace_in_a_shell_of_its_own(session):
    """A command's `cd`, variables and `exit` end with it; each starts in the root."""
    first = await session.exec("cd /; X=1; exit 7")
    assert first.exit_code == 7
    second = await session.exec("pwd; echo ${X-unset}")
    assert second.stdout.decode() == f"{WORKSPACE}\nunset\n"
    out = await session.exec("printf out; printf err >&2")
    assert (out.stdout, out.stderr, out.exit_code) == (b"out", b"err", 0)


async def test_a_command_past_its_timeout_raises_and_the_policy_s_timeout_bounds_it(session):
    with pytest.raises(ExecTimeoutError):
        await session.exec("sleep 5", timeout=1)
    assert (await session.exec("echo alive")).stdout == b"alive\n"
    # 600 s is more than host-shell's 30: the command runs, under the policy's timeout.
    assert (await session.exec("echo bounded", timeout=600)).stdout == b"bounded\n"


async def test_what_warden_cannot_give_is_refused_naming_the_fix(world, session):
    with pytest.raises(ValueError, match="runs every command as its policy's user"):
        await session.exec("id", user="root")
    with pytest.raises(ValueError, match="leave `users` and `groups` out"):
        await world.client.create(options=HOST_SHELL, manifest=Manifest(users=[User(name="a")]))
    lost = await world.client.create(options=WardenSandboxClientOptions(tool="nothing"))
    with pytest.raises(Exception, match="the toolbox has no tool 'nothing'"):
        await lost.start()
