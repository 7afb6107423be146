"""One long-lived `warden serve` process and a small MCP client for it (JSON-RPC lines on its
stdin and stdout).

A `WardenProcess` is one MCP connection, so one warden session: a docker or host shell tool in
session mode keeps one shell (its `cd`, variables and `/tmp`) for the life of the process.
Requests may be in flight at once from any thread or event loop; warden runs them
concurrently through its dispatcher. The process ends with `close()`, with the garbage
collection of its owner, or at interpreter exit, whichever comes first.

Reading warden's output is a role, not a thread: a thread waiting for an answer (`request`
without a timeout) reads it itself while no other thread is reading, so a call from one
thread costs one wake-up (warden's answer), not two (the answer, then a reader thread handing
it over: ~40 µs a call). The pump thread reads for the requests whose callers cannot block on
a read: async ones and those with a timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import itertools
import json
import logging
import os
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._binary import find_warden
from ._errors import WardenError, WardenProcessError, WardenStartError
from ._wire import encode

logger = logging.getLogger("langchain_warden")

PROTOCOL_VERSION = "2025-06-18"

# JSON-RPC's code for params that do not fit the method.
_INVALID_PARAMS = -32602
_METHOD_NOT_FOUND = -32601

Watcher = Callable[[str, str], None]
"""Takes a call's output as warden streams it: the stream (`stdout` or `stderr`) and a piece
of its text. Called on the thread reading warden's output: keep it quick."""

Reviewer = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""Answers an MCP `elicitation/create` request (a call that needs review): given its params,
returns the elicitation result, e.g. `{"action": "accept", "content": {"decision": "approve",
"reason": "..."}}`."""

_LIVE: weakref.WeakSet[WardenProcess] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for process in list(_LIVE):
        process.close()


class McpError(WardenError):
    """warden answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"warden answered JSON-RPC error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data


def resolve_toolbox(toolbox: str | os.PathLike[str]) -> Path:
    """The toolbox folder as an absolute path; `WardenStartError` when it is no folder."""
    path = Path(toolbox).expanduser().resolve()
    if not path.is_dir():
        raise WardenStartError(
            f"the toolbox {str(toolbox)!r} is not a folder (resolved to {path}): pass "
            "toolbox= the folder of warden policy files (*.toml)"
        )
    return path


def warden_argv(
    warden: str | os.PathLike[str] | None,
    command: str,
    toolbox: str | os.PathLike[str],
    home: str | os.PathLike[str] | None,
) -> list[str]:
    """`warden COMMAND --toolbox DIR [--home DIR]`, the binary found as `find_warden` does."""
    argv = [find_warden(warden), command, "--toolbox", str(resolve_toolbox(toolbox))]
    if home is not None:
        argv += ["--home", str(Path(home).expanduser().resolve())]
    return argv


class WardenProcess:
    """A running `warden serve` over stdio, initialised, with requests in flight by id."""

    def __init__(
        self,
        *,
        toolbox: str | os.PathLike[str],
        home: str | os.PathLike[str] | None = None,
        warden: str | os.PathLike[str] | None = None,
        reviewer: Reviewer | None = None,
        env: Mapping[str, str] | None = None,
        session_meta: Mapping[str, Any] | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        argv = warden_argv(warden, "serve", toolbox, home)
        self.argv: Sequence[str] = argv
        self._reviewer = reviewer
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        # Notified when the reading role is left, when warden ends, and when an answer comes
        # while threads are parked (waiting for the role or their answer).
        self._turn = threading.Condition(self._lock)
        self._reading = False
        self._parked = 0
        # Requests whose callers do not read (async, or with a timeout): the pump reads for them.
        self._unowned: set[int] = set()
        # The watchers of calls whose output streams, by progress token.
        self._watchers: dict[str, Watcher] = {}
        self._write_lock = threading.Lock()
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._closed = False
        self._dead: str | None = None
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as err:
            raise WardenStartError(f"could not start {argv[0]}: {err}") from err
        _LIVE.add(self)
        self._pump_thread = threading.Thread(target=self._pump, name="warden-stdout", daemon=True)
        self._stderr_thread = threading.Thread(
            target=self._read_stderr, name="warden-stderr", daemon=True
        )
        self._pump_thread.start()
        self._stderr_thread.start()
        weakref.finalize(self, _finalize, self._proc)
        try:
            capabilities: dict[str, Any] = {}
            if reviewer is not None:
                capabilities["elicitation"] = {}
            params: dict[str, Any] = {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": capabilities,
                "clientInfo": {"name": "langchain-warden", "version": "0.1.0"},
            }
            if session_meta:
                params["_meta"] = dict(session_meta)
            self.server_info = self.request("initialize", params, timeout=startup_timeout)
            self.notify("notifications/initialized", {})
        except McpError as err:
            self.close()
            if err.code == _INVALID_PARAMS and session_meta:
                raise ValueError(f"warden refused this session's choices: {err}") from None
            raise WardenStartError(f"`warden serve` did not start: {err}") from None
        except WardenError as err:
            self.close()
            raise WardenStartError(f"`warden serve` did not start: {err}") from None

    # -- requests ------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        data = encode(message) + b"\n"
        with self._write_lock:
            if self._proc.stdin is None or self._proc.stdin.closed:
                raise WardenProcessError(self._death_message())
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                raise WardenProcessError(self._death_message()) from None

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """Sends a notification (no answer)."""
        self._send({"jsonrpc": "2.0", "method": method, "params": dict(params)})

    def start_request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        reads: bool = False,
        watcher: Watcher | None = None,
    ) -> tuple[int, concurrent.futures.Future[dict[str, Any]]]:
        """Sends a request; returns its id and a future of its result. With `reads`, the caller
        promises to wait for it with `wait` (which reads); otherwise the pump reads for it.
        With `watcher`, the request asks for progress, and the output warden streams for it
        goes to `watcher` until its answer comes."""
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": dict(params)}
        with self._lock:
            if self._dead is not None or self._closed:
                raise WardenProcessError(self._death_message())
            request_id = next(self._ids)
            message["id"] = request_id
            self._pending[request_id] = future
            if watcher is not None:
                token = f"out-{request_id}"
                meta = dict(message["params"].get("_meta") or {})
                message["params"]["_meta"] = {**meta, "progressToken": token}
                self._watchers[token] = watcher
                future.add_done_callback(lambda _: self._watchers.pop(token, None))
            if not reads:
                self._unowned.add(request_id)
                if not self._reading:
                    self._turn.notify_all()
        try:
            self._send(message)
        except WardenError:
            with self._lock:
                self._pending.pop(request_id, None)
                self._unowned.discard(request_id)
            future.cancel()
            raise
        return request_id, future

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        timeout: float | None = None,
        *,
        watcher: Watcher | None = None,
    ) -> dict[str, Any]:
        """Sends a request and waits for its result (`timeout` seconds at most; no timeout,
        this thread reads the answer itself when no other thread is reading). `watcher` as
        in `start_request`."""
        if timeout is None:
            started = self.start_request(method, params, reads=True, watcher=watcher)
            return self.wait(started[1])
        request_id, future = self.start_request(method, params, watcher=watcher)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            self._cancel(request_id, "no answer in time")
            raise WardenProcessError(f"warden did not answer {method} within {timeout} s") from None

    def wait(self, future: concurrent.futures.Future[dict[str, Any]]) -> dict[str, Any]:
        """The result of a request started with `reads=True`: reads warden's output on this
        thread until it comes, or waits while another thread reads."""
        with self._lock:
            while self._reading and not future.done():
                self._parked += 1
                try:
                    self._turn.wait()
                finally:
                    self._parked -= 1
            reader = not future.done()
            self._reading = self._reading or reader
        if reader:
            try:
                while not future.done() and self._read_one():
                    pass
            finally:
                self._leave()
        return future.result()

    async def arequest(
        self, method: str, params: Mapping[str, Any], *, watcher: Watcher | None = None
    ) -> dict[str, Any]:
        """The async twin of `request`: the event loop is never blocked (`watcher` is called
        on warden's reader thread, not the loop's)."""
        request_id, future = self.start_request(method, params, watcher=watcher)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._cancel(request_id, "the caller was cancelled")
            raise

    def _cancel(self, request_id: int, reason: str) -> None:
        with self._lock:
            future = self._pending.pop(request_id, None)
            self._unowned.discard(request_id)
        if future is not None:
            future.cancel()
            try:
                self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})
            except WardenError:
                pass

    # -- the reader ----------------------------------------------------------------------

    def _read_one(self) -> bool:
        """Reads and handles one line of warden's output (by the reading role's holder only);
        False when the output has ended."""
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            line = stdout.readline()
        except (OSError, ValueError):
            line = b""
        if not line:
            self._fail_all()
            return False
        try:
            message = json.loads(line)
        except ValueError:
            return True
        if isinstance(message, dict):
            self._dispatch(message)
        return True

    def _leave(self) -> None:
        with self._lock:
            self._reading = False
            if self._parked or self._unowned:
                self._turn.notify_all()

    def _pump(self) -> None:
        """Reads while requests whose callers do not read are in flight and no one else reads."""
        while True:
            with self._lock:
                while not self._ended() and (self._reading or not self._unowned):
                    self._turn.wait()
                if self._ended():
                    return
                self._reading = True
            try:
                while self._read_one():
                    with self._lock:
                        if not self._unowned:
                            break
            finally:
                self._leave()

    def _ended(self) -> bool:
        return self._closed or self._dead is not None

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if "id" in message:
                self._answer_server_request(message)
            elif message["method"] == "notifications/progress":
                self._progress(message.get("params"))
            return
        request_id = message.get("id")
        if not isinstance(request_id, int):
            return
        with self._lock:
            future = self._pending.pop(request_id, None)
            self._unowned.discard(request_id)
            if future is None or future.done():
                return
            error = message.get("error")
            if isinstance(error, dict):
                future.set_exception(
                    McpError(
                        int(error.get("code", 0)), str(error.get("message")), error.get("data")
                    )
                )
            else:
                result = message.get("result")
                future.set_result(result if isinstance(result, dict) else {})
            if self._parked:
                self._turn.notify_all()

    def _progress(self, params: Any) -> None:
        """Hands a piece of streamed output to its call's watcher."""
        if isinstance(params, dict):
            watcher = self._watchers.get(str(params.get("progressToken")))
            if watcher is not None:
                deliver_progress(watcher, params)

    def _answer_server_request(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "ping":
            reply["result"] = {}
        elif method == "elicitation/create":
            # Run the reviewer off the reader thread: it may take a person's time.
            threading.Thread(target=self._elicit, args=(message["id"], params), daemon=True).start()
            return
        elif method == "roots/list":
            reply["result"] = {"roots": []}
        else:
            reply["error"] = {"code": -32601, "message": f"method not found: {method}"}
        try:
            self._send(reply)
        except WardenError:
            pass

    def _elicit(self, request_id: Any, params: Mapping[str, Any]) -> None:
        try:
            if self._reviewer is None:
                result: Mapping[str, Any] = {"action": "decline"}
            else:
                result = self._reviewer(params)
        except Exception as err:  # noqa: BLE001 (a failing reviewer rejects, never approves)
            result = {
                "action": "accept",
                "content": {"decision": "reject", "reason": f"the reviewer failed: {err}"},
            }
        try:
            self._send({"jsonrpc": "2.0", "id": request_id, "result": dict(result)})
        except WardenError:
            pass

    def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        try:
            for raw in stderr:
                line = raw.decode(errors="replace").rstrip()
                self._stderr.append(line)
                # warden's warnings (a policy left out of the toolbox, say) reach the
                # application's logs; the rest is there for debugging.
                warned = " WARN " in line or " ERROR " in line
                logger.log(logging.WARNING if warned else logging.DEBUG, "warden: %s", line)
        except (OSError, ValueError):
            pass

    def _fail_all(self) -> None:
        # The stderr reader may still hold the last words: give it a moment.
        self._stderr_thread.join(timeout=2)
        with self._lock:
            self._dead = self._death_message(wait=True)
            self._fail_pending(WardenProcessError(self._dead))

    def _fail_pending(self, error: WardenError) -> None:
        """Ends every request in flight with `error` (the lock held), and wakes its waiters."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._unowned.clear()
        self._turn.notify_all()

    def _death_message(self, wait: bool = False) -> str:
        if self._dead is not None:
            return self._dead
        if self._closed:
            return "this warden process was closed"
        code = self._proc.poll()
        if code is None and wait:
            try:
                code = self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
        status = "is no longer answering" if code is None else how_it_ended(code)
        tail = "\n".join(self._stderr)
        said = f"; its last words on stderr:\n{tail}" if tail else " (nothing on stderr)"
        return f"`{' '.join(self.argv)}` {status}{said}"

    # -- life ----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the process is running and not closed."""
        return not self._closed and self._dead is None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process ended (negative: the signal that killed it)."""
        return self._proc.poll()

    @property
    def pid(self) -> int:
        """The process id of `warden serve`."""
        return self._proc.pid

    def ended(self) -> str:
        """Why the process is not running: its exit status or signal and its last words on
        stderr (waiting a moment for them), or that it was closed."""
        return self._death_message(wait=True)

    def stderr_tail(self) -> str:
        """The last lines warden wrote on stderr."""
        return "\n".join(self._stderr)

    def close(self, timeout: float = 10.0) -> None:
        """Ends the MCP connection, so warden ends the session (its shells and containers),
        and waits for the process; kills it when it does not end within `timeout` s."""
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        _stop(self._proc, timeout)
        with self._lock:
            self._fail_pending(WardenProcessError("this warden process was closed"))


def deliver_progress(watcher: Watcher, params: Mapping[str, Any]) -> None:
    """Hands the piece of output a progress notification's `params` carry to `watcher`."""
    text = params.get("message")
    if not isinstance(text, str):
        return
    stream = (params.get("_meta") or {}).get("warden/stream", "stdout")
    try:
        watcher(str(stream), text)
    except Exception:  # a failing watcher must not stop the reading of answers
        logger.exception("an output watcher failed")


def how_it_ended(code: int) -> str:
    """A process's exit status in words: `exited with status N`, `was killed by signal N`."""
    return f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _finalize(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        _stop(proc, 5.0)
