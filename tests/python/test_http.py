"""The HTTP transport's guards: a bearer token, an Origin allowlist, loopback by default."""

import os
import subprocess
from urllib.parse import urlparse

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from harness import http_server, warden_bin

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
ACCEPT = "application/json, text/event-stream"


def post(url: str, **headers) -> httpx.Response:
    headers = {"Accept": ACCEPT, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return httpx.post(url, json=INITIALIZE, headers=headers, timeout=30)


def test_requests_without_the_token_get_401(toolbox):
    with http_server(toolbox) as (url, token):
        missing = post(url)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert post(url, Authorization="Bearer " + "0" * 48).status_code == 401
        assert post(url, Authorization=f"Basic {token}").status_code == 401
        assert post(url, Authorization=f"Bearer {token}").status_code == 200
        other = url.replace("/mcp", "/other")
        assert post(other, Authorization=f"Bearer {token}").status_code == 404


def test_a_foreign_origin_gets_403(toolbox):
    with http_server(toolbox, "--allow-origin", "https://app.example.com") as (url, token):
        auth = {"Authorization": f"Bearer {token}"}
        port = urlparse(url).port
        assert post(url, Origin="https://evil.example", **auth).status_code == 403
        assert post(url, Origin="http://localhost:1", **auth).status_code == 403
        assert post(url, Origin="null", **auth).status_code == 403
        # Even without the token: a web page learns nothing more.
        assert post(url, Origin="https://evil.example").status_code == 403
        assert post(url, Origin=f"http://localhost:{port}", **auth).status_code == 200
        assert post(url, Origin=f"http://127.0.0.1:{port}", **auth).status_code == 200
        assert post(url, Origin="https://app.example.com", **auth).status_code == 200


async def test_a_generated_token_is_printed_and_works(toolbox):
    with http_server(toolbox, token=None) as (url, token):
        assert len(token) == 64
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers, timeout=30) as client:
            async with streamable_http_client(url, http_client=client) as (read, write, _):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    result = await s.call_tool("add", {"a": 1, "b": 2})
        assert result.structuredContent == {"result": 3}


def test_a_non_loopback_address_is_refused_unless_allowed(toolbox):
    done = subprocess.run(
        [str(warden_bin()), "serve", "--http", "0.0.0.0:0"],
        env={**os.environ, **toolbox.env(), "WARDEN_MCP_TOKEN": "t" * 32},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert b"--allow-remote" in done.stderr


def test_a_short_token_is_refused(toolbox):
    done = subprocess.run(
        [str(warden_bin()), "serve", "--http", "127.0.0.1:0", "--token", "short"],
        env={**os.environ, **toolbox.env()},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert b"at least" in done.stderr


def test_malformed_bodies_get_the_json_rpc_errors_stdio_gives(toolbox):
    with http_server(toolbox) as (url, token):
        auth = {"Authorization": f"Bearer {token}"}
        init = post(url, **auth)
        session = init.headers["mcp-session-id"]
        headers = {"Accept": ACCEPT, "Content-Type": "application/json",
                   "Mcp-Session-Id": session, **auth}

        def raw(body: str) -> httpx.Response:
            return httpx.post(url, content=body, headers=headers, timeout=30)

        garbage = raw("this is not JSON")
        assert garbage.status_code == 400
        assert garbage.headers["content-type"] == "application/json"
        assert garbage.json()["error"]["code"] == -32700
        assert garbage.json()["id"] is None

        no_params = raw('{"jsonrpc": "2.0", "id": 7, "method": "tools/call"}')
        assert no_params.status_code == 200
        assert no_params.json()["error"]["code"] == -32602, "as over stdio"
        assert no_params.json()["id"] == 7
