"""Malformed JSON-RPC over stdio: each gets a JSON-RPC error (or, for a notification, silence),
and the server goes on serving. These write raw lines on purpose: no SDK sends garbage."""

import json
import os
import queue
import subprocess
import threading

import pytest

from harness import warden_bin


class RawServer:
    """`warden serve` over pipes, one JSON line at a time."""

    def __init__(self, box):
        self.proc = subprocess.Popen(
            [str(warden_bin()), "serve"],
            env={**os.environ, **box.env()},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(box.stderr, "wb"),
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, text: str | bytes):
        data = text if isinstance(text, bytes) else text.encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(self, id, method, params=None):
        message = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message))

    def receive(self, timeout: float = 30.0) -> dict:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            pytest.fail("no answer from warden serve")

    def nothing_within(self, seconds: float) -> bool:
        try:
            self.lines.get(timeout=seconds)
            return False
        except queue.Empty:
            return True

    def close(self):
        self.proc.stdin.close()
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def test_malformed_messages_get_errors_and_the_server_survives(toolbox):
    raw = RawServer(toolbox)
    try:
        raw.send("this is not JSON")
        answer = raw.receive()
        assert answer["error"]["code"] == -32700
        assert answer["id"] is None

        raw.request(1, "initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        })
        assert raw.receive()["result"]["serverInfo"]["name"] == "warden"
        raw.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

        raw.send('{"jsonrpc": "2.0", "id": 2, "method": "tools/list"')  # cut short
        assert raw.receive()["error"]["code"] == -32700

        raw.send("[1, 2, 3]")
        assert raw.receive()["error"]["code"] == -32600

        raw.request(3, "no/such/method", {})
        answer = raw.receive()
        assert answer["id"] == 3
        assert answer["error"]["code"] == -32601

        raw.request(4, "tools/call", {"arguments": {"a": 1}})  # no tool name
        answer = raw.receive()
        assert answer["id"] == 4
        assert answer["error"]["code"] == -32602

        # A malformed notification is not answered (JSON-RPC answers no notification).
        raw.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": {"not": "an id"}}}))
        assert raw.nothing_within(0.5)

        raw.send(b"\xff\xfe binary junk")
        assert raw.receive()["error"]["code"] == -32700

        # Deeper than the server reads into a value: still answered with the call's id.
        deep = "[" * 100_000 + "]" * 100_000
        raw.send('{"jsonrpc": "2.0", "id": 6, "method": "tools/call", '
                 '"params": {"name": "add", "_meta": {"x": ' + deep + '}}}')
        answer = raw.receive()
        assert answer["id"] == 6
        assert answer["error"]["code"] == -32602

        raw.request(5, "tools/call", {"name": "add", "arguments": {"a": 20, "b": 22}})
        answer = raw.receive()
        assert answer["id"] == 5
        assert answer["result"]["structuredContent"] == {"result": 42}
        assert raw.proc.poll() is None
    finally:
        code = raw.close()
    assert code == 0, "stdin closed: the server ends cleanly"


def test_a_broken_toolbox_fails_at_start_with_its_reason(toolbox):
    (toolbox.dir / "broken.toml").write_text("[executor]\nkind = 'wasm'\ncomponent = 'nope.wasm'\n")
    done = subprocess.run(
        [str(warden_bin()), "serve"],
        env={**os.environ, **toolbox.env()},
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert b"nope.wasm" in done.stderr
    assert done.stdout == b"", "nothing but MCP ever goes to stdout"
