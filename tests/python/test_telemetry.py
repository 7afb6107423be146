"""OpenTelemetry export, read by a real OTLP/HTTP receiver on loopback that decodes with the
official `opentelemetry-proto` messages (otlp_receiver.py): a call's `execute_tool` span and
metrics, a batch, an MCP call continuing its client's trace, an agent's model requests, a
denial, a credential use (its value nowhere in the export), sampling off, a dead receiver,
and the flush at SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import (
    ROOT,
    QuietHandler,
    Toolbox,
    connect,
    http_server,
    loopback_server,
    session,
    warden_bin,
)
from otlp_receiver import Receiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
CREDENTIAL = "otel-cred-5d1c9e77f0"
SERVER, INTERNAL = 2, 1
STATUS_ERROR = 2


def run(box: Toolbox, receiver_url: str | None, *args: str, stdin: str | None = None, **env):
    environment = {**os.environ, **box.env(), **env}
    if receiver_url:
        environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver_url
    return subprocess.run(
        [str(warden_bin()), *args],
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def named(spans, prefix: str):
    return [s for s in spans if s["name"].startswith(prefix)]


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


def test_a_call_is_an_execute_tool_span_with_its_metrics(toolbox, receiver):
    out = run(toolbox, receiver.url, "call", "add", '{"a": 2, "b": 40}')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] == "42"
    [span] = receiver.wait_for_spans(1)
    assert span["name"] == "execute_tool add"
    assert span["kind"] == INTERNAL
    a = span["attributes"]
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "add"
    assert a["gen_ai.tool.call.id"] == "call-1"
    assert a["gen_ai.tool.type"] == "function"
    assert a["warden.executor"] == "wasm"
    assert a["warden.policy.path"].endswith("trivial.toml")
    assert a["warden.attempts"] == 1
    assert "error.type" not in a
    # The grants by digest, as the call log names them.
    record = [r for r in map(json.loads, toolbox.call_log().splitlines()) if r["event"] == "call"][-1]
    assert a["warden.policy.digest"] == record["policy_digest"]
    # No content unless the operator asks for it.
    assert "gen_ai.tool.call.arguments" not in a and "gen_ai.tool.call.result" not in a
    assert not any(b"40" in body and b"arguments" in body for body in receiver.bodies)
    assert span["resource"]["service.name"] == "warden"
    histogram = receiver.wait_for(
        lambda: [m for m in receiver.metrics if m["name"] == "gen_ai.execute_tool.duration"]
    )
    assert histogram and histogram[0]["count"] == 1
    assert histogram[0]["attributes"] == {"gen_ai.tool.name": "add", "warden.executor": "wasm"}


def test_content_goes_out_only_when_asked(toolbox, receiver):
    capture = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    out = run(toolbox, receiver.url, "call", "add", '{"a": 2, "b": 40}', **capture)
    assert out.returncode == 0, out.stderr
    [span] = receiver.wait_for_spans(1)
    assert json.loads(span["attributes"]["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 40}
    assert span["attributes"]["gen_ai.tool.call.result"] == "42"


def test_a_batch_span_parents_its_calls_and_a_failure_stays_in_its_own(toolbox, receiver):
    batch = [
        {"id": "c1", "name": "add", "args": {"a": 1, "b": 2}},
        {"id": "c2", "name": "fail", "args": {"message": "nope"}},
        {"id": "c3", "name": "no_such_tool", "args": {}},
    ]
    out = run(toolbox, receiver.url, "run", stdin=json.dumps(batch))
    assert [m["status"] for m in json.loads(out.stdout)] == ["success", "error", "error"]
    spans = receiver.wait_for_spans(4)
    [parent] = named(spans, "warden.batch")
    assert parent["attributes"]["warden.batch.calls"] == 3
    assert parent["attributes"]["warden.batch.failed"] == 2
    calls = {s["attributes"]["gen_ai.tool.call.id"]: s for s in named(spans, "execute_tool")}
    assert sorted(calls) == ["c1", "c2", "c3"]
    for s in calls.values():
        assert s["trace_id"] == parent["trace_id"]
        assert s["parent_span_id"] == parent["span_id"]
    assert "error.type" not in calls["c1"]["attributes"]
    assert calls["c1"]["status"] != STATUS_ERROR
    assert calls["c2"]["attributes"]["error.type"] == "tool_error"
    assert calls["c3"]["attributes"]["error.type"] == "unknown_tool"
    assert calls["c3"]["status"] == STATUS_ERROR


@pytest.mark.anyio
async def test_an_mcp_call_continues_the_clients_trace(toolbox, receiver):
    toolbox.extra_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    async with session("stdio", toolbox) as s:
        result = await s.call_tool("add", {"a": 1, "b": 1}, meta={"traceparent": traceparent})
        plain = await s.call_tool("add", {"a": 2, "b": 2})
    assert result.content[0].text == "2" and plain.content[0].text == "4"
    spans = receiver.wait_for_spans(4)
    requests = named(spans, "tools/call add")
    assert len(requests) == 2
    [continued] = [s for s in requests if s["trace_id"] == TRACE_ID]
    assert continued["parent_span_id"] == PARENT_ID
    assert continued["kind"] == SERVER
    a = continued["attributes"]
    assert a["mcp.method.name"] == "tools/call"
    assert a["gen_ai.tool.name"] == "add"
    assert a["network.transport"] == "pipe"
    assert "jsonrpc.request.id" in a
    [call] = [s for s in named(spans, "execute_tool") if s["trace_id"] == TRACE_ID]
    assert call["parent_span_id"] == continued["span_id"]
    # A request without trace context starts a trace of its own.
    [fresh] = [s for s in requests if s["trace_id"] != TRACE_ID]
    assert fresh["parent_span_id"] == ""


@pytest.mark.anyio
async def test_an_http_session_is_named_on_its_spans(toolbox, receiver):
    toolbox.extra_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    with http_server(toolbox) as (url, token):
        async with connect(url, token) as s:
            await s.call_tool("add", {"a": 1, "b": 1})
        spans = receiver.wait_for_spans(1, timeout=1)
        assert spans == [], "nothing is exported before the schedule or the end"
    [request] = named(receiver.wait_for_spans(2), "tools/call add")
    assert request["attributes"]["network.transport"] == "tcp"
    assert len(request["attributes"]["mcp.session.id"]) > 8


def test_sigterm_flushes_what_is_queued(toolbox, receiver):
    # A minute's schedule: only the flush at the end can send the span before the assert.
    toolbox.extra_env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_BSP_SCHEDULE_DELAY="60000")
    env = {**os.environ, **toolbox.env()}
    proc = subprocess.Popen(
        [str(warden_bin()), "serve"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "add", "arguments": {"a": 3, "b": 4}}},
    ]
    for line in lines:
        proc.stdin.write(json.dumps(line) + "\n")
    proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
    assert answers[1]["result"]["content"][0]["text"] == "7"
    assert receiver.spans == []
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    # The process is gone: whatever it did not flush on its way out can never come, so the
    # wait may be long without weakening the test (the receiver's thread may be slow to take
    # what did come on a busy machine).
    spans = receiver.wait_for_spans(2)
    assert named(spans, "execute_tool add"), spans


def test_sampling_off_exports_no_spans_but_metrics(toolbox, receiver):
    out = run(toolbox, receiver.url, "call", "add", '{"a": 1, "b": 2}',
              OTEL_TRACES_SAMPLER="always_off")
    assert out.returncode == 0, out.stderr
    assert receiver.wait_for(lambda: receiver.metrics)
    assert receiver.spans == []


def test_a_dead_receiver_changes_no_answer_and_the_loss_is_counted(toolbox):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    out = run(toolbox, dead, "call", "add", '{"a": 2, "b": 3}')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] == "5"
    assert f"telemetry not delivered to {dead}: 1 of 1 spans" in out.stderr, out.stderr
    # Logged once, not per export.
    assert out.stderr.count(f"the OTLP receiver at {dead} did not take") == 1, out.stderr


def test_a_receiver_that_never_answers_holds_the_exit_for_one_bounded_wait(toolbox):
    # It takes the connection and the request, and says nothing: each export waits for its
    # timeout (10 s), and warden's exit waits for its flush (5 s) once, not per signal.
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        url = f"http://127.0.0.1:{mute.getsockname()[1]}"
        start = time.monotonic()
        out = run(toolbox, url, "call", "add", '{"a": 2, "b": 3}')
        took = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] == "5"
    assert took < 9, f"{took:.1f} s"
    assert "1 of 1 spans" in out.stderr, out.stderr


def test_grpc_is_refused_with_the_fix(toolbox):
    out = run(toolbox, "http://127.0.0.1:1", "call", "add", "{}",
              OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    assert out.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in out.stderr
    assert "http/protobuf" in out.stderr


class Echo(QuietHandler):
    """Answers every GET with the request's Authorization header, as a hostile host might."""

    def do_GET(self):
        self.answer(f"auth={self.headers.get('Authorization')}".encode())


@pytest.fixture
def echo():
    with loopback_server(Echo) as port:
        yield port


@pytest.fixture
def host_box(tmp_path) -> Toolbox:
    box = Toolbox(tmp_path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # The command runs as nobody; the folders above the root must let it pass.
    for p in (tmp_path, tmp_path.parent, tmp_path.parent.parent):
        p.chmod(p.stat().st_mode | 0o055)
    return box


def host_policy(box: Toolbox, port: int, credential: bool):
    shipped = (ROOT / "policies" / "shell-host.toml").read_text()
    grants = f'net = ["127.0.0.1:{port}"]\n'
    if credential:
        grants += (
            'net_credentials = [{ host = "127.0.0.1", header = "Authorization", '
            'from_host = "WARDEN_TEST_OTEL_CRED", prefix = "Bearer ", env = "API_TOKEN", '
            "allow_plain_http = true }]\n"
        )
    text = shipped.replace("[grants]\n", "[grants]\n" + grants, 1)
    (box.dir / "shell-host.toml").write_text(text)


def test_a_refused_destination_is_a_denial_event(host_box, receiver, echo):
    host_policy(host_box, echo, credential=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        elsewhere = s.getsockname()[1]
    command = f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{elsewhere}/"
    out = run(host_box, receiver.url, "call", "host-shell", json.dumps({"command": command}))
    assert json.loads(out.stdout)["content"].startswith("403"), out.stdout + out.stderr
    [span] = named(receiver.wait_for_spans(1), "execute_tool host-shell")
    assert span["attributes"]["warden.executor"] == "host"
    assert span["attributes"]["warden.denied_count"] == 1
    [event] = [e for e in span["events"] if e["name"] == "warden.denial"]
    assert event["attributes"]["destination"] == f"http://127.0.0.1:{elsewhere}"
    assert "not granted" in event["attributes"]["reason"] or event["attributes"]["reason"]
    denials = receiver.wait_for(
        lambda: [m for m in receiver.metrics if m["name"] == "warden.denials" and m["value"]]
    )
    assert denials and denials[0]["value"] == 1


def test_a_credential_use_names_its_host_and_never_its_value(host_box, receiver, echo):
    host_policy(host_box, echo, credential=True)
    command = f"curl -s http://127.0.0.1:{echo}/"
    out = run(
        host_box, receiver.url, "call", "host-shell", json.dumps({"command": command}),
        WARDEN_TEST_OTEL_CRED=CREDENTIAL,
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
    )
    message = json.loads(out.stdout)
    assert message["status"] == "success", out.stdout + out.stderr
    # The host saw the credential (and echoed it); the sandbox got it scrubbed.
    assert message["content"].startswith("auth=Bearer "), message
    assert CREDENTIAL not in message["content"]
    [span] = named(receiver.wait_for_spans(1), "execute_tool host-shell")
    assert span["attributes"]["warden.credential_uses"] == 1
    [event] = [e for e in span["events"] if e["name"] == "warden.credential"]
    # The host, and nothing of the request (tracing adds the event's level and target).
    assert event["attributes"]["server.address"] == "127.0.0.1"
    assert set(event["attributes"]) <= {"server.address", "level", "target"}
    assert "gen_ai.tool.call.result" in span["attributes"]
    # The call log names the host too.
    record = [
        r for r in map(json.loads, host_box.call_log().splitlines()) if r["event"] == "call"
    ][-1]
    assert record["credentials_used"] == ["127.0.0.1"]
    assert record["credentials_used_count"] == 1
    receiver.wait_for(lambda: receiver.metrics)
    assert not any(CREDENTIAL.encode() in body for body in receiver.bodies)


class ScriptedModel(QuietHandler):
    """An OpenAI-compatible endpoint that asks for one call of `add`, then answers."""

    turns = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).turns += 1
        if type(self).turns == 1:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_a", "type": "function",
                "function": {"name": "add", "arguments": '{"a": 20, "b": 22}'}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "42"}
            finish = "stop"
        body = json.dumps({
            "id": "x", "object": "chat.completion", "model": "scripted-1",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }).encode()
        self.answer(body, "application/json")


def test_an_agent_run_has_its_steps_and_model_requests(toolbox, receiver, tmp_path: Path):
    with loopback_server(ScriptedModel) as port:
        out = run(
            toolbox, receiver.url, "agent", "--model", "scripted-1", "what is 20 + 22?",
            OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
        )
    assert out.returncode == 0, out.stderr
    spans = receiver.wait_for_spans(6)
    [agent] = named(spans, "invoke_agent")
    assert agent["attributes"]["warden.stop"] == "answered"
    chats = named(spans, "chat scripted-1")
    assert len(chats) == 2
    a = chats[0]["attributes"]
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "scripted-1"
    assert a["gen_ai.usage.input_tokens"] == 11 and a["gen_ai.usage.output_tokens"] == 7
    steps = {s["span_id"]: s for s in named(spans, "step ")}
    assert len(steps) == 2
    for s in [*chats, *steps.values()]:
        assert s["trace_id"] == agent["trace_id"]
    [call] = named(spans, "execute_tool add")
    [batch] = named(spans, "warden.batch")
    assert call["parent_span_id"] == batch["span_id"]
    assert batch["parent_span_id"] in steps


def test_a_langchain_toolkit_call_continues_the_applications_trace(toolbox, receiver, monkeypatch):
    # The application's span, as any OpenTelemetry SDK would have it current.
    from langchain_warden import WardenToolkit
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("WARDEN_CACHE", toolbox.env()["WARDEN_CACHE"])
    parent = SpanContext(
        trace_id=int(TRACE_ID, 16),
        span_id=int(PARENT_ID, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with WardenToolkit(toolbox=toolbox.dir, home=toolbox.home, warden=warden_bin()) as kit:
        with trace.use_span(NonRecordingSpan(parent)):
            inside = kit.call("add", {"a": 1, "b": 2})
        outside = kit.call("add", {"a": 2, "b": 2})
    assert (inside.text, outside.text) == ("3", "4")
    requests = named(receiver.wait_for_spans(4), "tools/call add")
    assert len(requests) == 2, requests
    [continued] = [s for s in requests if s["trace_id"] == TRACE_ID]
    assert continued["parent_span_id"] == PARENT_ID
    [own] = [s for s in requests if s["trace_id"] != TRACE_ID]
    assert own["parent_span_id"] == ""
