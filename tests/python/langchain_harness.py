"""Helpers of the langchain-warden tests: toolboxes with the shipped shell policies copied
into temp folders, the warden binary, Docker's state, and the scripted models (a LangChain chat
model, and OpenAI's Responses API on loopback for the OpenAI Agents SDK)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolCall

from harness import QuietHandler

ROOT = Path(__file__).resolve().parents[2]
WASM = ROOT / "target" / "wasm32-wasip2" / "release"
CACHE = ROOT / "target" / "warden-pytest-cache"


def installed() -> bool:
    """Whether the tests run against the installed wheels (scripts/test-wheels)."""
    return os.environ.get("WARDEN_TEST_WHEELS") == "1"


def warden_bin() -> str:
    """The binary under test: the installed wheel's as the package finds it (under
    scripts/test-wheels), else WARDEN_BIN, else target/debug/warden."""
    if installed():
        from langchain_warden import find_warden

        return find_warden()
    path = Path(os.environ.get("WARDEN_BIN", ROOT / "target" / "debug" / "warden"))
    if not path.is_absolute():
        path = ROOT / path
    if not path.is_file():
        pytest.fail(f"no warden binary at {path}: run `cargo build` (or set WARDEN_BIN)")
    return str(path)


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A temp folder below /tmp, removed after: as `mktemp -d` makes it, only its owner may
    pass through, and a host shell's roots below it work all the same (docs/host.md)."""
    base = Path(tempfile.mkdtemp(prefix="langchain-test-"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def shell_toolbox(
    base: Path, *, output: str | None = None, extra: dict[str, str] | None = None
) -> Path:
    """`base/policies` holding policies/shell-host.toml and policies/shell-docker.toml as
    shipped (their `../workspace` is `base/workspace`, which nobody may enter and list),
    with their `output` limit set to `output` when given; `extra` adds files by name."""
    box = base / "policies"
    box.mkdir()
    workspace = base / "workspace"
    workspace.mkdir()
    workspace.chmod(0o755)
    (workspace / "README.txt").write_text("the workspace of the langchain-warden tests\n")
    (workspace / "README.txt").chmod(0o644)
    for name in ("shell-host.toml", "shell-docker.toml"):
        text = (ROOT / "policies" / name).read_text()
        if output is not None:
            assert 'output = "64KiB"' in text, name
            text = text.replace('output = "64KiB"', f'output = "{output}"')
        (box / name).write_text(text)
    for name, text in (extra or {}).items():
        (box / name).write_text(text)
    return box


def warden_env(base: Path) -> dict[str, str]:
    """The environment a test's warden runs with: its own home and the shared compile cache."""
    return {"WARDEN_HOME": str(base / "home"), "WARDEN_CACHE": str(CACHE)}


def docker_ok() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require_docker() -> None:
    if not docker_ok():
        if os.environ.get("CI") == "true":
            pytest.fail("no Docker engine answers (.ci/run starts one)")
        pytest.skip("no Docker engine answers")


def containers_of(pid: int) -> list[str]:
    """Containers warden's process `pid` made: their owner label is `boot-id:pid:start`."""
    columns = '{{.ID}} {{.Label "warden.owner"}}'
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=warden", "--format", columns],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = [line.split() for line in listed.splitlines()]
    return [row[0] for row in rows if len(row) == 2 and row[1].split(":")[1:2] == [str(pid)]]


def copy_policy(name: str, box: Path) -> None:
    """Copies policies/NAME into the toolbox folder `box`, its relative paths kept working by
    making them absolute."""
    text = (ROOT / "policies" / name).read_text()
    text = text.replace('"../', f'"{ROOT}/')
    (box / name).write_text(text)


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model answering a script of messages in turn, tool calls
    included; `bind_tools` accepts any tools (the script decides what is called)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self


def scripted(*turns: AIMessage | str) -> ScriptedChatModel:
    """A scripted model answering `turns` in order."""
    return ScriptedChatModel(messages=iter(list(turns)))


def call(name: str, args: dict[str, Any], call_id: str) -> ToolCall:
    """A tool call as a model writes it."""
    return ToolCall(name=name, args=args, id=call_id, type="tool_call")


def host_tool(name: str, argv: list[str], workspace: Path, rest: str = "") -> str:
    """A host tool's policy (not a session): `argv` with `{holes}`, `workspace` granted
    read-only, then `rest` (more tables)."""
    args = ", ".join(f'"{a}"' for a in argv)
    return f"""
[executor]
kind = "host"
name = "{name}"
argv = [{args}]

[grants]
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin" }}
fs = [{{ host = "{workspace}", access = "read-only" }}]

[limits]
timeout = "10s"
{rest}
"""


class ScriptedResponses(QuietHandler):
    """OpenAI's Responses API (`POST /v1/responses`, what the OpenAI Agents SDK calls by
    default) answering the turns of `script` in order: a list of tool calls as
    `(name, arguments, call_id)` (arguments a dict for a function tool, the text for a custom
    tool such as `apply_patch`), or the final text. Each request's body is kept in
    `requests`, so a test reads what the model was shown."""

    script: collections.deque[list[tuple[str, dict[str, Any] | str, str]] | str] = (
        collections.deque()
    )
    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/responses" or not self.script:
            error = {"message": f"unscripted: {self.path}", "type": "invalid_request_error"}
            self.answer(json.dumps({"error": error}).encode(), "application/json", status=400)
            return
        type(self).requests.append(body)
        turn = self.script.popleft()
        if isinstance(turn, str):
            output = [
                {
                    "type": "message",
                    "id": "msg_scripted",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": turn, "annotations": []}],
                }
            ]
        else:
            output = [
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{call_id}",
                    "call_id": call_id,
                    "name": name,
                    "input": arguments,
                    "status": "completed",
                }
                if isinstance(arguments, str)
                else {
                    "type": "function_call",
                    "id": f"fc_{call_id}",
                    "call_id": call_id,
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
                for name, arguments, call_id in turn
            ]
        response = {
            "id": f"resp_{len(type(self).requests)}",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": body.get("model", "scripted"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            },
        }
        self.answer(json.dumps(response).encode(), "application/json")


def tool_outputs(requests: list[dict[str, Any]]) -> dict[str, str]:
    """The tool call outputs the model was shown, by call id (the last one of each)."""
    return {
        item["call_id"]: item["output"]
        for body in requests
        for item in body.get("input") or []
        if isinstance(item, dict)
        and item.get("type") in ("function_call_output", "custom_tool_call_output")
    }
