"""Reading warden's MCP answers: a `tools/call` result as text, error kind and details, and a
shell tool's result as the data warden sends beside the text (`_meta["warden/shell"]`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CallResult:
    """One `tools/call` answer."""

    text: str
    """What the model reads: the content's text (for an error, `Error (<kind>): <message>`)."""
    is_error: bool = False
    kind: str | None = None
    """warden's error kind (`invalid_arguments`, `timeout`, `exit_status`, …) on failure."""
    message: str | None = None
    """warden's error message on failure."""
    structured: Any = None
    """`structuredContent`, when the tool has an output schema."""
    usage: dict[str, Any] = field(default_factory=dict)
    """`_meta["warden/usage"]`: wall time, CPU, peak memory, … as warden measured them."""
    shell: dict[str, Any] | None = None
    """`_meta["warden/shell"]`: a command tool's exit code, streams, truncation and notes."""

    @classmethod
    def from_mcp(cls, result: dict[str, Any]) -> CallResult:
        """Reads a `tools/call` result."""
        parts = [
            str(item.get("text", ""))
            for item in result.get("content") or []
            if isinstance(item, dict) and item.get("type") == "text"
        ]
        meta = result.get("_meta") or {}
        error = meta.get("warden/error") or {}
        usage = meta.get("warden/usage") or {}
        shell = meta.get("warden/shell")
        is_error = bool(result.get("isError"))
        return cls(
            text="\n".join(parts),
            is_error=is_error,
            kind=str(error.get("kind")) if is_error and error.get("kind") else None,
            message=str(error.get("message")) if is_error and "message" in error else None,
            structured=result.get("structuredContent"),
            usage=dict(usage) if isinstance(usage, dict) else {},
            shell=shell if isinstance(shell, dict) else None,
        )


@dataclass
class ShellOutput:
    """A shell command's answer, taken apart."""

    stdout: str
    stderr: str
    exit_code: int
    notes: list[str]
    """warden's notes after the exit code (e.g. that the shell ended and the next command
    starts in a fresh one)."""
    truncated: bool
    dropped: dict[str, int] = field(default_factory=dict)
    """Bytes the output limit kept out, by stream (`stdout`, `stderr`); only those above 0."""
    stopped: bool = False
    """warden stopped the command before it exited (a timeout, a limit that killed it), or
    never ran it: `exit_code` is warden's word, not the command's."""


def parse_shell(result: CallResult) -> ShellOutput:
    """A shell tool's answer as stdout, stderr, exit code and notes, from the data warden sends
    beside the text (the text itself is never taken apart).

    A command stopped before it exited (a timeout, a limit that killed it) has exit code 124
    for a timeout and 1 otherwise, with warden's sentence as a note; an error without the data
    (the call never ran: `unavailable`, `invalid_arguments`, …) is exit code 1 with warden's
    message as stderr.
    """
    data = result.shell
    if data is None:
        message = result.message if result.message is not None else result.text
        return ShellOutput("", f"Error ({result.kind}): {message}", 1, [], False, stopped=True)
    notes = [str(note) for note in data.get("notes") or []]
    code = data.get("exit_code")
    stopped = result.is_error and result.kind != "exit_status"
    if stopped:
        # What ended it (its memory limit, CPU time, the timeout), first.
        head = (result.message or "").split("\n", 1)[0]
        notes = [head, *notes] if head and head not in notes else notes
    if not isinstance(code, int):
        code = 124 if result.kind == "timeout" else 1
    dropped = data.get("dropped_bytes") or {}
    return ShellOutput(
        str(data.get("stdout", "")),
        str(data.get("stderr", "")),
        code,
        notes,
        bool(data.get("truncated")),
        {
            stream: dropped[stream]
            for stream in ("stdout", "stderr")
            if isinstance(dropped.get(stream), int) and dropped[stream] > 0
        },
        stopped,
    )
