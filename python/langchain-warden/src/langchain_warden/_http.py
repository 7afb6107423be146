"""One MCP session of a `warden serve --http` server, as a client (streamable HTTP).

The session lives in the server, not in this object: any process holding the server's URL,
its token and the session's id may continue it, and `close()` only lets go of it; `delete()`
ends it (its shell or container with it). Each request goes on a connection of its own
(loopback: cheaper than keeping idle connections that the server closes in time), so
requests from several threads run at once.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from ._errors import WardenError
from ._process import _INVALID_PARAMS, PROTOCOL_VERSION, McpError, Watcher, deliver_progress
from ._wire import encode

_SESSION_HEADER = "Mcp-Session-Id"


class SessionGone(WardenError):
    """The server holds no such session: it was deleted, or idle past its ttl."""


class HttpSession:
    """An MCP session of the warden server at `url`: a new one (`initialize`d with
    `session_meta`, the client's choices (`session_choices`), and, when given, `idle` seconds
    as its own idle limit; `ValueError` when warden refuses them), or the existing
    `session_id` (`held()` tells whether the server
    still holds it)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        session_id: str | None = None,
        session_meta: Mapping[str, Any] | None = None,
        idle: float | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None:
            raise WardenError(f"not a warden HTTP server's URL: {url!r}")
        self.url = url
        self._host, self._port = parsed.hostname, parsed.port or 80
        self._path = parsed.path or "/mcp"
        self._token = token
        self._ids = itertools.count(1)
        self._closed = False
        self._gone: str | None = None
        self.session_id = session_id or self._initialize(session_meta, idle, startup_timeout)

    # -- requests ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        timeout: float | None = None,
        *,
        watcher: Watcher | None = None,
    ) -> dict[str, Any]:
        """Sends a request in the session and waits for its result (at most `timeout`
        seconds between two pieces of its answer); `watcher` takes the output warden streams
        for it."""
        return self._call(next(self._ids), method, params, timeout, watcher)

    async def arequest(
        self, method: str, params: Mapping[str, Any], *, watcher: Watcher | None = None
    ) -> dict[str, Any]:
        """The async twin of `request` (it waits on a thread: the event loop is not blocked);
        a cancelled caller cancels the call in warden."""
        request_id = next(self._ids)
        task = asyncio.to_thread(self._call, request_id, method, params, None, watcher)
        try:
            return await task
        except asyncio.CancelledError:
            self.notify(
                "notifications/cancelled",
                {"requestId": request_id, "reason": "the caller was cancelled"},
            )
            raise

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """Sends a notification in the session (no answer)."""
        message = {"jsonrpc": "2.0", "method": method, "params": dict(params)}
        status, _, _ = self._exchange("POST", message, timeout=30)
        if status not in (200, 202):
            raise WardenError(f"warden answered HTTP {status} to {method}")

    def held(self) -> bool:
        """Whether the server still holds the session (asking is no use of it)."""
        status, _, _ = self._exchange("HEAD", None, timeout=30)
        if status == 404:
            self._gone = self._gone or "the server holds no such session"
            return False
        if status != 200:
            raise WardenError(f"warden answered HTTP {status} when asked about a session")
        return True

    def delete(self) -> None:
        """Ends the session in the server: its shells and containers are gone when this
        returns. A session the server no longer holds is no error."""
        status, _, _ = self._exchange("DELETE", None, timeout=120)
        if status not in (200, 404):
            raise WardenError(f"warden answered HTTP {status} to ending the session")
        self._gone = "the sandbox was deleted"

    def _initialize(
        self,
        session_meta: Mapping[str, Any] | None,
        idle: float | None,
        timeout: float,
    ) -> str:
        meta: dict[str, Any] = dict(session_meta or {})
        if idle is not None:
            meta["warden/idle"] = idle
        params: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "langchain-warden", "version": "0.1.0"},
        }
        if meta:
            params["_meta"] = meta
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        status, headers, answer = self._exchange("POST", message, timeout=timeout)
        session = headers.get(_SESSION_HEADER.lower())
        if status != 200 or answer is None:
            raise WardenError(f"warden answered HTTP {status} to initialize: {answer}")
        try:
            self.server_info = _result(answer)
        except McpError as err:
            if err.code == _INVALID_PARAMS and meta:
                raise ValueError(f"warden refused this session's choices or ttl: {err}") from None
            raise
        if session is None:
            raise WardenError("warden answered initialize without a session id")
        self.session_id = session
        self.notify("notifications/initialized", {})
        return session

    def _call(
        self,
        request_id: int,
        method: str,
        params: Mapping[str, Any],
        timeout: float | None,
        watcher: Watcher | None,
    ) -> dict[str, Any]:
        if self._gone is not None or self._closed:
            raise SessionGone(self._gone_message())
        message: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": dict(params),
        }
        if watcher is not None:
            meta = dict(message["params"].get("_meta") or {})
            message["params"]["_meta"] = {**meta, "progressToken": f"out-{request_id}"}
        status, _, answer = self._exchange("POST", message, timeout=timeout, watcher=watcher)
        if status == 404:
            self._gone = self._gone or "the server holds no such session"
            raise SessionGone(self._gone_message())
        if answer is None:
            raise WardenError(f"warden answered HTTP {status} to {method}, with no result")
        return _result(answer)

    # -- HTTP ----------------------------------------------------------------------------

    def _exchange(
        self,
        verb: str,
        message: Mapping[str, Any] | None,
        *,
        timeout: float | None,
        watcher: Watcher | None = None,
    ) -> tuple[int, dict[str, str], dict[str, Any] | None]:
        """One request on a connection of its own: the status, the headers (lowercase names)
        and the answer to `message` (the JSON-RPC message carrying its id), handing progress
        to `watcher` on the way."""
        headers = {"Authorization": f"Bearer {self._token}", "Host": f"{self._host}:{self._port}"}
        body = None
        if message is not None:
            body = encode(message)
            headers["Content-Type"] = "application/json"
            headers["Accept"] = "application/json, text/event-stream"
        if getattr(self, "session_id", None):
            headers[_SESSION_HEADER] = self.session_id
            headers["Mcp-Protocol-Version"] = PROTOCOL_VERSION
        connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            connection.request(verb, self._path, body=body, headers=headers)
            response = connection.getresponse()
            got = {k.lower(): v for k, v in response.getheaders()}
            if response.status == 401:
                raise WardenError(
                    f"the warden server at {self.url} refused the token (HTTP 401)"
                )
            answer = None
            if message is not None and "id" in message and response.status == 200:
                answer = self._answer(response, got, message["id"], watcher)
            else:
                response.read()
            return response.status, got, answer
        except (OSError, http.client.HTTPException) as err:
            raise WardenError(f"the warden server at {self.url} did not answer: {err}") from None
        finally:
            connection.close()

    def _answer(
        self,
        response: http.client.HTTPResponse,
        headers: Mapping[str, str],
        request_id: Any,
        watcher: Watcher | None,
    ) -> dict[str, Any] | None:
        """The message answering `request_id`, from a JSON body or an event stream (whose
        progress notifications go to `watcher`, and whose requests from the server are
        answered)."""
        if headers.get("content-type", "").startswith("application/json"):
            message = json.loads(response.read())
            return message if isinstance(message, dict) else None
        for message in _events(response):
            if message.get("id") == request_id and "method" not in message:
                return message
            params = message.get("params")
            if message.get("method") == "notifications/progress" and watcher is not None:
                if isinstance(params, dict):
                    deliver_progress(watcher, params)
            elif "method" in message and "id" in message:
                self._answer_server(message)
        return None

    def _answer_server(self, message: Mapping[str, Any]) -> None:
        """Answers a request from the server: a ping, or (no one reviews here) a decline."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if message.get("method") == "ping":
            reply["result"] = {}
        elif message.get("method") == "elicitation/create":
            reply["result"] = {"action": "decline"}
        else:
            reply["error"] = {"code": -32601, "message": f"method not found: {message['method']}"}
        threading.Thread(
            target=self._exchange, args=("POST", reply), kwargs={"timeout": 30}, daemon=True
        ).start()

    # -- life ----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the session may still be used: not let go of, and not known to be gone."""
        return not self._closed and self._gone is None

    @property
    def returncode(self) -> int | None:
        """None: the server is no process of this one's."""
        return None

    def ended(self) -> str:
        """Why the session cannot be used."""
        return "this sandbox was let go of" if self._closed else self._gone_message()

    def _gone_message(self) -> str:
        why = self._gone or "this sandbox was let go of"
        return (
            f"the sandbox's session {self.session_id} is gone ({why}): it was deleted, or "
            "idle past its ttl, or its server stopped"
        )

    def close(self, timeout: float = 10.0) -> None:
        """Lets go of the session; it lives on in the server (`delete` ends it)."""
        self._closed = True


def _result(message: Mapping[str, Any]) -> dict[str, Any]:
    error = message.get("error")
    if isinstance(error, dict):
        raise McpError(int(error.get("code", 0)), str(error.get("message")), error.get("data"))
    result = message.get("result")
    return result if isinstance(result, dict) else {}


def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The JSON messages of an event stream's `data` fields, as they come."""
    data: list[str] = []
    for raw in response:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            text, data = "\n".join(data), []
            try:
                message = json.loads(text)
            except ValueError:
                continue
            if isinstance(message, dict):
                yield message

