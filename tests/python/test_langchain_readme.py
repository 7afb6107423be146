"""The Python samples of python/langchain-warden/README.md and of README.md, run as written: with
the package's own toolbox, and the Anthropic model the first sample of each page defines (or the
OpenAI Agents SDK's default model, OpenAI's Responses API) served by an endpoint on loopback that
answers each sample's script."""

from __future__ import annotations

import collections
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from agents import set_tracing_disabled
from langchain_core.messages import ToolCall, ToolMessage

from harness import QuietHandler, loopback_server
from langchain_harness import ROOT, ScriptedResponses, call, scratch, tool_outputs, warden_bin
from langchain_warden import SHELL_TOOLBOX

PACKAGE_README = ROOT / "python" / "langchain-warden" / "README.md"

HELLO = "print('hello')\n"
RUN_HELLO = f"printf {HELLO!r} > hello.py && python hello.py"

# A turn of the model: its tool calls, or its final answer.
Turn = list[ToolCall] | str


@dataclass
class Responses:
    """The script of a sample whose model is OpenAI's Responses API (the OpenAI Agents SDK's):
    each turn its function calls, `(name, arguments, call_id)`, or its final answer."""

    turns: list[list[tuple[str, dict, str]] | str]


# What the model says in each sample of a page, in the page's order (None: no model).
SCRIPTS: dict[Path, list[list[Turn] | Responses | None]] = {
    PACKAGE_README: [
        [[call("host-shell", {"command": "wc -l < README.txt"}, "r1")], "That many lines."],
        [[call("host-shell", {"command": "rm -rf /tmp/*"}, "r2")], "Left alone."],
        [
            [call("write_file", {"file_path": "/tmp/hello.py", "content": HELLO}, "r3")],
            [call("execute", {"command": "python /tmp/hello.py"}, "r4")],
            "It printed hello.",
        ],
        None,
        Responses(
            [
                [("exec_command", {"cmd": RUN_HELLO}, "o1")],
                "It printed hello.",
            ]
        ),
        [[call("shell", {"command": "ls"}, "r5")], "README.txt"],
    ],
    ROOT / "README.md": [
        [[call("host-shell", {"command": "wc -l < README.txt"}, "t1")], "That many lines."],
    ],
}


class ScriptedAnthropic(QuietHandler):
    """Anthropic's Messages API answering the turns of `script` in order."""

    script: collections.deque[Turn] = collections.deque()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/messages" or not self.script:
            error = {"type": "invalid_request_error", "message": f"unscripted: {self.path}"}
            self.answer(json.dumps({"type": "error", "error": error}).encode(), status=400)
            return
        turn = self.script.popleft()
        if isinstance(turn, str):
            content, stop = [{"type": "text", "text": turn}], "end_turn"
        else:
            content = [
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]}
                for c in turn
            ]
            stop = "tool_use"
        message = {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        self.answer(json.dumps(message).encode(), "application/json")


def samples(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)


def run_samples(page: Path) -> dict[str, ToolMessage]:
    """Runs the page's samples in one namespace, each model answering its script; answers
    the tool messages of their agents' results by call id."""
    blocks, scripts = samples(page), SCRIPTS[page]
    assert len(blocks) == len(scripts), f"a sample of {page} was added or removed: update SCRIPTS"
    tool_messages: dict[str, ToolMessage] = {}
    namespace: dict = {}
    for block, script in zip(blocks, scripts):
        if isinstance(script, Responses):
            ScriptedResponses.script.extend(script.turns)
            exec(compile(block, str(page), "exec"), namespace)
            assert not ScriptedResponses.script, f"the model was asked less than scripted: {block}"
            assert namespace.pop("result").final_output == script.turns[-1]
            continue
        ScriptedAnthropic.script.extend(script or [])
        exec(compile(block, str(page), "exec"), namespace)
        assert not ScriptedAnthropic.script, f"the model was asked less than scripted: {block}"
        if script is not None:
            result = namespace.pop("result")
            assert result["messages"][-1].text == script[-1]
            tool_messages |= {
                m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)
            }
    return tool_messages


def test_the_readme_samples_run_as_written(monkeypatch, capsys):
    lines = len((SHELL_TOOLBOX.parent / "workspace" / "README.txt").read_text().splitlines())
    ScriptedAnthropic.script.clear()
    ScriptedResponses.script.clear()
    ScriptedResponses.requests.clear()
    set_tracing_disabled(True)  # the SDK would send its traces to OpenAI
    with (
        scratch() as base,
        loopback_server(ScriptedAnthropic) as port,
        loopback_server(ScriptedResponses) as openai,
    ):
        monkeypatch.chdir(base)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{openai}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "scripted")
        # Where the SDK keeps a run's snapshots by default.
        monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
        monkeypatch.setenv("WARDEN_BIN", warden_bin())
        monkeypatch.setenv("WARDEN_HOME", str(base / "home"))
        monkeypatch.delenv("ANTHROPIC_API_URL", raising=False)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted")
        answers = run_samples(PACKAGE_README)
        printed = capsys.readouterr().out
        answers |= run_samples(ROOT / "README.md")
        [snapshot] = (base / "state").glob("openai-agents-python/sandbox/snapshots/*.tar")
        with tarfile.open(snapshot) as tar:
            persisted = tar.extractfile("./hello.py").read()  # type: ignore[union-attr]
    assert answers["r1"].content == answers["t1"].content == f"{lines}\n[exit code 0]"
    assert answers["r2"].status == "error" and "Leave /tmp alone." in answers["r2"].content
    assert answers["r3"].status == "success"
    assert "hello" in answers["r4"].content
    assert "README.txt" in answers["r5"].content
    assert not Path("/tmp/hello.py").exists(), "the deep agent wrote in the sandbox's /tmp"
    assert "hello" in tool_outputs(ScriptedResponses.requests)["o1"]
    assert persisted == HELLO.encode(), "the SandboxAgent's workspace went to its snapshot"
    assert not Path("/tmp/workspace/hello.py").exists(), "and it was written in the sandbox"
    assert "hi\n" in printed, "cd persisted in the sandbox"
    assert "rm -rf /tmp/*" in printed, "the interrupt shows the call waiting for a decision"
