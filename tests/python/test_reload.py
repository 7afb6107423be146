"""Changing the toolbox's policy files while serving: clients hear notifications/tools/list_changed,
and a policy that does not load leaves the previous toolbox in force."""

import anyio
import pytest
from mcp import types

from harness import session, wait_for

pytestmark = pytest.mark.anyio
TRANSPORTS = ["stdio", "http"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_list_changed_arrives_when_a_policy_is_added(transport, toolbox):
    heard = []

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            heard.append(message.root)

    def changes():
        return [n for n in heard if isinstance(n, types.ToolListChangedNotification)]

    async with session(transport, toolbox, message_handler=on_message) as s:
        assert s.get_server_capabilities().tools.listChanged is True
        before = {t.name for t in (await s.list_tools()).tools}
        assert "extra_add" not in before

        toolbox.policy("extra.toml", "trivial", top='prefix = "extra_"')
        await wait_for(lambda: changes())
        after = {t.name for t in (await s.list_tools()).tools}
        assert after == before | {"extra_add", "extra_noop"}
        added = await s.call_tool("extra_add", {"a": 4, "b": 5})
        assert added.structuredContent == {"result": 9}

        # A policy that cannot be honoured: the toolbox in force stays, and nothing changed.
        (toolbox.dir / "broken.toml").write_text("[executor]\nkind = 'wasm'\ncomponent = 'x.wasm'\n")
        await anyio.sleep(2.5)
        assert len(changes()) == 1
        still = await s.call_tool("extra_add", {"a": 1, "b": 1})
        assert still.structuredContent == {"result": 2}

        # Fixing it by removing it, and removing a policy: the list changes again.
        (toolbox.dir / "broken.toml").unlink()
        (toolbox.dir / "extra.toml").unlink()
        await wait_for(lambda: len(changes()) == 2)
        assert {t.name for t in (await s.list_tools()).tools} == before
        gone = await s.call_tool("extra_add", {"a": 1, "b": 1})
        assert gone.isError is True
        assert gone.structuredContent["kind"] == "unknown_tool"
