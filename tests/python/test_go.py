"""A WASI 0.1 command module as an MCP tool: the Go example tool and fixture (guest-sdk/go, built
by scripts/build-polyglot with Go's own toolchain) through a real MCP client, over stdio and over
streamable HTTP."""

import os

import pytest

from harness import ROOT, Toolbox, session

pytestmark = pytest.mark.anyio
TRANSPORTS = ["stdio", "http"]
POLYGLOT = ROOT / "target" / "polyglot"


def error_kind(result) -> str:
    return (result.meta or {}).get("warden/error", {}).get("kind", "")


@pytest.fixture
def go_box(tmp_path) -> Toolbox:
    """gowordcount, nothing granted; gohostile with a 2 s deadline and a 64 MiB memory limit."""
    box = Toolbox(tmp_path)
    for name, limits in [("gowordcount", ""), ("gohostile", 'timeout = "2s"\nmemory = "64MiB"')]:
        component = POLYGLOT / f"{name}.wasm"
        if not component.is_file():
            message = f"{component} is missing: scripts/build-polyglot builds it (needs go)"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        (box.dir / f"{name}.toml").write_text(
            f'[executor]\nkind = "wasm"\ncomponent = "{component}"\n[limits]\n{limits}\n'
        )
    return box


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_go_tool_answers_and_its_exit_codes_survive(transport, go_box):
    async with session(transport, go_box) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        counted = await s.call_tool("gowordcount", {"args": ["-l", "-w"], "stdin": "a b\nc\n"})
        bad_flag = await s.call_tool("gowordcount", {"args": ["--nope"]})
        invalid = await s.call_tool("gowordcount", {"args": "-w"})
        exited = await s.call_tool("gohostile", {"args": ["exit", "42"]})
        spin = await s.call_tool("gohostile", {"args": ["spin"]})
        alloc = await s.call_tool("gohostile", {"args": ["alloc"]})
        outside = await s.call_tool("gohostile", {"args": ["read", "/etc/passwd"]})
        after = await s.call_tool("gowordcount", {"stdin": "still here"})

    schema = tools["gowordcount"].inputSchema
    assert set(schema["properties"]) == {"args", "stdin"}
    assert counted.isError is False
    assert counted.content[0].text == "2 3\n"
    assert counted.meta["warden/usage"]["wall_ms"] >= 0

    assert bad_flag.isError is True
    assert error_kind(bad_flag) == "exit_status"
    assert "status 2" in bad_flag.content[0].text
    assert "unknown flag --nope" in bad_flag.content[0].text
    assert error_kind(invalid) == "invalid_arguments"
    assert error_kind(exited) == "exit_status"
    assert "status 42" in exited.content[0].text

    assert error_kind(spin) == "timeout"
    assert error_kind(alloc) == "out_of_memory"
    assert error_kind(outside) == "exit_status"
    assert "root:" not in outside.content[0].text
    assert after.content[0].text == "0 2 10\n"
