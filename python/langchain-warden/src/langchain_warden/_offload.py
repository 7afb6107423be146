"""deepagents 0.7's offload of a large `execute` output, on warden's session shell.

deepagents' own `BaseSandbox.execute_with_offload` wraps the command in a pipeline that runs
it in a subshell: its `cd` and variables would end with it, where a warden session keeps
them. `WardenSandbox` runs the command as any other (in the session's shell, its output
captured whole, up to `max_output_size`) and, when the output is over deepagents' inline
budget, writes it to a file in the sandbox and answers a preview: its first and last lines
around a marker, as deepagents' wrapper does.

The file goes where deepagents asks (`<artifacts root>/large_tool_results/<call>`) when the
sandbox can write there; under warden's shipped policies the root is read-only, so it goes
under the sandbox's own `/tmp` at the same path, and the answer names that path itself
(deepagents would name the one it asked for).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from deepagents.backends.protocol import ExecuteOffloadResult, ExecuteResponse

# deepagents' wrapper's budgets: five lines of at most 2,000 bytes at each end.
_LINES = 5
_BYTES = 2000
# deepagents' marker (`deepagents.backends.utils.TRUNCATION_MARKER_TEMPLATE`).
_MARKER = "... [{omitted_lines} lines truncated] ..."
_CLIPPED = "... [output clipped here; {size} bytes total, full output at the path above] ..."


def fallback(path: str) -> str:
    """Where `path` goes when the sandbox cannot write it: the same path under `/tmp`."""
    return posixpath.join("/tmp", path.lstrip("/"))


@dataclass
class Preview:
    """What the model reads of an output kept in a file."""

    text: str
    marker: bool
    """Whether middle lines were dropped behind `_MARKER`."""


def preview(output: str) -> Preview:
    """The first and last lines of `output` around a marker; an output of few, long lines
    as its first bytes and a notice."""
    lines = output.splitlines(keepends=True)
    omitted = len(lines) - 2 * _LINES
    if omitted > 0:
        head = "".join(lines[:_LINES]).encode()[:_BYTES].decode(errors="ignore")
        tail = "".join(lines[-_LINES:]).encode()[-_BYTES:].decode(errors="ignore")
        marker = _MARKER.format(omitted_lines=omitted)
        return Preview(f"{head.rstrip(chr(10))}\n{marker}\n{tail}", True)
    data = output.encode()
    head = data[: 2 * _BYTES].decode(errors="ignore")
    return Preview(f"{head}\n{_CLIPPED.format(size=len(data))}", False)


def inline(response: ExecuteResponse) -> ExecuteOffloadResult:
    """An output small enough to answer whole."""
    return ExecuteOffloadResult(offloaded=False, response=response)


def kept(response: ExecuteResponse, asked: str, path: str) -> ExecuteOffloadResult:
    """The answer for an output written to `path`, deepagents having asked for `asked`."""
    shown = preview(response.output)
    if path == asked:
        return ExecuteOffloadResult(
            offloaded=True,
            response=ExecuteResponse(
                output=shown.text, exit_code=response.exit_code, truncated=response.truncated
            ),
            preview_has_truncation_marker=shown.marker,
        )
    # deepagents would tell the model the path it asked for: say where the output is.
    said = (
        f"[The output was too large to show here: all of it is in the sandbox at {path}. "
        "Read it with read_file, part at a time (offset and limit). Its first and last lines:]\n"
    )
    return inline(
        ExecuteResponse(
            output=said + shown.text, exit_code=response.exit_code, truncated=response.truncated
        )
    )
