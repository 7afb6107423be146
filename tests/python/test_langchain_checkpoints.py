"""A deep agent's sandbox in lockstep with LangGraph's checkpoints (`WardenThreadSandbox`
and `WardenCheckpointMiddleware`): a scripted model writes a file in each of three steps;
a thread forked from the checkpoint after step one gets a sandbox of its own holding step
one's file alone while the first keeps all three, and resuming the first thread from that
checkpoint puts its sandbox back to step one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deepagents import create_deep_agent
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_harness import call, require_docker, scratch, scripted, shell_toolbox, warden_bin
from langchain_warden import WardenCheckpointMiddleware, WardenThreadSandbox


@pytest.fixture
def base() -> Iterator[Path]:
    with scratch() as base:
        shell_toolbox(base)
        yield base


def files(backend: WardenThreadSandbox, thread: str) -> str:
    return backend.sandbox(thread).execute("ls /tmp/steps").output


def after_step_one(agent, config):
    """The checkpoint right after step one's tool ran (its snapshot in the state)."""
    found = None
    for state in agent.get_state_history(config):  # newest first
        ids = {m.tool_call_id for m in state.values.get("messages", []) if isinstance(m, ToolMessage)}
        if ids == {"s1"}:
            found = state  # the last one seen is the earliest: right after the tools ran
    assert found is not None and found.values.get("warden_snapshot"), found
    return found


def three_steps(base: Path, tool: str, folder: str):
    """A deep agent in lockstep with its `tool` sandboxes, whose scripted model writes
    `folder`/1 and /2 (`write_file`) and /3 (`execute`) in three steps and answers "done",
    then "forked" and "resumed"; and its backend."""
    model = scripted(
        AIMessage(content="", tool_calls=[call("write_file", {"file_path": f"{folder}/1", "content": "one"}, "s1")]),
        AIMessage(content="", tool_calls=[call("write_file", {"file_path": f"{folder}/2", "content": "two"}, "s2")]),
        AIMessage(content="", tool_calls=[call("execute", {"command": f"echo three >{folder}/3"}, "s3")]),
        "done",
        "forked",
        "resumed",
    )
    backend = WardenThreadSandbox(
        tool=tool, toolbox=base / "policies", home=base / "home", warden=warden_bin()
    )
    agent = create_deep_agent(
        model=model,
        backend=backend,
        middleware=[WardenCheckpointMiddleware(backend)],
        checkpointer=InMemorySaver(),
    )
    return agent, backend


@pytest.mark.parametrize("tool", ["host-shell", "shell"])
def test_forking_or_resuming_a_thread_puts_its_sandbox_at_that_checkpoint(base, tool):
    if tool == "shell":
        require_docker()
    agent, backend = three_steps(base, tool, "/tmp/steps")
    with backend:
        first = {"configurable": {"thread_id": "first"}}
        result = agent.invoke({"messages": [("user", "write three files")]}, first)
        assert result["messages"][-1].content == "done"
        assert files(backend, "first") == "1\n2\n3\n"

        step_one = after_step_one(agent, first)
        # A fork: another thread from that checkpoint.
        fork = {"configurable": {"thread_id": "fork"}}
        agent.update_state(fork, step_one.values, as_node="tools")
        assert agent.invoke(None, fork)["messages"][-1].content == "forked"
        assert files(backend, "fork") == "1\n"
        assert files(backend, "first") == "1\n2\n3\n", "the first thread's sandbox keeps all three"

        # Time travel: the first thread resumed from that checkpoint.
        resumed = agent.invoke(None, step_one.config)
        assert resumed["messages"][-1].content == "resumed"
        assert files(backend, "first") == "1\n"
        assert backend.sandbox("first").execute("cat /tmp/steps/1").output == "one"


def test_a_forked_thread_writes_copies_of_the_read_write_roots(base):
    """With a read-write root, a thread forked from the checkpoint after step one writes a
    copy of the root as it stood then: the first thread's three files stay in the real
    folder, and the fork has nothing of its own to commit; resuming the first thread there
    rewinds the real folder to step one."""
    root = base / "rw"
    root.mkdir()
    root.chmod(0o777)
    (base / "policies" / "rw.toml").write_text(
        (base / "policies" / "shell-host.toml").read_text()
        .replace('name = "host-shell"', 'name = "rw-shell"')
        .replace('host = "../workspace"', 'host = "../rw"')
        .replace('access = "read-only"', 'access = "read-write"')
    )
    agent, backend = three_steps(base, "rw-shell", str(root))
    with backend:
        first = {"configurable": {"thread_id": "first"}}
        assert agent.invoke({"messages": [("user", "write three files")]}, first)["messages"][-1].content == "done"
        assert sorted(p.name for p in root.iterdir()) == ["1", "2", "3"]

        step_one = after_step_one(agent, first)
        fork = {"configurable": {"thread_id": "fork"}}
        agent.update_state(fork, step_one.values, as_node="tools")
        assert agent.invoke(None, fork)["messages"][-1].content == "forked"
        assert backend.sandbox("fork").execute(f"ls {root}").output == "1\n"
        assert sorted(p.name for p in root.iterdir()) == ["1", "2", "3"], "the first thread's files"
        assert backend.sandbox("fork").commit() is None, "the fork wrote nothing of its own"

        resumed = agent.invoke(None, step_one.config)
        assert resumed["messages"][-1].content == "resumed"
        assert sorted(p.name for p in root.iterdir()) == ["1"]
        assert (root / "1").read_text() == "one"


def test_the_docs_sample_runs_as_written(monkeypatch, capsys):
    from harness import loopback_server
    from langchain_harness import ROOT
    from test_langchain_readme import ScriptedAnthropic

    page = (ROOT / "docs" / "langchain.md").read_text()
    section = page.split("## Snapshots, forks and LangGraph's checkpoints", 1)[1]
    sample = section.split("```python\n", 1)[1].split("```", 1)[0]
    ScriptedAnthropic.script.clear()
    ScriptedAnthropic.script.extend([
        [call("write_file", {"file_path": "/tmp/report.md", "content": "draft\n"}, "d1")],
        [call("execute", {"command": "echo revised >> /tmp/report.md"}, "d2")],
        "Drafted and revised.",
        "Went on from the draft.",
    ])
    with scratch() as base, loopback_server(ScriptedAnthropic) as port:
        monkeypatch.setenv("WARDEN_BIN", warden_bin())
        monkeypatch.setenv("WARDEN_HOME", str(base / "home"))
        monkeypatch.delenv("ANTHROPIC_API_URL", raising=False)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted")
        exec(compile(sample, "docs/langchain.md", "exec"), {})
    assert capsys.readouterr().out == "draft\nrevised\n\ndraft\n\n"
    assert not ScriptedAnthropic.script, "every turn was asked for"
