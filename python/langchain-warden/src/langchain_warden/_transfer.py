"""Moving bytes in and out of a sandbox through its own shell, binary-safe: base64 in the
commands going in, base64 in the output coming out, in chunks that fit the policy's `output`
limit. Written as generators that yield shell commands and receive their `ShellOutput`, so the
sync and async sandboxes drive the same steps.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Generator

from ._results import ShellOutput

Steps = Generator[str, ShellOutput, "str | None"]
"""Yields commands, receives each one's output, returns an error code or None."""
Fetch = Generator[str, ShellOutput, "tuple[bytes | None, str | None]"]

_OK = "WARDEN-OK"
_ERR = "WARDEN-ERR:"


def _status(out: ShellOutput) -> tuple[bool, str]:
    """(ok, rest of stdout after the status line) or (False, error code)."""
    first, _, rest = out.stdout.partition("\n")
    if first == _OK and out.exit_code == 0:
        return True, rest
    if first.startswith(_ERR):
        return False, first[len(_ERR) :].strip()
    # No status line: the command did not run to its end (warden failed, a timeout).
    return False, out.stderr.strip() or "permission_denied"


def upload(path: str, content: bytes, chunk: int) -> Steps:
    """Writes `content` to `path` (parents made as needed); returns None or an error code."""
    if not path.startswith("/"):
        return "invalid_path"
    q = shlex.quote(path)
    first, rest = content[:chunk], content[chunk:]
    out = yield (
        f'p={q}; d=$(dirname -- "$p")\n'
        f'if [ -d "$p" ]; then echo {_ERR}is_directory\n'
        f'elif [ -e "$d" ] && [ ! -d "$d" ]; then echo {_ERR}invalid_path\n'
        f'elif ! mkdir -p -- "$d" 2>/dev/null; then echo {_ERR}permission_denied\n'
        f"elif printf %s '{base64.b64encode(first).decode()}' | base64 -d > \"$p\" 2>/dev/null; "
        f"then echo {_OK}\n"
        f"else echo {_ERR}permission_denied; fi"
    )
    ok, error = _status(out)
    if not ok:
        return error
    while rest:
        piece, rest = rest[:chunk], rest[chunk:]
        out = yield (
            f"printf %s '{base64.b64encode(piece).decode()}' | base64 -d >> {q} && echo {_OK}"
        )
        ok, error = _status(out)
        if not ok:
            return error
    return None


class ChunkTooLarge(Exception):
    """The policy's output limit cut a chunk: fetch again with smaller ones."""


def download(path: str, chunk: int) -> Fetch:
    """Reads `path`'s bytes; returns (content, None) or (None, error code). Raises
    `ChunkTooLarge` when the output limit cut a chunk."""
    if not path.startswith("/"):
        return None, "invalid_path"
    q = shlex.quote(path)
    read = f'dd if="$p" bs={chunk} skip=%d count=1 2>/dev/null | base64'
    out = yield (
        f"p={q}\n"
        f'if [ ! -e "$p" ]; then echo {_ERR}file_not_found\n'
        f'elif [ -d "$p" ]; then echo {_ERR}is_directory\n'
        f'elif [ ! -r "$p" ]; then echo {_ERR}permission_denied\n'
        f'else echo {_OK}; wc -c < "$p"; {read % 0}; fi'
    )
    ok, rest = _status(out)
    if not ok:
        return None, rest
    if out.truncated:
        raise ChunkTooLarge
    size_line, _, data = rest.partition("\n")
    try:
        size = int(size_line.strip())
    except ValueError:
        return None, "permission_denied"
    parts = [base64.b64decode("".join(data.split()))]
    got = len(parts[0])
    index = 1
    while got < size:
        out = yield f"p={q}; {read % index}"
        if out.truncated:
            raise ChunkTooLarge
        piece = base64.b64decode("".join(out.stdout.split()))
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
        index += 1
    content = b"".join(parts)
    if len(content) != size:
        return None, "file_not_found"  # it changed while being read
    return content, None
