"""tools/list and tools/call through a real MCP client, over stdio and over streamable HTTP."""

import json
import time

import anyio
import pytest

from harness import session

pytestmark = pytest.mark.anyio
TRANSPORTS = ["stdio", "http"]


def error_kind(result) -> str:
    """The error kind warden puts in `_meta` of a failed call."""
    return (result.meta or {}).get("warden/error", {}).get("kind", "")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_lists_tools_with_schemas_and_hints(transport, toolbox):
    async with session(transport, toolbox) as s:
        listed = await s.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert {"add", "noop", "units_convert", "units_add", "spin", "sleep", "fail"} <= set(tools)

    add = tools["add"]
    assert add.description.startswith("Adds two 32-bit integers")
    assert add.inputSchema["type"] == "object"
    assert set(add.inputSchema["properties"]) == {"a", "b"}
    assert sorted(add.inputSchema["required"]) == ["a", "b"]
    # A scalar result is wrapped: MCP wants an object schema.
    assert add.outputSchema["type"] == "object"
    assert add.outputSchema["required"] == ["result"]
    assert add.outputSchema["properties"]["result"]["type"] == "integer"
    assert tools["noop"].outputSchema is None

    # Grants decide the hints: trivial may write nothing, hostile has a read-write folder.
    assert add.annotations.readOnlyHint is True
    assert add.annotations.destructiveHint is False
    assert add.annotations.openWorldHint is False
    spin = tools["spin"]
    assert spin.annotations.readOnlyHint is False
    assert spin.annotations.destructiveHint is None
    assert spin.annotations.openWorldHint is False


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_successful_calls_answer_text_and_structured_content(transport, toolbox):
    async with session(transport, toolbox) as s:
        add = await s.call_tool("add", {"a": 2, "b": 40})
        convert = await s.call_tool(
            "units_convert", {"quantity": {"value": 1.5, "unit": "kilometer"}, "to": "meter"}
        )
        noop = await s.call_tool("noop", {})
    # The client has checked structuredContent against the outputSchema already.
    assert add.isError is False
    assert add.content[0].text == "42"
    assert add.structuredContent == {"result": 42}
    assert convert.isError is False
    assert convert.structuredContent == {"result": 1500.0}
    assert noop.isError is False
    assert noop.structuredContent is None
    # What each call used rides in _meta, beside the result the client checks.
    for result in (add, convert, noop):
        assert result.meta["warden/usage"]["wall_ms"] >= 0, result.meta
    assert '"tool_call_id":"mcp-' in toolbox.call_log(), "every call goes to the call log"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_failing_calls_are_tool_errors_with_their_kind(transport, toolbox):
    async with session(transport, toolbox) as s:
        failed = await s.call_tool("fail", {"message": "the disk is on fire"})
        invalid = await s.call_tool("add", {"a": "two"})
        unknown = await s.call_tool("ad", {"a": 1, "b": 2})
        trap = await s.call_tool("boom", {"message": "kaboom"})
        after = await s.call_tool("add", {"a": 1, "b": 1})

    assert failed.isError is True
    assert "the disk is on fire" in failed.content[0].text
    assert failed.meta["warden/usage"]["wall_ms"] >= 0, failed.meta
    assert error_kind(failed) == "tool_error"
    # `fail` has an output schema: no structuredContent on errors, so that strict clients (the
    # TypeScript SDK checks it against the output schema even then) accept the result.
    assert failed.structuredContent is None

    assert invalid.isError is True
    assert error_kind(invalid) == "invalid_arguments"
    assert "/a" in invalid.content[0].text

    assert unknown.isError is True
    assert unknown.structuredContent["kind"] == "unknown_tool"
    assert "add" in unknown.structuredContent["message"]

    assert trap.isError is True
    assert trap.structuredContent["kind"] == "trap"
    assert "kaboom" in trap.content[0].text

    assert after.structuredContent == {"result": 2}


async def test_a_result_cut_by_the_output_limit_is_an_error_with_the_cut_text(toolbox):
    scratch = toolbox.root / "scratch"
    (scratch / "big.txt").write_text("x" * 5000)
    toolbox.policy(
        "small.toml",
        "hostile",
        f'[grants]\nfs = [{{ host = "{scratch}", guest = "/scratch", access = "read-only" }}]\n'
        '[limits]\noutput = "1KiB"',
        top='prefix = "small_"',
    )
    async with session("stdio", toolbox) as s:
        whole = await s.call_tool("read", {"path": "/scratch/big.txt"})
        cut = await s.call_tool("small_read", {"path": "/scratch/big.txt"})
    assert whole.structuredContent == {"result": "x" * 5000}
    # A success without its structured result would fail the client's output-schema check.
    assert cut.isError is True
    assert error_kind(cut) == "limit_exceeded"
    assert "output truncated" in cut.content[0].text
    assert cut.structuredContent is None


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_parallel_calls_are_isolated_from_an_endless_loop(transport, toolbox):
    answers = {}
    async with session(transport, toolbox) as s:
        await s.list_tools()  # the client caches the output schemas first
        start = time.monotonic()

        async def call(i: int):
            if i == 0:
                result = await s.call_tool("spin", {})
            else:
                result = await s.call_tool("add", {"a": i, "b": 100})
            answers[i] = (time.monotonic() - start, result)

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(call, i)

    spin_took, spin = answers[0]
    assert spin.isError is True
    assert error_kind(spin) == "timeout"
    assert spin_took >= 2.5
    for i in range(1, 10):
        took, result = answers[i]
        assert result.structuredContent == {"result": i + 100}
        assert took < 3.0, f"call {i} waited for the loop: {took:.2f}s"
        assert took < spin_took


async def test_a_cancelled_call_stops_and_frees_its_sandbox(toolbox):
    # One call at a time: if the cancelled sleep kept running, the next call would wait 20 s.
    toolbox.policy(
        "slow.toml", "hostile", '[limits]\ntimeout = "60s"\nconcurrency = 1', top='prefix = "slow_"'
    )
    from mcp import types

    async with session("stdio", toolbox) as s:
        await s.list_tools()
        async with anyio.create_task_group() as tg:
            request_id = s._request_id  # the id the next request gets
            tg.start_soon(s.call_tool, "slow_sleep", {"ms": 20_000})
            await anyio.sleep(1.0)
            cancel = types.CancelledNotification(
                params=types.CancelledNotificationParams(requestId=request_id, reason="test")
            )
            await s.send_notification(types.ClientNotification(cancel))
            tg.cancel_scope.cancel()  # the server answers a cancelled request with nothing
        start = time.monotonic()
        after = await s.call_tool("slow_sleep", {"ms": 10})
        took = time.monotonic() - start
    assert after.isError is False
    assert took < 10, f"the cancelled call still held the tool's only slot ({took:.1f}s)"
    records = [json.loads(line) for line in toolbox.call_log().splitlines()]
    cancelled = [r for r in records if "cancelled" in r.get("message", "")]
    assert len(cancelled) == 1, records
    assert cancelled[0]["event"] == "call"
    assert cancelled[0]["tool"] == "slow_sleep"
    assert cancelled[0]["outcome"] == "unavailable", "an error kind like any other"
