"""The samples of python/langchain-warden/README.md, run as written: in a folder holding the
shipped shell policies (`policies/`) and their `workspace/`, with a scripted chat model as the
`model` each sample leaves to the reader."""

from __future__ import annotations

import re
from pathlib import Path

from langchain_core.messages import AIMessage, ToolMessage

from langchain_harness import ROOT, call, scratch, scripted, shell_toolbox, warden_bin

README = ROOT / "python" / "langchain-warden" / "README.md"

# What the model says in each sample that uses one, in the README's order (None: no model).
SCRIPTS = [
    [
        AIMessage(
            content="", tool_calls=[call("host-shell", {"command": "wc -l < README.txt"}, "r1")]
        ),
        "One line.",
    ],
    [
        AIMessage(content="", tool_calls=[call("host-shell", {"command": "rm -rf /tmp/*"}, "r2")]),
        "Left alone.",
    ],
    [
        AIMessage(
            content="",
            tool_calls=[
                call(
                    "write_file",
                    {"file_path": "/tmp/hello.py", "content": "print('hello')\n"},
                    "r3",
                )
            ],
        ),
        AIMessage(
            content="", tool_calls=[call("execute", {"command": "python /tmp/hello.py"}, "r4")]
        ),
        "It printed hello.",
    ],
    None,
    [AIMessage(content="", tool_calls=[call("shell", {"command": "ls"}, "r5")]), "README.txt"],
]


def samples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def answers(result: dict) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def test_the_readme_samples_run_as_written(monkeypatch, capsys):
    blocks = samples()
    assert len(blocks) == len(SCRIPTS), "a sample was added or removed: update SCRIPTS"
    tool_messages: dict[str, ToolMessage] = {}
    with scratch() as base:
        shell_toolbox(base)
        monkeypatch.chdir(base)
        monkeypatch.setenv("WARDEN_BIN", warden_bin())
        monkeypatch.setenv("WARDEN_HOME", str(base / "home"))
        namespace: dict = {}
        for block, script in zip(blocks, SCRIPTS):
            if script is not None:
                namespace["model"] = scripted(*script)
            exec(compile(block, str(README), "exec"), namespace)
            if script is not None:
                result = namespace.pop("result")
                assert result["messages"][-1].content == script[-1]
                tool_messages |= answers(result)
        assert namespace["download"].content == bytes(range(256))
    assert tool_messages["r1"].content == "1\n[exit code 0]"
    assert (
        tool_messages["r2"].status == "error" and "Leave /tmp alone." in tool_messages["r2"].content
    )
    assert tool_messages["r3"].status == "success"
    assert "hello" in tool_messages["r4"].content
    assert "README.txt" in tool_messages["r5"].content
    assert not Path("/tmp/hello.py").exists(), "the deep agent wrote in the sandbox's /tmp"
    printed = capsys.readouterr().out
    assert "hi\n" in printed, "cd persisted in the sandbox"
    assert "rm -rf /tmp/*" in printed, "the interrupt shows the call waiting for a decision"
