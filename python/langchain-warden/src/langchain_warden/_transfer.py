"""Moving bytes in and out of a sandbox through its own shell, binary-safe: base64 in a
here-document going in, base64 in the output coming out, in chunks that fit the policy's
`output` limit. Written as generators that yield shell commands and receive their
`ShellOutput`, so the sync and async sandboxes drive the same steps.

The session's shell keeps whatever earlier commands left in it: functions and aliases named
`wc`, `dd`, `base64`, `echo`, `test`, a `PATH` through `/tmp`, exported variables. None of it
takes part: each step runs in a fresh `/bin/sh` with an empty environment, started by absolute
paths only (`'/bin/sh'` quoted, since dash expands even an alias named `/bin/sh`), which
first drops the functions a bash `/bin/sh` imports from the environment for the builtins it
uses (`unset` and `exec` are special builtins, which no function replaces in a shell started
as `sh`).

Nothing the sandbox answers is trusted either, since a session can still answer in a step's
place (a function named `command`, which warden's own framing calls). A download takes the
file's size first, refuses more than its limit, then reads exactly the rounds that size takes;
each chunk must decode to exactly the bytes asked for, and the size must be the same at the end.
Anything else ends the transfer with a `Failure` saying what did not add up, so memory and
rounds stay bounded by the limit whatever the sandbox prints.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Generator
from dataclasses import dataclass

from ._results import ShellOutput


@dataclass(frozen=True)
class Failure:
    """Why a transfer failed."""

    code: str
    """For the caller: a deepagents `FileOperationError`, or warden's message when warden or
    the command failed before answering."""
    detail: str | None = None
    """What did not add up in the sandbox's answers, for the log."""


Steps = Generator[str, ShellOutput, "Failure | None"]
"""Yields commands, receives each one's output, returns a failure or None."""
Fetch = Generator[str, ShellOutput, "bytes | Failure"]
Head = Generator[str, ShellOutput, "tuple[bytes, int] | Failure"]
"""Yields commands, receives each one's output, returns the bytes read and the file's size,
or a failure."""

_OK = "WARDEN-OK"
_ERR = "WARDEN-ERR:"
_CODES = frozenset({"file_not_found", "permission_denied", "is_directory", "invalid_path"})
_EOF = "WARDEN_EOF"  # ends a here-document; base64 never holds `_`
_SIZE = re.compile(r"[0-9]{1,20}")

# Runs `/bin/sh -c SCRIPT NAME ARGS...` (its own arguments) under `env -i`: /usr/bin/env, or
# /bin/env where only that exists (warden's busybox image).
_CLEAN = (
    "unset -f '[' echo; "
    'for e in /usr/bin/env /bin/env; do if [ -x "$e" ]; then '
    'exec "$e" -i PATH=/usr/bin:/bin LC_ALL=C /bin/sh -c "$@"; fi; done; '
    "echo 'no env at /usr/bin/env or /bin/env' >&2; exit 127"
)

# Arguments: path, chunk, index, `size` to print the file's size (else `-`). Answers the status
# line, the size line, then the chunk's base64. Only regular files: a device or FIFO has no
# size and may never end.
_READ = (
    'p=$1\nif [ ! -e "$p" ]; then echo WARDEN-ERR:file_not_found\n'
    'elif [ -d "$p" ]; then echo WARDEN-ERR:is_directory\n'
    'elif [ ! -f "$p" ] || [ ! -r "$p" ]; then echo WARDEN-ERR:permission_denied\n'
    'else echo WARDEN-OK; if [ "$4" = size ]; then wc -c <"$p"; else echo -; fi\n'
    'dd if="$p" bs="$2" skip="$3" count=1 2>/dev/null | base64; fi'
)

# Arguments: path, `size` to print the file's size after writing, `new` to refuse a path that
# exists (else `-`); the chunk's base64 on stdin.
_WRITTEN = (
    'then echo WARDEN-OK; if [ "$2" = size ]; then wc -c <"$p"; fi\n'
    "else echo WARDEN-ERR:permission_denied; fi"
)
_CREATE = (
    'p=$1 d=$(dirname -- "$1")\n'
    'if [ -d "$p" ]; then echo WARDEN-ERR:is_directory\n'
    'elif [ "$3" = new ] && { [ -e "$p" ] || [ -L "$p" ]; }; then echo WARDEN-ERR:exists\n'
    'elif [ -e "$d" ] && [ ! -d "$d" ]; then echo WARDEN-ERR:invalid_path\n'
    'elif ! mkdir -p -- "$d" 2>/dev/null; then echo WARDEN-ERR:permission_denied\n'
    f'elif base64 -d >"$p" 2>/dev/null; {_WRITTEN}'
)
_APPEND = f'p=$1\nif base64 -d >>"$p" 2>/dev/null; {_WRITTEN}'


def _clean(script: str, *args: str, data: bytes | None = None) -> str:
    """The command that runs `script` with `args` in a fresh shell, `data` on its stdin."""
    words = " ".join(shlex.quote(word) for word in (script, "warden-transfer", *args))
    command = f"'/bin/sh' -c {shlex.quote(_CLEAN)} sh {words}"
    if data is not None:
        command += f" <<'{_EOF}'\n{base64.encodebytes(data).decode()}{_EOF}\n"
    return command


def _status(out: ShellOutput, codes: frozenset[str] = _CODES) -> tuple[str, Failure | None]:
    """(stdout after the status line, None), or ("", why the step failed); an error must be
    one of `codes`."""
    first, _, rest = out.stdout.partition("\n")
    if first == _OK and out.exit_code == 0:
        return rest, None
    if first.startswith(_ERR):
        code = first[len(_ERR) :].strip()
        if code in codes:
            return "", Failure(code)
        return "", _lie(f"an error of no known kind, {code!r:.80}")
    # No status line: the command did not run to its end (warden failed, a timeout), or
    # something in the session answered in its place.
    if out.stderr.strip():
        return "", Failure(out.stderr.strip())
    return "", _lie(f"no status line but {out.stdout!r:.80}")


def _size(line: str) -> int | None:
    """A size as `wc -c` prints it, or None when the line is not a non-negative integer."""
    line = line.strip()
    return int(line) if _SIZE.fullmatch(line) else None


def upload(path: str, content: bytes, chunk: int, *, new: bool = False) -> Steps:
    """Writes `content` to `path` (parents made as needed) in `len(content) / chunk` rounds,
    and checks that the file then holds that many bytes; returns None or the failure. With
    `new`, a path that exists (a file, or a link even to nothing) fails as `exists`."""
    if not path.startswith("/"):
        return Failure("invalid_path")
    rounds = max(1, -(-len(content) // chunk))
    for index in range(rounds):
        last = index == rounds - 1
        piece = content[index * chunk : (index + 1) * chunk]
        size = "size" if last else "-"
        if index:
            command = _clean(_APPEND, path, size, data=piece)
        else:
            command = _clean(_CREATE, path, size, "new" if new else "-", data=piece)
        out = yield command
        rest, failure = _status(out, _CODES | {"exists"} if new and not index else _CODES)
        if failure:
            return failure
        line = rest.partition("\n")[0]
        if last and _size(line) != len(content):
            return _lie(f"after {len(content)} bytes were written its size is {line!r:.40}")
    return None


class ChunkTooLarge(Exception):
    """The policy's output limit cut a chunk: fetch again with smaller ones."""


def download(path: str, chunk: int, limit: int) -> Fetch:
    """Reads `path`'s bytes, at most `limit` of them; returns them or the failure. Raises
    `ChunkTooLarge` when the output limit cut a chunk."""
    got = yield from _read(path, chunk, limit, whole=True)
    return got if isinstance(got, Failure) else got[0]


def read_head(path: str, chunk: int, limit: int) -> Head:
    """Reads the first `limit` bytes of `path`, a file that may still grow (a command's
    output, which its background jobs may append to); returns them with the size the file
    had when the read began, or the failure. Raises `ChunkTooLarge` as `download` does."""
    return (yield from _read(path, chunk, limit, whole=False))


def _read(path: str, chunk: int, limit: int, *, whole: bool) -> Head:
    """`download` (`whole`: a file over `limit` fails, and one that changes meanwhile fails)
    or `read_head` (the first `limit` bytes of as many as the file had at first)."""
    if not path.startswith("/"):
        return Failure("invalid_path")
    parts: list[bytes] = []
    size, length, rounds, index = 0, 0, 1, 0
    while index < rounds:
        asks_size = index == 0 or (whole and index == rounds - 1)
        out = yield _clean(_READ, path, str(chunk), str(index), "size" if asks_size else "-")
        rest, failure = _status(out)
        if failure:
            return failure
        if out.truncated:
            raise ChunkTooLarge
        line, _, text = rest.partition("\n")
        if index == 0:
            reported = _size(line)
            if reported is None:
                return _lie(f"its size is {line!r:.40}, not a number of bytes")
            if whole and reported > limit:
                return Failure(
                    "permission_denied",
                    f"it has {reported} bytes, more than max_download_size ({limit}): "
                    "raise that to download it",
                )
            size, length = reported, min(reported, limit)
            rounds = max(1, -(-length // chunk))
        elif asks_size and _size(line) != size:
            return _lie(f"it changed while being read: {size} bytes, then {line!r:.40}")
        piece = _piece(text, chunk, min(chunk, length - index * chunk), grows=not whole)
        if isinstance(piece, str):
            return _lie(f"at byte {index * chunk} of {size}: {piece}")
        parts.append(piece)
        index += 1
    return b"".join(parts), size


def _piece(text: str, chunk: int, want: int, *, grows: bool = False) -> bytes | str:
    """The `want` bytes that one chunk's base64 holds, or what is wrong with it. The text is
    measured before it is decoded. With `grows`, a file that has grown since its size was
    read answers more than `want`: the rest is not wanted."""
    code = "".join(text.split())
    if len(code) > -(-chunk // 3) * 4:
        return f"{len(code)} characters of base64, a chunk larger than the {chunk} bytes asked"
    try:
        piece = base64.b64decode(code, validate=True)
    except binascii.Error:
        return "a chunk that is not base64"
    if len(piece) > chunk:
        return f"{len(piece)} bytes, a chunk larger than the {chunk} bytes asked"
    if len(piece) > want:
        if grows:
            return piece[:want]
        return f"{len(piece)} bytes where its size leaves {want}: more bytes than the size said"
    if len(piece) < want:
        return f"{len(piece)} bytes where its size leaves {want}: fewer bytes than the size said"
    return piece


def _lie(detail: str) -> Failure:
    """A failure for answers that do not add up: the file exists, so not `file_not_found`."""
    return Failure("permission_denied", f"the sandbox's answers do not add up: {detail}")
