"""An `execute` whose output may be any size under the policy's `output` limit.

The command runs in the session's shell itself (its `cd`, variables and functions carry on),
its stdout and stderr going to two files of its own in the sandbox's `/tmp`. In the same call
the shell prints a status line (a nonce and the command's exit status), then the two files:
whatever fits the `output` limit comes back at once, and a stream the limit cut is read from its
file in chunks, as downloads are. A command that ends the shell (`exit`, `set -e`) has the files
printed by the shell's EXIT trap on its way out, so its output still reaches warden (where the
shell's end loses the files, a cut stream says how to get the rest). Where `/tmp` cannot be
written, or is full, the command runs as it is, its output what warden captured.

Only builtins and `/bin/cat` run around the command, most of them where warden's own framing
runs the same ones; a trace (`set -x`) shows the command's steps, not the wrapper's. The files
are removed a few commands later, in one `rm`: a background job the command started may still
write to them, and then writes to a removed file rather than into a later command's output.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

from ._results import ShellOutput
from ._transfer import ChunkTooLarge, Failure, read_head

Execute = Generator[str, ShellOutput, "Captured"]
"""Yields commands (the first one the command itself), receives each one's output."""


@dataclass
class Captured:
    """What `execute` answers, and which of its files may go."""

    output: ShellOutput
    spent: list[str] = field(default_factory=list)
    """The command's files in the sandbox that no one needs any more."""


def files(nonce: str) -> tuple[str, str]:
    """The stdout and stderr files of the command with `nonce`."""
    return f"/tmp/.warden-exec-{nonce}.out", f"/tmp/.warden-exec-{nonce}.err"


def wrap(command: str, nonce: str, spent: Sequence[str]) -> str:
    """The shell text that runs `command` with its output captured (see the module), first
    removing `spent` files."""
    out, err = files(nonce)
    remove = f"'/bin/rm' -f -- {' '.join(map(shlex.quote, spent))}; " if spent else ""
    # The eval's text: the shell options the wrapper switched off, back on for the command
    # alone, and the wrapper's variables gone before the command runs.
    run = (
        '"unset __wl_c; case \\$__wl_f in *v*) set -v;; esac; '
        "case \\$__wl_f in *x*) unset __wl_f; set -x;; *) unset __wl_f;; esac\n"
        '$__wl_c"'
    )
    # The shell's way out: its redirections are undone by then (dash, bash, busybox ash), so
    # the files go to warden's stdout and stderr, as the trailer sends them.
    show = (
        f"[ ! -s {out} ] || '/bin/cat' {out}; [ ! -s {err} ] || '/bin/cat' {err} >&9; "
    )
    on_exit = f"{{ printf '%s x\\n' {nonce}; {show}}} 9>&2 2>/dev/null"
    return (
        f"{{ __wl_f=$-; set +xv; {remove}}} 2>/dev/null\n"
        f"__wl_c={shlex.quote(command)}\n"
        f"if {{ printf x >|{out} && :>|{out} && :>|{err}; }} 2>/dev/null; then\n"
        f"trap {shlex.quote(on_exit)} EXIT\n"
        f"{{ command eval {run}\n}} >|{out} 2>|{err}\n"
        f"{{ __wl_rc=$? __wl_f=$-; set +xv; trap - EXIT; printf '%s %s\\n' {nonce} \"$__wl_rc\"; "
        f"{show}"
        "case $__wl_f in *v*) set -v;; esac; case $__wl_f in *x*) set -x;; esac; "
        "unset __wl_rc __wl_f; } 9>&2 2>/dev/null\n"
        f"else printf '%s -\\n' {nonce}; command eval {run}\n"
        "fi"
    )


def execute(
    command: str,
    nonce: str,
    spent: Sequence[str],
    *,
    chunk: Callable[[], int],
    shrink: Callable[[], None],
    limit: int,
) -> Execute:
    """Runs `command` (removing `spent` files first) and answers its whole output, each stream
    up to `limit` bytes; `chunk` and `shrink` are the sandbox's chunk size for reading a
    stream the output limit cut, and its halving."""
    out = yield wrap(command, nonce, spent)
    first, newline, rest = out.stdout.partition("\n")
    word = first[len(nonce) + 1 :] if newline and first.startswith(f"{nonce} ") else None
    paths = dict(zip(("stdout", "stderr"), files(nonce)))
    if word == "-":  # /tmp cannot be written: the command ran as it is
        out.stdout = rest
        return Captured(cut(out))
    if word is None:  # stopped before the shell printed anything (a timeout, a killed shell)
        return Captured(cut(out), list(paths.values()))
    out.stdout = rest
    if word != "x" and not out.stopped and word.isdigit():
        out.exit_code = int(word)
    streams = {"stdout": out.stdout, "stderr": out.stderr}
    spent_now: list[str] = []
    out.truncated = False
    for stream, path in paths.items():
        if stream not in out.dropped:
            spent_now.append(path)
            continue
        while True:
            try:
                got = yield from read_head(path, chunk(), limit)
                break
            except ChunkTooLarge:
                shrink()
        if isinstance(got, Failure):  # the shell's end took the file with it
            spent_now.append(path)
            continue
        data, size = got
        streams[stream] = data.decode("utf-8", errors="replace")
        del out.dropped[stream]
        if size > limit:  # kept for the model to read
            out.truncated = True
            out.notes.append(
                f"warden: output truncated: the first {limit} of {size} bytes of {stream} shown; "
                f"they are all in {path}, to read in parts (`tail -c +{limit + 1} {path} | "
                "head -c 60000`, …)"
            )
        else:
            spent_now.append(path)
    out.stdout, out.stderr = streams["stdout"], streams["stderr"]
    return Captured(cut(out), spent_now)


def cut(out: ShellOutput) -> ShellOutput:
    """`out` with a note for each stream the output limit cut, saying how to get the rest."""
    for stream, dropped in out.dropped.items():
        out.truncated = True
        out.notes.append(
            f"warden: output truncated, {dropped} more bytes of {stream} not shown: run the "
            "command again with its output redirected to a file (`COMMAND >/tmp/out.txt "
            "2>&1`), then read that file in parts"
        )
    return out
