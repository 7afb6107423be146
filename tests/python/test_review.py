"""Tools whose policy requires review ask the client's user through MCP elicitation."""

import hashlib
import json
import re

import pytest
from mcp import types

from harness import session

pytestmark = pytest.mark.anyio
TRANSPORTS = ["stdio", "http"]


@pytest.fixture
def reviewed(toolbox):
    toolbox.policy("reviewed.toml", "trivial", "[review]\nrequired = true", top='prefix = "rev_"')
    return toolbox


def reviewer(answer: dict | None, asked: list):
    async def elicit(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        if answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=answer)

    return elicit


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_approved_call_runs(transport, reviewed):
    asked = []
    callback = reviewer({"decision": "approve"}, asked)
    async with session(transport, reviewed, elicitation_callback=callback) as s:
        result = await s.call_tool("rev_add", {"a": 2, "b": 3})
        unreviewed = await s.call_tool("add", {"a": 2, "b": 3})
    assert result.structuredContent == {"result": 5}
    assert unreviewed.structuredContent == {"result": 5}
    assert len(asked) == 1, "only the tool that requires review asks"
    assert "rev_add" in asked[0] and '"a":2' in asked[0]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_rejected_call_does_not_run_and_says_why(transport, reviewed):
    asked = []
    callback = reviewer({"decision": "reject", "reason": "not on a Friday"}, asked)
    async with session(transport, reviewed, elicitation_callback=callback) as s:
        rejected = await s.call_tool("rev_add", {"a": 2, "b": 3})
    assert rejected.isError is True
    assert rejected.meta["warden/error"]["kind"] == "rejected"
    assert "not on a Friday" in rejected.content[0].text


def digest(tool: str, arguments: dict) -> str:
    """sha256 of the JCS form of [tool, arguments] (for these plain values: sorted keys, no
    spaces), as a client computes it on its own."""
    canonical = json.dumps([tool, arguments], separators=(",", ":"), sort_keys=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


async def test_an_approval_is_bound_to_the_digest_the_message_names(reviewed):
    asked = []

    async def elicit(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        named = re.search(r"Digest: (sha256:[0-9a-f]{64})", params.message)[1]
        wrong = named if len(asked) == 1 else digest("rev_add", {"a": 2, "b": 3})
        return types.ElicitResult(action="accept", content={"decision": "approve", "digest": wrong})

    async with session("stdio", reviewed, elicitation_callback=elicit) as s:
        bound = await s.call_tool("rev_add", {"a": 2, "b": 3})
        other = await s.call_tool("rev_add", {"a": 2, "b": 30})
    assert f"Digest: {digest('rev_add', {'a': 2, 'b': 3})}" in asked[0], asked[0]
    assert bound.structuredContent == {"result": 5}
    # An approval of the first call's digest does not run the second.
    assert other.isError is True
    assert other.meta["warden/error"]["kind"] == "rejected"
    assert "digest" in other.content[0].text


async def test_a_declined_review_is_a_rejection(reviewed):
    async with session("stdio", reviewed, elicitation_callback=reviewer(None, [])) as s:
        declined = await s.call_tool("rev_add", {"a": 2, "b": 3})
    assert declined.isError is True
    assert declined.meta["warden/error"]["kind"] == "rejected"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_without_elicitation_review_is_rejected(transport, reviewed):
    async with session(transport, reviewed) as s:
        result = await s.call_tool("rev_add", {"a": 2, "b": 3})
    assert result.isError is True
    assert result.meta["warden/error"]["kind"] == "rejected"
    assert "elicitation" in result.content[0].text
