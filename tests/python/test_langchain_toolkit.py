"""WardenToolkit: warden's tools as LangChain tools over one `warden serve`, in create_agent's
tool node, with review through HumanInTheLoopMiddleware."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langchain_harness import (
    WASM,
    call,
    copy_policy,
    host_tool,
    scratch,
    scripted,
    shell_toolbox,
    warden_bin,
)
from langchain_warden import WardenToolkit

pytestmark = pytest.mark.anyio


@pytest.fixture
def box() -> Iterator[Path]:
    """The shipped host shell, `host-echo` (echo TEXT), `host-sleep` (sleep SECONDS) and
    `host-reviewed` (echo TEXT, review required)."""
    with scratch() as base:
        workspace = base / "workspace"
        box = shell_toolbox(
            base,
            extra={
                "echo.toml": host_tool("host-echo", ["/bin/echo", "{text}"], workspace),
                "sleep.toml": host_tool("host-sleep", ["/bin/sleep", "{seconds}"], workspace),
                "reviewed.toml": host_tool(
                    "host-reviewed", ["/bin/echo", "{text}"], workspace, "[review]\nrequired = true"
                ),
            },
        )
        (box / "shell-docker.toml").unlink()
        yield box


@pytest.fixture
def toolkit(box: Path) -> Iterator[WardenToolkit]:
    with WardenToolkit(toolbox=box, home=box.parent / "home", warden=warden_bin()) as kit:
        yield kit


def tools_of(kit: WardenToolkit) -> dict:
    return {tool.name: tool for tool in kit.get_tools()}


def test_each_tool_carries_warden_schema_and_description(toolkit):
    tools = tools_of(toolkit)
    assert sorted(tools) == ["host-echo", "host-reviewed", "host-shell", "host-sleep"]
    echo = tools["host-echo"]
    assert echo.args_schema["properties"]["text"]["type"] == "string"
    assert echo.args_schema["required"] == ["text"]
    assert "confined host process" in echo.description
    assert "long-lived shell" in tools["host-shell"].description


def test_a_tool_call_answers_a_tool_message_with_warden_usage(toolkit):
    echo = tools_of(toolkit)["host-echo"]
    ok = echo.invoke(call("host-echo", {"text": "hello"}, "c1"))
    assert isinstance(ok, ToolMessage)
    assert (ok.tool_call_id, ok.name, ok.status) == ("c1", "host-echo", "success")
    assert ok.content == "hello\n[exit code 0]"
    assert ok.artifact["usage"]["wall_ms"] > 0
    bad = echo.invoke(call("host-echo", {"text": 5}, "c2"))
    assert bad.status == "error"
    assert bad.artifact["error"]["kind"] == "invalid_arguments"
    assert bad.content.startswith("Error (invalid_arguments): ")
    # Plain arguments (no ToolCall): the text, or the error as text.
    assert echo.invoke({"text": "plain"}) == "plain\n[exit code 0]"
    assert echo.invoke({"text": 1}).startswith("Error (invalid_arguments)")


async def test_the_async_twin_answers_the_same(toolkit):
    echo = tools_of(toolkit)["host-echo"]
    ok = await echo.ainvoke(call("host-echo", {"text": "hi"}, "a1"))
    assert (ok.status, ok.content) == ("success", "hi\n[exit code 0]")
    bad = await echo.ainvoke(call("host-echo", {}, "a2"))
    assert bad.status == "error" and bad.artifact["error"]["kind"] == "invalid_arguments"


def test_a_shell_session_lasts_across_calls(toolkit):
    shell = tools_of(toolkit)["host-shell"]
    shell.invoke(call("host-shell", {"command": "cd /tmp && X=kept"}, "s1"))
    again = shell.invoke(call("host-shell", {"command": "pwd; echo $X"}, "s2"))
    assert again.content == "/tmp\nkept\n[exit code 0]"


def three_calls_turn() -> AIMessage:
    """A model turn with three calls: one fine, one with bad arguments, one that overruns
    its deadline and is stopped."""
    return AIMessage(
        content="",
        tool_calls=[
            call("host-echo", {"text": "first"}, "t1"),
            call("host-echo", {"text": ["not", "a", "string"]}, "t2"),
            call("host-shell", {"command": "sleep 30", "timeout": 0.5}, "t3"),
        ],
    )


def check_three(messages: list) -> None:
    answers = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ["t1", "t2", "t3"]
    assert [m.status for m in answers] == ["success", "error", "error"]
    assert answers[0].content == "first\n[exit code 0]"
    assert answers[1].artifact["error"]["kind"] == "invalid_arguments"
    assert answers[2].artifact["error"]["kind"] == "timeout"
    assert messages[-1].content == "done"


def test_create_agent_runs_a_turn_of_three_calls_two_failing(toolkit):
    agent = create_agent(scripted(three_calls_turn(), "done"), tools=toolkit.get_tools())
    check_three(agent.invoke({"messages": [("user", "go")]})["messages"])


async def test_create_agent_runs_the_turn_async_too(toolkit):
    agent = create_agent(scripted(three_calls_turn(), "done"), tools=toolkit.get_tools())
    check_three((await agent.ainvoke({"messages": [("user", "go")]}))["messages"])


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_parallel_calls_run_concurrently(toolkit, mode):
    turn = AIMessage(
        content="",
        tool_calls=[call("host-sleep", {"seconds": "1"}, f"p{i}") for i in range(3)],
    )
    agent = create_agent(scripted(turn, "done"), tools=toolkit.get_tools())
    started = time.monotonic()
    if mode == "sync":
        result = agent.invoke({"messages": [("user", "go")]})
    else:
        result = await agent.ainvoke({"messages": [("user", "go")]})
    took = time.monotonic() - started
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["success"] * 3
    assert took < 2.5, f"three 1 s calls took {took:.2f} s: they did not run side by side"


async def test_a_quick_call_is_answered_while_another_thread_reads_for_a_slow_one(toolkit):
    # Reading warden's output is a role taken by a waiting thread: a call whose answer comes
    # while another thread holds it is woken at once, from a thread and from the event loop.
    slow: list = []
    holder = threading.Thread(
        target=lambda: slow.append(toolkit.call("host-sleep", {"seconds": "2"}))
    )
    holder.start()
    time.sleep(0.3)  # the slow call's thread is reading by now
    started = time.monotonic()
    from_thread = await asyncio.to_thread(toolkit.call, "host-echo", {"text": "a"})
    from_loop = await toolkit.acall("host-echo", {"text": "b"})
    took = time.monotonic() - started
    holder.join(10)
    assert [from_thread.text, from_loop.text] == ["a\n[exit code 0]", "b\n[exit code 0]"]
    assert took < 1.5, f"the quick calls waited {took:.2f} s, behind the slow one"
    assert [r.is_error for r in slow] == [False]


def test_review_without_a_person_is_rejected(toolkit):
    reviewed = tools_of(toolkit)["host-reviewed"]
    answer = reviewed.invoke(call("host-reviewed", {"text": "x"}, "r1"))
    assert answer.status == "error"
    assert answer.artifact["error"]["kind"] == "rejected"
    assert "human_in_the_loop()" in answer.content


def test_review_asks_the_review_function(box):
    asked = []

    def review(name, arguments):
        asked.append((name, arguments))
        return (arguments["text"] == "fine", "only fine things")

    with WardenToolkit(
        toolbox=box, home=box.parent / "home", warden=warden_bin(), review=review
    ) as kit:
        reviewed = tools_of(kit)["host-reviewed"]
        yes = reviewed.invoke(call("host-reviewed", {"text": "fine"}, "r1"))
        no = reviewed.invoke(call("host-reviewed", {"text": "bad"}, "r2"))
        plain = tools_of(kit)["host-echo"].invoke(call("host-echo", {"text": "x"}, "r3"))
    assert yes.status == "success" and yes.content == "fine\n[exit code 0]"
    assert no.status == "error" and "only fine things" in no.content
    assert plain.status == "success"
    assert asked == [("host-reviewed", {"text": "fine"}), ("host-reviewed", {"text": "bad"})]


def test_review_changes_decides_what_a_call_keeps(box):
    workspace = box.parent / "workspace"
    workspace.chmod(0o777)
    policy = host_tool(
        "host-write", ["/bin/sh", "-c", "echo $0 > out.txt", "{text}"], workspace
    ).replace('access = "read-only"', 'access = "read-write"')
    (box / "write.toml").write_text(policy + "[review]\nchanges = true\n")
    shown = []

    def review_changes(name, arguments, changes):
        shown.append((name, arguments, changes))
        return (arguments["text"] == "keep", "not that text")

    with WardenToolkit(
        toolbox=box, home=box.parent / "home", warden=warden_bin(), review_changes=review_changes
    ) as kit:
        write = tools_of(kit)["host-write"]
        dropped = write.invoke(call("host-write", {"text": "drop"}, "w1"))
        assert not (workspace / "out.txt").exists()
        kept = write.invoke(call("host-write", {"text": "keep"}, "w2"))
    assert dropped.status == "error" and "not that text" in dropped.content
    assert dropped.artifact["error"]["kind"] == "rejected"
    assert kept.status == "success", kept.content
    assert (workspace / "out.txt").read_text() == "keep\n"
    assert [(n, a) for n, a, _ in shown] == [
        ("host-write", {"text": "drop"}),
        ("host-write", {"text": "keep"}),
    ]
    assert "out.txt" in shown[1][2] and "+keep" in shown[1][2], shown[1][2]


def test_human_in_the_loop_approves_edits_and_rejects(toolkit):
    turn = AIMessage(
        content="",
        tool_calls=[
            call("host-reviewed", {"text": "approved"}, "h1"),
            call("host-reviewed", {"text": "as the model wrote it"}, "h2"),
            call("host-reviewed", {"text": "refused"}, "h3"),
        ],
    )
    agent = create_agent(
        scripted(turn, "done"),
        tools=toolkit.get_tools(),
        middleware=[toolkit.human_in_the_loop(["host-reviewed"])],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "review"}}
    paused = agent.invoke({"messages": [("user", "go")]}, config)
    assert "__interrupt__" in paused, "the agent waits for a person"
    assert not [m for m in paused["messages"] if isinstance(m, ToolMessage)]
    edited = {"name": "host-reviewed", "args": {"text": "as the person wrote it"}}
    decisions = [
        {"type": "approve"},
        {"type": "edit", "edited_action": edited},
        {"type": "reject", "message": "not that one"},
    ]
    result = agent.invoke(Command(resume={"decisions": decisions}), config)
    answers = {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}
    assert answers["h1"].status == "success"
    assert answers["h1"].content == "approved\n[exit code 0]"
    assert answers["h2"].status == "success"
    assert answers["h2"].content.endswith("\nas the person wrote it\n[exit code 0]")
    assert answers["h3"].status == "error" and "not that one" in answers["h3"].content
    assert result["messages"][-1].content == "done"
    # The same call outside the middleware's approval is still refused by warden.
    again = tools_of(toolkit)["host-reviewed"].invoke({"text": "approved"})
    assert again.startswith("Error (rejected)")


@pytest.fixture
def wasm_toolkit() -> Iterator[WardenToolkit]:
    """policies/units.toml (`convert`) and the hostile fixture (`boom` panics: a trap)."""
    for name in ("units", "hostile"):
        if not (WASM / f"{name}.wasm").is_file():
            pytest.fail(f"{WASM / name}.wasm is missing: build guest-sdk (scripts/test does)")
    with scratch() as base:
        box = base / "policies"
        box.mkdir()
        copy_policy("units.toml", box)
        hostile = f'[executor]\nkind = "wasm"\ncomponent = "{WASM / "hostile.wasm"}"\n'
        (box / "hostile.toml").write_text(hostile + '[limits]\ntimeout = "3s"\n')
        with WardenToolkit(toolbox=box, home=base / "home", warden=warden_bin()) as kit:
            yield kit


def test_create_agent_with_wasm_tools_one_with_bad_arguments_one_trapping(wasm_toolkit):
    convert = {"quantity": {"value": 5, "unit": "mile"}, "to": "kilometer"}
    turn = AIMessage(
        content="",
        tool_calls=[
            call("convert", convert, "w1"),
            call("convert", {"quantity": 5}, "w2"),
            call("boom", {"message": "kaboom"}, "w3"),
        ],
    )
    agent = create_agent(scripted(turn, "done"), tools=wasm_toolkit.get_tools())
    messages = agent.invoke({"messages": [("user", "go")]})["messages"]
    answers = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ["w1", "w2", "w3"]
    assert [m.status for m in answers] == ["success", "error", "error"]
    assert "8.04" in answers[0].content
    assert answers[0].artifact["structured"] is not None
    assert answers[1].artifact["error"]["kind"] == "invalid_arguments"
    assert answers[2].artifact["error"]["kind"] == "trap"
    assert "kaboom" in answers[2].content
    assert messages[-1].content == "done"
    tool = {t.name: t for t in wasm_toolkit.get_tools()}["convert"]
    assert tool.description.startswith("Converts a length to another unit"), tool.description
    assert tool.args_schema["properties"]["to"]["enum"][0] == "meter"
