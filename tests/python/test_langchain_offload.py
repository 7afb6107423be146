"""deepagents 0.7's offload of a large `execute` output, on the shipped shells as they are: a
deep agent (a scripted model) runs a command printing 100,000 lines; the model reads a
preview naming where the whole output lies, reads it back from there with `read_file`, and
the session's `cd` carries on past the offloaded command. Run under deepagents 0.7.32
(scripts/test-wheels' second venv); 0.6.3 has no offload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deepagents import create_deep_agent
from deepagents.backends.sandbox import BaseSandbox
from langchain_core.messages import AIMessage, ToolMessage

from langchain_harness import call, require_docker, scratch, scripted, shell_toolbox, warden_bin
from langchain_warden import WardenSandbox

pytestmark = pytest.mark.skipif(
    not hasattr(BaseSandbox, "execute_with_offload"), reason="deepagents before 0.7"
)

SHELLS = ["host-shell", "shell"]
LINES = 100_000
WHOLE = "".join(f"{n}\n" for n in range(1, LINES + 1)).encode()


@pytest.fixture
def base() -> Iterator[Path]:
    with scratch() as base:
        shell_toolbox(base)
        yield base


def sandbox_for(base: Path, tool: str) -> WardenSandbox:
    if tool == "shell":
        require_docker()
    return WardenSandbox(tool=tool, toolbox=base / "policies", home=base / "home", warden=warden_bin())


def answers(messages: list) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


@pytest.mark.parametrize("tool", SHELLS)
def test_a_large_output_is_kept_in_the_sandbox_and_read_back(base, tool):
    kept = "/tmp/large_tool_results/o1"  # the root is read-only: under the sandbox's /tmp
    model = scripted(
        AIMessage(content="", tool_calls=[call("execute", {"command": f"cd /tmp && seq {LINES}"}, "o1")]),
        AIMessage(
            content="",
            tool_calls=[call("read_file", {"file_path": kept, "offset": 49_999, "limit": 2}, "o2")],
        ),
        AIMessage(content="", tool_calls=[call("execute", {"command": "pwd; echo small"}, "o3")]),
        "done",
    )
    with sandbox_for(base, tool) as sandbox:
        agent = create_deep_agent(model=model, backend=sandbox)
        result = agent.invoke({"messages": [("user", "count")]})
        [saved] = sandbox.download_files([kept])
    got = answers(result["messages"])
    preview = got["o1"].content
    assert kept in preview, preview
    assert preview.startswith("[The output was too large"), preview
    assert "1\n2\n3\n" in preview and f"{LINES - 1}\n{LINES}" in preview, preview
    assert f"[{LINES - 10} lines truncated]" in preview, preview
    assert len(preview) < 5_000, "a preview, not the output"
    assert "[Command succeeded with exit code 0]" in preview, preview
    assert saved.error is None and saved.content == WHOLE, "the whole output, byte-exact"
    assert "50000" in got["o2"].content and "50001" in got["o2"].content, got["o2"].content
    # The offloaded command ran in the session's shell: its `cd` carried on.
    assert got["o3"].content.startswith("/tmp\nsmall"), got["o3"].content


def test_an_artifacts_root_the_sandbox_can_write_is_used_as_deepagents_asks(base):
    from deepagents.backends import CompositeBackend

    model = scripted(
        AIMessage(content="", tool_calls=[call("execute", {"command": f"seq {LINES}; (exit 3)"}, "o1")]),
        "done",
    )
    with sandbox_for(base, "host-shell") as sandbox:
        backend = CompositeBackend(default=sandbox, routes={}, artifacts_root="/tmp/agent")
        agent = create_deep_agent(model=model, backend=backend)
        result = agent.invoke({"messages": [("user", "count")]})
        [saved] = sandbox.download_files(["/tmp/agent/large_tool_results/o1"])
    message = answers(result["messages"])["o1"]
    assert "/tmp/agent/large_tool_results/o1" in message.content, message.content
    assert message.artifact["output_file"] == "/tmp/agent/large_tool_results/o1", message.artifact
    assert message.artifact["exit_code"] == 3, message.artifact
    assert saved.content == WHOLE


def test_a_small_output_is_answered_whole_with_its_exit_code(base):
    with sandbox_for(base, "host-shell") as sandbox:
        small = sandbox.execute_with_offload(
            "echo hi; echo oops >&2; (exit 3)", "/large_tool_results/x", max_inline_bytes=1000
        )
        listed = sandbox.execute("ls /tmp/large_tool_results 2>&1 || true").output
    assert small.offloaded is False
    assert small.response.exit_code == 3
    assert small.response.output == "hi\n[stderr] oops", small.response.output
    assert "No such file" in listed, "nothing kept for a small output"
