"""WardenSandbox as a deep agent's backend, WardenExecutionPolicy under LangChain's
ShellToolMiddleware, and what a caller sees when warden is missing, misconfigured or dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deepagents import create_deep_agent
from langchain.agents import create_agent
from langchain.agents.middleware import ShellToolMiddleware
from langchain_core.messages import AIMessage, ToolMessage

from harness import QuietHandler, loopback_server
from langchain_harness import (
    call,
    containers_of,
    require_docker,
    scratch,
    scripted,
    shell_toolbox,
    warden_bin,
)
from langchain_warden import (
    WardenExecutionPolicy,
    WardenNotFoundError,
    WardenSandbox,
    WardenStartError,
    WardenToolkit,
)

pytestmark = pytest.mark.anyio

SHELLS = ["host-shell", "shell"]


@pytest.fixture
def base() -> Iterator[Path]:
    with scratch() as base:
        shell_toolbox(base)
        yield base


def needs(tool: str) -> None:
    if tool == "shell":
        require_docker()


def tool_answers(messages: list) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


# -- deep agents -----------------------------------------------------------------------------


@pytest.mark.parametrize("tool", SHELLS)
def test_a_deep_agent_writes_and_runs_a_file_inside_the_sandbox(base, tool):
    needs(tool)
    script = "/tmp/agent-work/hello.py"
    model = scripted(
        AIMessage(
            content="",
            tool_calls=[
                call(
                    "write_file",
                    {
                        "file_path": script,
                        "content": "import os\nprint('hello from', os.getuid())\n",
                    },
                    "d1",
                )
            ],
        ),
        AIMessage(content="", tool_calls=[call("execute", {"command": f"python3 {script}"}, "d2")]),
        "done",
    )
    with WardenSandbox(
        tool=tool, toolbox=base / "policies", home=base / "home", warden=warden_bin()
    ) as sandbox:
        agent = create_deep_agent(model=model, backend=sandbox)
        result = agent.invoke({"messages": [("user", "write hello.py and run it")]})
        ran = sandbox.execute(f"cat {script}")
    answers = tool_answers(result["messages"])
    assert answers["d1"].status == "success", answers["d1"]
    assert "hello from 65534" in answers["d2"].content, answers["d2"].content
    assert "print('hello from'" in ran.output
    assert result["messages"][-1].content == "done"
    # The file lived in the sandbox's own /tmp: not on the host, not in the granted root.
    assert not Path(script).exists()
    assert sorted(p.name for p in (base / "workspace").iterdir()) == ["README.txt"]


def test_sandboxes_share_nothing_and_close_leaves_nothing(base):
    require_docker()
    box, home = base / "policies", base / "home"
    with (
        WardenSandbox("shell", box, home, warden_bin()) as one,
        WardenSandbox("shell", box, home, warden_bin()) as two,
    ):
        assert one.id != two.id
        one.execute("echo one > /tmp/mine")
        assert two.execute("cat /tmp/mine").exit_code != 0, "the other sandbox sees its own /tmp"
        assert one.execute("cat /tmp/mine").output.strip() == "one"
        pid = one.process.pid
        assert len(containers_of(pid)) == 1
    assert containers_of(pid) == [], "close() removed the session's container"
    assert not one.process.alive


def test_a_host_sandbox_leaves_no_process_after_close(base):
    sandbox = WardenSandbox("host-shell", base / "policies", base / "home", warden_bin())
    marker = f"{time.time_ns() % 100000 + 700000}"
    sandbox.execute(f"sleep {marker} &")
    pid = sandbox.process.pid
    children: list[str] = []
    deadline = time.monotonic() + 10
    while not children and time.monotonic() < deadline:
        found = subprocess.run(
            ["pgrep", "-x", "-f", f"sleep {marker}"], capture_output=True, text=True
        )
        children = found.stdout.split()
        time.sleep(0.05)
    assert children, "the background job runs in the session"
    sandbox.close()
    assert not Path(f"/proc/{pid}").exists()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{c}").exists() for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{c}").exists() for c in children)


EXITS_WITHOUT_CLOSING = """
import sys
from langchain_warden import WardenSandbox, WardenToolkit
box, home, warden = sys.argv[1:4]
sandbox = WardenSandbox("shell", box, home, warden)
sandbox.execute("true")
kit = WardenToolkit(box, home, warden)
print(sandbox.process.pid, kit.process.pid, flush=True)
"""


def test_interpreter_exit_ends_every_process_and_container(base):
    require_docker()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            EXITS_WITHOUT_CLOSING,
            str(base / "policies"),
            str(base / "home"),
            warden_bin(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2, done
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    assert containers_of(pids[0]) == [], "the sandbox's container went with its session"


# -- ShellToolMiddleware -----------------------------------------------------------------------


@pytest.mark.parametrize("tool", SHELLS)
def test_the_shell_middleware_runs_its_shell_in_warden(base, tool, monkeypatch):
    needs(tool)
    secret = base / "secret.txt"
    secret.write_text("HOST-SECRET-VALUE\n")
    secret.chmod(0o644)
    monkeypatch.setenv("LANGCHAIN_WARDEN_SECRET", "HOST-SECRET-ENV")
    commands = {
        "m1": "cd /tmp && export GREETING=kept",
        "m2": "pwd; echo $GREETING",
        "m3": "curl -sS -m 5 http://example.com >/dev/null 2>&1 && echo REACHED || echo REFUSED",
        "m4": f"cat {secret} 2>&1 | head -1; echo env=${{LANGCHAIN_WARDEN_SECRET:-unset}}; id -u",
    }
    model = scripted(
        *[
            AIMessage(content="", tool_calls=[call("shell", {"command": c}, i)])
            for i, c in commands.items()
        ],
        "done",
    )
    policy = WardenExecutionPolicy(
        tool=tool, toolbox=base / "policies", home=base / "home", warden=warden_bin()
    )
    middleware = ShellToolMiddleware(workspace_root=base / "workspace", execution_policy=policy)
    agent = create_agent(model, middleware=[middleware])
    answers = tool_answers(agent.invoke({"messages": [("user", "look around")]})["messages"])
    assert answers["m2"].content.split("\n")[:2] == ["/tmp", "kept"], answers["m2"].content
    assert "REFUSED" in answers["m3"].content and "REACHED" not in answers["m3"].content
    seen = answers["m4"].content
    assert "HOST-SECRET" not in seen, seen
    assert "env=unset" in seen and "65534" in seen, seen


def test_the_shell_middleware_reaches_only_granted_hosts(base):
    class Hello(QuietHandler):
        def do_GET(self) -> None:
            self.answer(b"hello through the gate")

    with loopback_server(Hello) as port:
        policy_file = base / "policies" / "shell-host.toml"
        text = policy_file.read_text()
        policy_file.write_text(
            text.replace("[grants]\n", f'[grants]\nnet = ["127.0.0.1:{port}"]\n')
        )
        commands = {
            # ShellToolMiddleware finds its end marker at the start of a line: end with one.
            "n1": f"curl -sS -m 5 http://127.0.0.1:{port}/; echo",
            "n2": f"curl -sS -m 5 -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port + 1}/",
        }
        model = scripted(
            *[
                AIMessage(content="", tool_calls=[call("shell", {"command": c}, i)])
                for i, c in commands.items()
            ],
            "done",
        )
        policy = WardenExecutionPolicy(
            tool="host-shell", toolbox=base / "policies", home=base / "home", warden=warden_bin()
        )
        middleware = ShellToolMiddleware(workspace_root=base / "workspace", execution_policy=policy)
        agent = create_agent(model, middleware=[middleware])
        answers = tool_answers(agent.invoke({"messages": [("user", "fetch")]})["messages"])
    assert "hello through the gate" in answers["n1"].content, answers["n1"].content
    assert "403" in answers["n2"].content, answers["n2"].content


def test_a_shell_that_requires_review_is_refused_at_start_naming_the_fix(base):
    """`warden exec` refuses a reviewed tool where no one can be asked, as under the
    middleware: the policy says so before the first command, not as a dead shell."""
    policy_file = base / "policies" / "shell-host.toml"
    policy_file.write_text(policy_file.read_text() + "\n[review]\nrequired = true\n")
    policy = WardenExecutionPolicy(
        tool="host-shell", toolbox=base / "policies", home=base / "home", warden=warden_bin()
    )
    with pytest.raises(WardenStartError, match="review") as refused:
        policy.check()
    assert "HumanInTheLoopMiddleware" in str(refused.value)
    # warden itself refuses it too, for a parent that skips the check.
    done = subprocess.run(
        policy.command_line(["/bin/sh", "-c", "echo RAN"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        start_new_session=True,
    )
    assert done.returncode == 125 and "RAN" not in done.stdout, done
    assert "no one to ask" in done.stderr, done.stderr


def test_the_execution_policy_names_warden_exec():
    policy = WardenExecutionPolicy(tool="host-shell", toolbox=".", warden=warden_bin())
    argv = policy.command_line(["/bin/bash"])
    assert argv[1] == "exec" and argv[-3:] == ["host-shell", "--", "/bin/bash"]
    assert "--timeout" in argv and "none" in argv


# -- failures -------------------------------------------------------------------------------


def test_a_missing_binary_says_how_to_fix_it(base, monkeypatch):
    monkeypatch.delenv("WARDEN_BIN", raising=False)
    monkeypatch.setattr("langchain_warden._binary.bundled_warden", lambda: None)
    monkeypatch.setenv("PATH", str(base))
    with pytest.raises(WardenNotFoundError, match="WARDEN_BIN"):
        WardenToolkit(toolbox=base / "policies")
    with pytest.raises(WardenNotFoundError, match="warden="):
        WardenSandbox("host-shell", base / "policies", warden=base / "no-such-warden")
    policy = WardenExecutionPolicy(tool="host-shell", toolbox=base / "policies")
    with pytest.raises(WardenNotFoundError, match="PATH"):
        policy.command_line(["bash"])


def test_a_missing_toolbox_or_tool_says_so(base, caplog):
    with pytest.raises(WardenStartError, match="toolbox="):
        WardenToolkit(toolbox=base / "nowhere", warden=warden_bin())
    with pytest.raises(WardenStartError, match="no tool 'nope'.*host-shell"):
        WardenSandbox("nope", base / "policies", base / "home", warden_bin())
    policy = WardenExecutionPolicy(
        tool="nope", toolbox=base / "policies", home=base / "home", warden=warden_bin()
    )
    middleware = ShellToolMiddleware(workspace_root=base / "workspace", execution_policy=policy)
    agent = create_agent(scripted("never asked"), middleware=[middleware])
    with pytest.raises(WardenStartError, match="no tool 'nope'.*host-shell"):
        agent.invoke({"messages": [("user", "hi")]})
    # A broken policy is left out, named in the application's log; the shells still load.
    (base / "policies" / "broken.toml").write_text("[executor]\nkind = 'nothing'\n")
    with caplog.at_level("WARNING", logger="langchain_warden"):
        kit = WardenToolkit(toolbox=base / "policies", home=base / "home", warden=warden_bin())
        with kit:
            assert sorted(t.name for t in kit.get_tools()) == ["host-shell", "shell"]
    assert any("broken.toml:2" in r.getMessage() for r in caplog.records), caplog.text


def test_a_warden_that_dies_mid_call_answers_errors_not_hangs(base):
    (base / "policies" / "shell-docker.toml").unlink()
    with WardenToolkit(toolbox=base / "policies", home=base / "home", warden=warden_bin()) as kit:
        shell = kit.get_tools()[0]
        turn = AIMessage(
            content="",
            tool_calls=[call("host-shell", {"command": "sleep 20"}, f"k{i}") for i in range(2)],
        )
        agent = create_agent(scripted(turn, "done"), tools=kit.get_tools())
        pid = kit.process.pid

        def kill_soon() -> None:
            time.sleep(0.5)
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill_soon).start()
        started = time.monotonic()
        answers = tool_answers(agent.invoke({"messages": [("user", "go")]})["messages"])
        assert time.monotonic() - started < 10
        assert [m.status for m in answers.values()] == ["error", "error"]
        for answer in answers.values():
            assert answer.artifact["error"]["kind"] == "warden"
            assert "killed by signal 9" in answer.content
        later = shell.invoke(call("host-shell", {"command": "true"}, "k3"))
        assert later.status == "error" and "killed by signal 9" in later.content


def test_a_sandbox_whose_warden_died_starts_a_new_one(base):
    sandbox = WardenSandbox("host-shell", base / "policies", base / "home", warden_bin())
    try:
        assert [r.error for r in sandbox.upload_files([("/tmp/x", b"x")])] == [None]
        dead = sandbox.process
        os.kill(dead.pid, signal.SIGKILL)
        dead._proc.wait()
        started = time.monotonic()
        response = sandbox.execute("echo hi")
        assert time.monotonic() - started < 60
        assert response.exit_code == 0 and response.output.startswith("hi\n")
        assert "killed by signal 9" in response.output and "in a new session" in response.output
        [download] = sandbox.download_files(["/tmp/x"])
        assert (download.content, download.error) == (None, "file_not_found")
    finally:
        sandbox.close()
    assert not dead.alive and not sandbox.process.alive
