"""Reading warden's MCP answers: a `tools/call` result as text, error kind and details, and a
shell tool's rendered output (stdout, `[stderr]`, `[exit code N]`) split back into parts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TRUNCATION_MARKER = "\n[warden: output truncated, "
_TAIL = re.compile(r"(?:^|\n)\[exit code (-?\d+)\]((?:\n\[[^\n]*\])*)\Z")


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
        is_error = bool(result.get("isError"))
        return cls(
            text="\n".join(parts),
            is_error=is_error,
            kind=str(error.get("kind")) if is_error and error.get("kind") else None,
            message=str(error.get("message")) if is_error and "message" in error else None,
            structured=result.get("structuredContent"),
            usage=dict(usage) if isinstance(usage, dict) else {},
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


def parse_shell(result: CallResult) -> ShellOutput:
    """Splits a shell tool's answer into stdout, stderr, exit code and notes.

    A success is `render(...)`'s text; an `exit_status` or `out_of_memory` error is a first
    line saying so, then the same text. A timeout answers exit code 124 with warden's
    message (the output so far in it); any other error exit code 1 and the message.
    """
    if result.is_error and result.kind not in ("exit_status", "out_of_memory"):
        code = 124 if result.kind == "timeout" else 1
        message = result.message if result.message is not None else result.text
        return ShellOutput("", f"Error ({result.kind}): {message}", code, [], False)
    body = result.message if result.is_error and result.message is not None else result.text
    if result.is_error:
        body = body.split("\n", 1)[1] if "\n" in body else ""
    match = _TAIL.search(body)
    if match is None:
        return ShellOutput(body, "", 1 if result.is_error else 0, [], TRUNCATION_MARKER in body)
    code = int(match.group(1))
    notes = [line[1:-1] for line in match.group(2).split("\n") if line]
    body = body[: match.start()]
    if body.startswith("[stderr]\n"):
        stdout, stderr = "", body[len("[stderr]\n") :]
    elif "\n[stderr]\n" in body:
        stdout, _, stderr = body.rpartition("\n[stderr]\n")
        stdout += "\n"
    else:
        stdout, stderr = body, ""
    truncated = TRUNCATION_MARKER in stdout or TRUNCATION_MARKER in stderr
    return ShellOutput(stdout, stderr, code, notes, truncated)
