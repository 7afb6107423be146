"""WardenSandbox's uploads and downloads against a session that lies (issue 49's review):
functions, aliases, a `PATH` and shell options that earlier commands left in the session, which
must not take part, so the bytes come back right; a session that answers in the transfer's
place (a function named `command`, which warden's own framing calls) and a file that changes
while it is read, which cannot be avoided, so each fails with a code, a logged detail, and a
bounded number of rounds. No test waits on a clock: every lie is finite output."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import subprocess
import tarfile
import time
from collections.abc import Callable, Generator, Iterator
from io import BytesIO
from typing import Any, TypeVar

import pytest

from langchain_harness import ROOT, require_docker, scratch, shell_toolbox, warden_bin
from langchain_warden import WardenError, WardenSandbox
from langchain_warden._process import McpError
from langchain_warden._results import ShellOutput
from langchain_warden._transfer import ChunkTooLarge, Failure, download, upload
from langchain_warden._wire import Base64, encode

pytestmark = pytest.mark.anyio

T = TypeVar("T")
MiB = 1024 * 1024
LOGGER = "langchain_warden.sandbox"

# What the review defined (printing with `printf`, since `echo` lies too), and more: a function or alias for every program and builtin the
# transfer once ran, fake programs first on PATH, exported variables and shell options.
HOSTILE = """
wc() { command printf '999999999999\n'; }
dd() { command printf 'AAAA\n'; }
base64() { command printf 'QUFB\n'; }
echo() { command printf 'lie\\n'; }
test() { return 0; }
mkdir() { return 1; }
dirname() { command printf '/etc\\n'; }
cat() { :; }
env() { :; }
alias head=false tail=false
mkdir -p /tmp/evil && for n in wc dd base64 mkdir dirname env sh; do
  command printf '#!/bin/sh\\necho 999999999999\\n' >/tmp/evil/$n && chmod +x /tmp/evil/$n
done
PATH=/tmp/evil:$PATH LC_ALL=xx_XX ENV=/tmp/evil/sh
export PATH LC_ALL ENV
set -C -u -f
IFS=/
"""

# The policies' `transfer` line, with the comment lines that follow it.
TRANSFER = re.compile(r"^transfer = .*\n(?:[ \t]+#.*\n)*", re.MULTILINE)

# `printf` wrapped so that warden's framing still works (`command printf` is the builtin) but
# the `printf %s ... | base64 -d` that uploads once ran writes other bytes.
PRINTF = 'printf() { if [ "$1" = %s ]; then command printf %s QUFB; else command printf "$@"; fi; }'

# `command` passing warden's framing (`command eval ...`) through, and lying to anything else.
COMMAND = 'command() { if [ "$1" = eval ]; then shift; eval "$@"; else echo 999999999999; fi; }'


@contextlib.contextmanager
def _box(
    tool: str = "host-shell", transfer: str | None = None, gated: bool = False, **options: Any
) -> Iterator[WardenSandbox]:
    """A sandbox on `tool` of the shipped shells, or `shell-busybox`: the docker shell on
    warden's busybox image, whose `env` is /bin/env only and whose shell is busybox ash.
    Their policies' `transfer` is `transfer`, or none, so that files move through the shell
    in chunks. `gated`: the policies grant a host, so that the sandbox has an egress gate,
    which serves one command at a time (no shell starts beside the session's)."""
    with scratch() as base:
        docker = (ROOT / "policies" / "shell-docker.toml").read_text()
        busybox = docker.replace('name = "shell"', 'name = "shell-busybox"').replace(
            '"warden-sandbox-debian:latest"', '"warden-sandbox:latest"'
        )
        assert busybox.count("shell-busybox") == 1 and "warden-sandbox:latest" in busybox
        extra = {"shell-busybox.toml": busybox}
        if tool == "shell-nodd":
            _image_without_dd()
            extra["shell-nodd.toml"] = docker.replace('name = "shell"', 'name = "shell-nodd"').replace(
                '"warden-sandbox-debian:latest"', f'"{NODD}"'
            )
        box = shell_toolbox(base, extra=extra)
        for policy in box.glob("*.toml"):
            written = f'transfer = "{transfer}"\n' if transfer else ""
            text, n = TRANSFER.subn(written, policy.read_text())
            assert n == 1, policy
            if gated:
                text = text.replace("\n[grants]\n", '\n[grants]\nnet = ["127.0.0.1:9"]\n', 1)
            policy.write_text(text)
        with WardenSandbox(tool, box, base / "home", warden_bin(), **options) as sandbox:
            yield sandbox


NODD = "warden-test-nodd:latest"


def _image_without_dd() -> None:
    """warden's Debian image without `dd` (as `warden sandbox-image --debian` configures
    it): a sandbox where no shell can carry transfers beside the session's. (busybox's shell
    runs its own `dd` whatever the files hold.)"""
    if subprocess.run(["docker", "image", "inspect", NODD], capture_output=True).returncode == 0:
        return
    run = lambda *args, **kw: subprocess.run(  # noqa: E731
        ["docker", *args], capture_output=True, check=True, **kw
    )
    made = run("create", "warden-sandbox-debian:latest", "sh").stdout.decode().strip()
    try:
        exported = run("export", made).stdout
    finally:
        subprocess.run(["docker", "rm", made], capture_output=True)
    out = BytesIO()
    with tarfile.open(fileobj=BytesIO(exported)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            if member.name.lstrip("./") in ("bin/dd", "usr/bin/dd"):
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    changes = [
        "USER 65534:65534",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
        "WORKDIR /",
    ]
    run("import", *(f"--change={c}" for c in changes), "-", NODD, input=out.getvalue())


@pytest.fixture(params=["host-shell", "shell", "shell-busybox"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[WardenSandbox]:
    """The shipped host shell, the shipped Debian docker shell, and the busybox one."""
    if request.param != "host-shell":
        require_docker()
    with _box(request.param) as sandbox:
        yield sandbox


def _counting(sandbox: WardenSandbox) -> list[str]:
    """The commands `sandbox` sends from now on (sync or async)."""
    sent: list[str] = []
    session = sandbox._session
    run, arun = session._run, session._arun

    def counted(command: str, timeout: float | None = None) -> ShellOutput:
        sent.append(command)
        return run(command, timeout)

    async def acounted(command: str, timeout: float | None = None) -> ShellOutput:
        sent.append(command)
        return await arun(command, timeout)

    session._run, session._arun = counted, acounted  # type: ignore[method-assign]
    return sent


# -- the session's state does not take part: right bytes ----------------------------------


async def test_functions_aliases_path_and_options_in_the_session_do_not_take_part(sandbox):
    sandbox.execute(HOSTILE)
    # The attack is in place: what the old transfer ran now lies.
    assert sandbox.execute("wc -c </dev/null; dd").output.split() == ["999999999999", "AAAA"]
    data = os.urandom(100 * 1024 + 7)  # three chunks
    assert [r.error for r in sandbox.upload_files([("/tmp/x/blob", data)])] == [None]
    assert [r.error for r in await sandbox.aupload_files([("/tmp/y/blob", data[:5])])] == [None]
    [sync] = sandbox.download_files(["/tmp/x/blob"])
    [async_] = await sandbox.adownload_files(["/tmp/y/blob"])
    assert (sync.content, sync.error) == (data, None)
    assert (async_.content, async_.error) == (data[:5], None)
    # Nothing was left in the session, and what the agent defined is still there.
    assert sandbox.execute('command printf "%s %s" "${p-none}" "${d-none}"').output == "none none"
    assert sandbox.execute("wc").output.strip() == "999999999999"


@pytest.mark.parametrize(
    ("definition", "proof", "lie"),
    [(PRINTF, "printf %s x", "QUFB"), (COMMAND, "command -v wc", "999999999999\n")],
    ids=["printf", "command"],
)
def test_printf_and_command_functions_do_not_take_part(definition, proof, lie):
    with _box() as sandbox:
        sandbox.execute(definition)
        assert sandbox.execute(proof).output == lie
        data = bytes(range(256)) * 300
        assert [r.error for r in sandbox.upload_files([("/tmp/blob", data)])] == [None]
        [got] = sandbox.download_files(["/tmp/blob"])
        assert (got.content, got.error) == (data, None)


def test_a_device_is_refused_at_once_not_read_until_the_deadline():
    with _box() as sandbox:
        sent = _counting(sandbox)
        [zero] = sandbox.download_files(["/dev/zero"])
        assert (zero.content, zero.error, len(sent)) == (None, "permission_denied", 1)


# -- lies that cannot be avoided: a bounded error ------------------------------------------


def _liar(answer: str) -> str:
    """A `command` function that answers `answer` in place of every command, warden's framing
    still working around it: the session answers for the transfer."""
    return f"command() {{ {answer}; }}"


OK = "echo WARDEN-OK"


@pytest.mark.parametrize(
    ("answer", "options", "detail"),
    [
        # The review's: a huge size, and a chunk of three bytes for ever after.
        (f"{OK}; echo 999999999999; echo QUFB", {}, "more than max_download_size (104857600)"),
        (f"{OK}; echo 999999999999; echo QUFB", {"max_download_size": 10**13}, "fewer bytes"),
        (f"{OK}; echo 101; echo QUFB", {"max_download_size": 100}, "max_download_size (100)"),
        (f"{OK}; echo -5; echo QUFB", {}, "not a number of bytes"),
        (f"{OK}; echo 1e3; echo QUFB", {}, "not a number of bytes"),
        (f"{OK}; echo; echo QUFB", {}, "not a number of bytes"),
        (f"{OK}; echo 2; echo QUFB", {}, "more bytes than the size said"),
        (f"{OK}; echo 10; echo '!!!!'", {}, "not base64"),
        # Endless data, as far as the output limit lets it through.
        (
            f"{OK}; echo 1000000; yes QUFB | head -n 5000",
            {"chunk_size": 4096},
            "a chunk larger than the 4096 bytes asked",
        ),
        ("echo WARDEN-ERR:gone", {}, "an error of no known kind, 'gone'"),
        ("echo 999999999999", {}, "no status line"),
    ],
    ids=[
        "review",
        "review-unbounded",
        "over-limit",
        "negative",
        "float",
        "empty",
        "more-than-size",
        "not-base64",
        "endless",
        "unknown-error",
        "no-status",
    ],
)
async def test_a_session_answering_for_the_download_fails_it_in_one_round(
    answer, options, detail, caplog
):
    with _box(**options) as sandbox:
        sandbox.execute(_liar(answer))
        sent = _counting(sandbox)
        with caplog.at_level(logging.WARNING, LOGGER):
            [sync] = sandbox.download_files(["/tmp/anything"])
            [async_] = await sandbox.adownload_files(["/tmp/anything"])
        for response in (sync, async_):
            assert (response.content, response.error) == (None, "permission_denied")
        assert len(sent) == 2
        assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2
        assert detail in caplog.records[0].getMessage(), caplog.records[0].getMessage()
        assert "/tmp/anything" in caplog.records[0].getMessage()


def test_endless_data_past_the_output_limit_ends_in_a_few_halvings():
    with _box() as sandbox:
        sandbox.execute(_liar(f"{OK}; echo 1000000; yes QUFB | head -n 100000"))
        sent = _counting(sandbox)
        with pytest.raises(WardenError, match="output limit"):
            sandbox.download_files(["/tmp/anything"])
        assert len(sent) == 7  # 44 KiB, halved until at most 1 KiB


@pytest.mark.parametrize("tool", ["host-shell", "shell", "shell-busybox"])
def test_where_the_policy_allows_a_file_moves_out_in_one_request(tool):
    """With the policy's `transfer`, a download is one `warden/read` (no command of the shell
    session), byte-exact, whatever the session left in its shell; a file larger than the
    `transfer` moves in chunks as before."""
    if tool != "host-shell":
        require_docker()
    data = os.urandom(5 * 1024 * 1024)
    with _box(tool, transfer="6MiB") as sandbox:
        assert [r.error for r in sandbox.upload_files([("/tmp/big", data)])] == [None]
        sandbox.execute(HOSTILE)
        sent = _counting(sandbox)
        [back] = sandbox.download_files(["/tmp/big"])
        assert back.error is None and back.content == data
        missing = sandbox.download_files(["/tmp/none", "/tmp"])
        assert [(r.content, r.error) for r in missing] == [
            (None, "file_not_found"),
            (None, "is_directory"),
        ]
        assert sent == []
    with _box(tool, transfer="1MiB") as sandbox:
        assert [r.error for r in sandbox.upload_files([("/tmp/big", data)])] == [None]
        sent = _counting(sandbox)
        [back] = sandbox.download_files(["/tmp/big"])
        assert back.error is None and back.content == data
        assert len(sent) > 100, "in chunks of 44 KiB"


async def test_a_session_answering_for_a_read_fails_it_and_says_why(caplog):
    """Where no shell starts beside the session's (a sandbox with an egress gate), a read runs
    in the session's shell: something there that answers in the read's place (a `command`
    function, which warden's framing calls) gets the file refused, and what did not add up
    logged."""
    lie = _liar(f"{OK}; echo 5; echo QUFB")
    with _box(transfer="1MiB", gated=True) as sandbox:
        sandbox.execute(lie)
        with caplog.at_level(logging.WARNING, LOGGER):
            [sync] = sandbox.download_files(["/tmp/anything"])
            [async_] = await sandbox.adownload_files(["/tmp/anything"])
            [wrote] = sandbox.upload_files([("/tmp/anything", b"hello, world")])
    for response in (sync, async_, wrote):
        assert response.error == "permission_denied"
    assert sync.content is None and async_.content is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and all("do not add up" in m for m in messages), messages


@pytest.mark.parametrize("tool", ["host-shell", "shell", "shell-busybox"])
async def test_reads_and_writes_run_beside_the_session_where_the_sandbox_can(tool):
    """The shipped shells start shells beside the session's: a read or a write runs in one of
    its own, and what the session's shell holds cannot answer for it."""
    if tool != "host-shell":
        require_docker()
    with _box(tool, transfer="1MiB") as sandbox:
        sandbox.execute(_liar(f"{OK}; echo 5; echo QUFB"))
        [missing] = sandbox.download_files(["/tmp/anything"])
        assert sandbox.upload_files([("/tmp/anything", b"hello, world")])[0].error is None
        [there] = await sandbox.adownload_files(["/tmp/anything"])
    assert (missing.content, missing.error) == (None, "file_not_found")
    assert (there.content, there.error) == (b"hello, world", None)


@pytest.mark.parametrize("tool", ["host-shell", "shell", "shell-busybox"])
def test_a_write_is_one_request_beside_the_session_and_says_why_it_fails(tool):
    """`warden/write`, what an upload is where the policy allows transfers: the bytes land
    byte-exact, parents made, owned by the sandbox's user, whatever the session left in its
    shell (no command of the session's runs); each failure with the file has its code, and
    parameters that are not a tool, a path and base64 are refused."""
    if tool != "host-shell":
        require_docker()
    data = os.urandom(3 * MiB)
    with _box(tool, transfer="4MiB") as sandbox:

        def write(path: str, content: bytes, **more: Any) -> dict[str, Any]:
            params = {"tool": tool, "path": path, "data": base64.b64encode(content).decode()}
            return sandbox._session.request("warden/write", {**params, **more})

        sandbox.execute(HOSTILE)
        sent = _counting(sandbox)
        assert write("/tmp/a/b/big", data) == {"size": len(data)}
        assert write("/tmp/empty", b"") == {"size": 0}
        [back] = sandbox.download_files(["/tmp/a/b/big"])
        assert back.error is None and back.content == data
        assert sent == []
        sandbox.execute("mkfifo /tmp/fifo")
        refusals = {
            "exists": write("/tmp/a/b/big", b"x", new=True),
            "is_directory": write("/tmp/a", b"x"),
            "invalid_path": write("/tmp/a/b/big/c", b"x"),
            "permission_denied": write("/usr/warden-cannot", b"x"),
            # No file, which may never take the bytes: refused at once.
            "permission_denied ": write("/tmp/fifo", b"x"),
            "too_large": write("/tmp/huge", bytes(4 * MiB + 1)),
        }
        for code, answer in refusals.items():
            assert answer["error"]["file"] == code.strip(), (code, answer)
            assert answer["error"]["suspect"] is False
        for path in ("tmp/relative", "/tmp/two\nlines"):
            assert write(path, b"x")["error"]["file"] == "invalid_path"
        out = sandbox.execute("unset -f test echo; test -O /tmp/a/b/big && echo mine")
        assert out.output.strip() == "mine"
        for hostile in ({"data": "not base64!"}, {"new": "yes"}, {"path": 7}):
            with pytest.raises(McpError) as refused:
                sandbox._session.request(
                    "warden/write", {"tool": tool, "path": "/tmp/x", "data": "", **hostile}
                )
            assert refused.value.code == -32602


# The pids of the sandbox's other shells than the session's own (`$$`), by builtins only.
OTHER_SHELLS = (
    'for d in /proc/[0-9]*; do n=${d#/proc/}; [ "$n" = "$$" ] && continue; '
    '{ read -r c <"$d/comm"; } 2>/dev/null || continue; '
    'case $c in sh|dash|ash|busybox) printf "%s " "$n";; esac; done'
)


@pytest.mark.parametrize("tool", ["shell", "shell-busybox"])
def test_one_shell_beside_the_session_carries_every_transfer(tool):
    """After a transfer, one shell waits beside the session's for the next: an engine's
    `exec` takes tens of milliseconds, and one started for each transfer ran beside the next.
    It carries transfer after transfer, and a command that kills it costs the next transfer
    nothing but a fresh start. (In a container, which shows its processes in `/proc`; the
    host sandbox mounts none, and the driver is the same.)"""
    require_docker()
    with _box(tool, transfer="1MiB") as sandbox:
        assert sandbox.upload_files([("/tmp/one", b"one")])[0].error is None
        carrier = sandbox.execute(OTHER_SHELLS).output.split()
        assert len(carrier) == 1, carrier
        for n in range(10):
            data = os.urandom(64 << 10) + str(n).encode()
            assert sandbox.upload_files([("/tmp/n", data)])[0].error is None
            assert sandbox.download_files(["/tmp/n"])[0].content == data
        assert sandbox.execute(OTHER_SHELLS).output.split() == carrier
        sandbox.execute(f"kill -9 {carrier[0]}")
        params = {"tool": tool, "path": "/tmp/two", "data": base64.b64encode(b"two").decode()}
        assert sandbox._session.request("warden/write", params) == {"size": 3}
        [back] = sandbox.download_files(["/tmp/two"])
        assert back.content == b"two"


@pytest.mark.parametrize("tool", ["shell", "shell-busybox"])
def test_a_containers_transfers_go_through_the_couriers_own_fifo(tool):
    """In a container, whose shells' stdio the engine relays (two more copies each way), a
    transfer's bytes go through a FIFO the courier holds, which warden takes by its pidfd. A
    process of the sandbox may write into it, as into the courier's stdin: what it wrote
    between transfers is drained, and never handed to the client as a file's bytes."""
    require_docker()
    data = os.urandom(300_000)
    with _box(tool, transfer="1MiB") as sandbox:
        assert sandbox.upload_files([("/tmp/f", data)])[0].error is None
        [courier] = sandbox.execute(OTHER_SHELLS).output.split()
        held = sandbox.execute(f"ls -l /proc/{courier}/fd/3").output
        assert "/tmp/.warden-" in held and "(deleted)" in held, held
        sandbox.execute(f"printf planted >/proc/{courier}/fd/3")
        [back] = sandbox.download_files(["/tmp/f"])
        assert back.error is None and back.content == data
        # What warden drained is gone (a read finds nothing until its timeout): the
        # download did go through the FIFO.
        left = sandbox.execute(f"timeout 1 cat /proc/{courier}/fd/3 2>/dev/null | wc -c")
        assert left.output.split()[0] == "0", left.output


def test_without_a_dd_that_reads_whole_blocks_transfers_go_through_the_session():
    """In an image whose `dd` cannot read exactly a transfer's bytes (here none at all), no
    shell carries transfers beside the session's: they go through the session's shell, byte
    for byte, and no shell is left waiting beside it."""
    require_docker()
    data = bytes(range(256)) * 1000
    with _box("shell-nodd", transfer="1MiB") as sandbox:
        assert sandbox.execute("dd if=/dev/null 2>&1; echo $?").output.strip().endswith("127")
        assert sandbox.upload_files([("/tmp/x", data)])[0].error is None
        assert sandbox.download_files(["/tmp/x"])[0].content == data
        assert sandbox.upload_files([("/tmp/y", b"again")])[0].error is None
        assert sandbox.execute(OTHER_SHELLS).output.split() == []


async def test_transfers_at_once_each_get_a_shell_and_one_is_kept():
    """Transfers that overlap each get a shell beside the session's (the kept one, or a fresh
    one); every byte comes back as it went, and once they have all ended one shell waits for
    the next."""
    require_docker()
    with _box("shell", transfer="1MiB") as sandbox:
        files = [(f"/tmp/at-once/{n}", os.urandom(200_000) + bytes([n])) for n in range(6)]
        ups = await asyncio.gather(*(sandbox.aupload_files([f]) for f in files))
        assert all(up.error is None for [up] in ups), ups
        downs = await asyncio.gather(*(sandbox.adownload_files([p]) for p, _ in files))
        assert [down.content for [down] in downs] == [data for _, data in files]
        assert len(sandbox.execute(OTHER_SHELLS).output.split()) == 1


def test_bytes_go_into_a_request_as_base64_whatever_its_other_text():
    """An upload's bytes are spliced into its request's JSON (escaping them cost more than
    encoding them); other text that reads like the splice's placeholder changes nothing."""
    data = os.urandom(1000)
    for path in ("/tmp/x", "\0warden-base64\0", '"\0warden-base64\0"'):
        message = {"params": {"path": path, "data": Base64(data), "more": [Base64(b"ab")]}}
        expected = {"path": path, "data": base64.b64encode(data).decode(), "more": ["YWI="]}
        assert json.loads(encode(message)) == {"params": expected}
    with pytest.raises(TypeError):
        encode({"data": b"raw bytes"})


def test_five_megabytes_go_in_and_out_byte_exact():
    """Uploads go in 1 MiB commands (their input is not held to the output limit), downloads
    in chunks that fit it; the bytes come back as they went."""
    data = os.urandom(5 * 1024 * 1024)
    with _box() as sandbox:
        sent = _counting(sandbox)
        assert [r.error for r in sandbox.upload_files([("/tmp/big", data)])] == [None]
        assert len(sent) == 5
        [back] = sandbox.download_files(["/tmp/big"])
        assert back.error is None and back.content == data


def test_an_upload_the_file_does_not_hold_fails(caplog):
    with _box(upload_chunk_size=4) as sandbox:
        sandbox.execute(_liar(f"{OK}; echo 5"))
        sent = _counting(sandbox)
        with caplog.at_level(logging.WARNING, LOGGER):
            [wrong] = sandbox.upload_files([("/tmp/blob", b"0123456789")])
        assert wrong.error == "permission_denied"
        assert len(sent) == 3
        assert "after 10 bytes were written its size is '5'" in caplog.text


@pytest.mark.parametrize(
    ("change", "detail", "rounds"),
    [
        # Seen when the last round reads the size again.
        ("head -c 100 /dev/zero >>/tmp/blob", "it changed while being read: 10000 bytes, then", 3),
        # Seen when the second chunk comes short.
        ("head -c 5000 /dev/zero >/tmp/new && mv /tmp/new /tmp/blob", "fewer bytes", 2),
    ],
    ids=["grows", "shrinks"],
)
def test_a_file_that_changes_while_it_is_read_fails(change, detail, rounds, caplog):
    with _box(chunk_size=4096) as sandbox:
        data = os.urandom(10000)  # three rounds
        assert [r.error for r in sandbox.upload_files([("/tmp/blob", data)])] == [None]
        run = sandbox._session._run
        sent: list[str] = []

        def changing(command: str, timeout: float | None = None) -> ShellOutput:
            """Runs each transfer command, and `change` right after the first."""
            sent.append(command)
            out = run(command, timeout)
            if len(sent) == 1:
                assert run(change).exit_code == 0
            return out

        sandbox._session._run = changing  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, LOGGER):
            [changed] = sandbox.download_files(["/tmp/blob"])
        assert (changed.content, changed.error) == (None, "permission_denied")
        assert detail in caplog.text
        assert len(sent) == rounds


# -- the steps alone, against scripted answers ----------------------------------------------


def _drive(steps: Generator[str, ShellOutput, T], answer: Callable[[int], str]) -> tuple[T, int]:
    """Runs `steps` against `answer(n)`'s stdout for its n-th command (at most 1000); returns
    what the steps returned and how many commands they sent."""
    sent = 0
    try:
        next(steps)
        while sent < 1000:
            sent += 1
            steps.send(ShellOutput(answer(sent), "", 0, [], False))
    except StopIteration as done:
        return done.value, sent
    raise AssertionError("the steps did not end")


def test_a_download_takes_only_the_rounds_its_size_takes():
    # Each answer a full chunk of 1024 bytes and the size 10000: ten rounds, the last of
    # which has 784 bytes left, so the tenth answer is too long.
    full = "\n" + "QUFB" * 341 + "AA==\n"  # 1024 bytes: 341 * 3 + 1
    got, sent = _drive(download("/f", 1024, MiB), lambda n: f"WARDEN-OK\n10000{full}")
    assert isinstance(got, Failure) and sent == 10
    assert got.detail is not None and "at byte 9216 of 10000" in got.detail
    assert "more bytes than the size said" in got.detail


def test_a_download_returns_the_bytes_when_the_answers_add_up():
    payload = os.urandom(2500)

    def answer(n: int) -> str:
        piece = payload[(n - 1) * 1024 : n * 1024]
        size = "2500" if n in (1, 3) else "-"
        return f"WARDEN-OK\n{size}\n{base64.encodebytes(piece).decode()}"

    assert _drive(download("/f", 1024, MiB), answer) == (payload, 3)


def test_a_truncated_chunk_asks_for_smaller_ones():
    steps = download("/f", 1024, MiB)
    next(steps)
    with pytest.raises(ChunkTooLarge):
        steps.send(ShellOutput("WARDEN-OK\n5000\nQUFB", "", 0, [], True))


def test_an_upload_takes_only_the_rounds_its_content_takes():
    got, sent = _drive(upload("/f", b"x" * 2049, 1024), lambda n: "WARDEN-OK\n2049\n")
    assert (got, sent) == (None, 3)
    got, sent = _drive(upload("/f", b"", 1024), lambda n: "WARDEN-OK\n0\n")
    assert (got, sent) == (None, 1)


def test_relative_paths_are_refused_before_any_command():
    assert _drive(download("f", 1024, MiB), lambda n: "") == (Failure("invalid_path"), 0)
    assert _drive(upload("f", b"x", 1024), lambda n: "") == (Failure("invalid_path"), 0)
