"""Snapshots of a `WardenSandbox` (warden's `warden/snapshot` and `warden/restore`) on the
shipped host and Debian docker shells as they are (and, for a restore and a fork's, the docker
shell on warden's busybox image): a snapshot, then changes, then a restore
gives back `/tmp` byte for byte (modes and links as they were) and the shell's directory and
variables; a fork and a sandbox made from a snapshot in another process diverge from the first;
a restore under a changed policy and an archive warden did not write are refused; the
snapshots lie out of every sandbox's reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import pytest

from langchain_harness import host_tool, require_docker, scratch, shell_toolbox, warden_bin
from langchain_warden import WardenSandbox, WardenSnapshotError
from langchain_warden._process import McpError

SHELLS = ["host-shell", "shell"]
DATA = bytes(range(256)) * 1024  # 256 KiB of every byte value


@pytest.fixture
def base() -> Iterator[Path]:
    with scratch() as base:
        shell_toolbox(base)
        yield base


def made(base: Path, tool: str) -> dict:
    if tool in ("shell", "shell-busybox"):
        require_docker()
    if tool == "shell-busybox":
        # The docker shell on warden's busybox image: its own tar (which leaves GNU tar's
        # TAR_OPTIONS alone), dd and shell.
        variant(base, "shell-docker.toml", "shell", tool,
                ('image = "warden-sandbox-debian:latest"', 'image = "warden-sandbox:latest"'))
    if tool == "gated-shell":
        # The host shell with a net grant: its egress gate serves one command at a time, so
        # no shell starts beside the session's and the bytes go through it as base64.
        variant(base, "shell-host.toml", "host-shell", tool,
                ("\n[grants]\n", '\n[grants]\nnet = ["127.0.0.1:9"]\n'))
    return {"tool": tool, "toolbox": base / "policies", "home": base / "home", "warden": warden_bin()}


def variant(base: Path, shipped: str, name: str, tool: str, change: tuple[str, str]) -> None:
    """The shipped policy `shipped` (tool `name`) as tool `tool`, with `change` made."""
    text = (base / "policies" / shipped).read_text()
    old, new = change
    assert f'name = "{name}"' in text and old in text, (shipped, old)
    text = text.replace(f'name = "{name}"', f'name = "{tool}"', 1).replace(old, new, 1)
    (base / "policies" / f"{tool}.toml").write_text(text)


def state(sandbox: WardenSandbox) -> str:
    """What a restore must give back: the directory, a variable, the files with their modes,
    links and contents."""
    return sandbox.execute(
        "pwd; echo \"A=$A C=${C-unset}\"; (cd /tmp/w && find . | sort | while read -r p; do "
        "if [ -L \"$p\" ]; then echo \"$p -> $(readlink \"$p\")\"; "
        "else echo \"$p $(stat -c %a \"$p\") $( [ -f \"$p\" ] && md5sum <\"$p\" | cut -c1-8)\"; fi; done)"
    ).output


def prepare(sandbox: WardenSandbox) -> None:
    [up] = sandbox.upload_files([("/tmp/w/d/data.bin", DATA)])
    assert up.error is None, up
    ran = sandbox.execute(
        "cd /tmp/w && echo one >d/f && chmod 640 d/f && ln -s /etc/passwd link && "
        "mkdir -m 700 private && export A='x y' && cd d"
    )
    assert ran.exit_code == 0, ran.output


@pytest.mark.parametrize("tool", [*SHELLS, "gated-shell", "shell-busybox"])
def test_a_restore_gives_back_tmp_and_the_shell_as_they_were(base, tool):
    with WardenSandbox(**made(base, tool)) as sandbox:
        prepare(sandbox)
        before = state(sandbox)
        snap = sandbox.snapshot()
        changed = sandbox.execute(
            "cd / && rm -rf /tmp/w/private /tmp/w/link && echo two >/tmp/w/d/f && "
            "echo new >/tmp/new && export A=changed C=3"
        )
        assert changed.exit_code == 0, changed.output
        assert state(sandbox) != before
        sandbox.restore(snap)
        assert state(sandbox) == before
        assert "/tmp/w/d\n" in before and "A=x y C=unset" in before, before
        assert sandbox.execute("cat /tmp/new 2>&1").exit_code != 0, "what came after is gone"
        [back] = sandbox.download_files(["/tmp/w/d/data.bin"])
        assert back.content == DATA, "byte for byte"
        # The session goes on from there.
        assert sandbox.execute("echo $A; cat f").output == "x y\none\n"


@pytest.mark.parametrize("tool", SHELLS)
def test_a_fork_and_a_sandbox_from_a_snapshot_diverge_from_the_first(base, tool):
    kwargs = made(base, tool)
    with WardenSandbox(**kwargs) as first:
        prepare(first)
        before = state(first)
        with first.fork() as fork:
            assert state(fork) == before
            fork.execute("echo forked >/tmp/w/d/f")
            first.execute("echo first >/tmp/w/d/g")
            assert first.execute("cat /tmp/w/d/f").output == "one\n"
            assert fork.execute("cat /tmp/w/d/g 2>&1").exit_code != 0
        snap = first.snapshot()
    # Another process, the same home: the id is all it needs.
    script = (
        "import json, sys\n"
        "from langchain_warden import WardenSandbox\n"
        "kw = json.loads(sys.argv[2])\n"
        "with WardenSandbox.from_snapshot(sys.argv[1], **kw) as s:\n"
        "    print(s.execute('pwd; cat f g').output, end='')\n"
    )
    shown = {k: str(v) for k, v in kwargs.items()}
    out = subprocess.run(
        [sys.executable, "-c", script, snap, json.dumps(shown)],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "/tmp/w/d\none\nfirst\n", out.stdout


@pytest.mark.parametrize("tool", SHELLS)
def test_a_sandbox_starts_ahead_of_its_first_command_when_asked(base, tool):
    """`warden/start`, which a fork sends its new sandbox while it takes the snapshot: the
    session's sandbox starts, and in a container the shell that carries its transfers
    (holding its FIFO) is there before any transfer; the first command runs in it."""
    with WardenSandbox(**made(base, tool)) as sandbox:
        assert sandbox._session.request("warden/start", {"tool": tool}) == {}
        assert sandbox.execute("echo ran").output == "ran\n"
        if tool == "shell":
            held = sandbox.execute("ls -l /proc/[0-9]*/fd/3 2>/dev/null | grep -c /tmp/.warden-")
            assert held.output.strip() == "1", held.output
        with pytest.raises(McpError) as unknown:
            sandbox._session.request("warden/start", {"tool": "no-such-tool"})
        assert (unknown.value.code, unknown.value.data) == (-32011, {"kind": "unknown_tool"})
        for shapeless in ({"tool": 7}, {"tool": tool, "fork": "yes"}):
            with pytest.raises(McpError) as refused:
                sandbox._session.request("warden/start", shapeless)
            assert refused.value.code == -32602


@pytest.mark.parametrize("tool", SHELLS)
def test_a_forks_start_starts_its_shell_alone_and_no_tool_without_one(base, tool):
    """`warden/start` with `fork` (the fork's restore comes next, through the session's own
    shell) starts the session's shell and no shell beside it; for a tool whose calls are
    not a session's, it does nothing (a call of this one, with or without a command, is
    answered an error)."""
    failing = host_tool("failing", ["/bin/sh", "-c", "exit 3"], base / "workspace")
    (base / "policies" / "failing.toml").write_text(failing)
    with WardenSandbox(**made(base, tool)) as sandbox:
        assert sandbox._session.request("warden/start", {"tool": tool, "fork": True}) == {}
        held = sandbox.execute("ls -l /proc/[0-9]*/fd/3 2>/dev/null | grep -c /tmp/.warden-")
        assert held.output.strip() == "0", held.output
        assert sandbox._session.request("warden/start", {"tool": "failing", "fork": True}) == {}
        called = sandbox._session.request("tools/call", {"name": "failing", "arguments": {}})
        assert called.get("isError"), f"a call of it fails: {called}"


def test_a_restore_under_a_changed_policy_is_refused(base):
    kwargs = made(base, "host-shell")
    with WardenSandbox(**kwargs) as sandbox:
        prepare(sandbox)
        snap = sandbox.snapshot()
    policy = base / "policies" / "shell-host.toml"
    policy.write_text(policy.read_text().replace('timeout = "30s"', 'timeout = "29s"'))
    with pytest.raises(WardenSnapshotError) as refused:
        WardenSandbox.from_snapshot(snap, **kwargs)
    assert refused.value.kind == "policy_changed", refused.value
    assert "restore it under the policy it was taken with" in str(refused.value)


def tampered(entry: str, kind: bytes, target: str = "") -> bytes:
    """An archive holding `./ok` and a hostile `entry`: a file, or (`kind` SYMTYPE) a link to
    `target` with a file below it."""
    out = BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        def add(name, type_=tarfile.REGTYPE, link=""):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = type_, link, 0 if link else 3
            tar.addfile(info, None if link else BytesIO(b"bad"))
        add("./ok")
        if kind == tarfile.SYMTYPE:
            add(entry, tarfile.SYMTYPE, target)
            add(entry + "/passwd")
        else:
            add(entry)
    return out.getvalue()


@pytest.mark.parametrize(
    "archive",
    [tampered("../escape", tarfile.REGTYPE), tampered("/etc/escape", tarfile.REGTYPE),
     tampered("./up", tarfile.SYMTYPE, "/etc")],
    ids=["dotdot", "absolute", "symlinked-parent"],
)
def test_an_archive_warden_did_not_write_is_refused(base, archive):
    kwargs = made(base, "host-shell")
    with WardenSandbox(**kwargs) as sandbox:
        sandbox.execute("echo kept >/tmp/kept")
        snap = sandbox.snapshot()
        (base / "home" / "snapshots" / snap / "archive.tar").write_bytes(archive)
        with pytest.raises(WardenSnapshotError) as refused:
            sandbox.restore(snap)
        assert refused.value.kind == "refused", refused.value
        assert sandbox.execute("cat /tmp/kept; ls /tmp/ok 2>&1").output.startswith("kept\n")


@pytest.mark.parametrize("tool", [*SHELLS, "shell-busybox"])
def test_a_forks_restore_takes_what_warden_wrote_and_checks_the_rest_whole(base, tool):
    """A fork's sandbox unpacks the archive while warden checks it; one warden did not
    write stops that stream, and is checked whole as any restore's: written again where its
    entries pass, refused where they do not."""
    kwargs = made(base, tool)
    with WardenSandbox(**kwargs) as first:
        prepare(first)
        snap = first.snapshot()
        with first.fork() as fork:
            [back] = fork.download_files(["/tmp/w/d/data.bin"])
            assert back.content == DATA, "byte for byte"
            assert fork.execute("readlink /tmp/w/link").output == "/etc/passwd\n"
    archive = base / "home" / "snapshots" / snap / "archive.tar"
    plain = BytesIO()
    with tarfile.open(fileobj=plain, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("./ok")
        info.size = 3
        tar.addfile(info, BytesIO(b"yes"))
    for written, refused in [(plain.getvalue(), False), (tampered("../escape", tarfile.REGTYPE), True)]:
        archive.write_bytes(written)
        with WardenSandbox(**kwargs) as forked:
            if refused:
                with pytest.raises(WardenSnapshotError) as refusal:
                    forked._restore(snap, fork=True)
                assert refusal.value.kind == "refused", refusal.value
                assert forked.execute("cat /tmp/ok").exit_code != 0, "nothing of it unpacked"
            else:
                forked._restore(snap, fork=True)
                assert forked.execute("cat /tmp/ok").output == "yes", "written again"


@pytest.mark.parametrize("tool", ["shell", "shell-busybox"])
def test_a_docker_forks_restore_goes_through_its_own_shell_and_starts_no_exec(base, tool):
    """A docker fork's restore needs no shell beside its session's (an engine `exec`, whose
    start it would wait for): the archive goes in through a FIFO its own shell holds, which
    warden takes from the shell's process. The engine then holds no exec of the fork's
    container, where it holds the one that carried the first sandbox's snapshot out; the
    fork's shell keeps neither the FIFO nor its name."""
    kwargs = made(base, tool)

    def sessions() -> set[str]:
        return set(docker("ps", "-q", "--no-trunc", "--filter", "label=warden.mode=session").split())

    def execs(container: str) -> list:
        return json.loads(docker("inspect", "-f", "{{json .ExecIDs}}", container)) or []

    earlier = sessions()
    with WardenSandbox(**kwargs) as first:
        prepare(first)
        [mine] = sessions() - earlier
        with first.fork() as fork:
            [forked] = sessions() - earlier - {mine}
            assert execs(mine), "the first sandbox's transfers went through execs, which show"
            assert execs(forked) == [], "the fork's restore started no exec"
            assert state(fork) == state(first)
            left = fork.execute("ls -a /tmp; ls -l /proc/$$/fd").output
            assert ".warden-feed" not in left and " 9 -> " not in left, left


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("tool", SHELLS)
def test_snapshots_are_out_of_every_sandboxs_reach(base, tool):
    kwargs = made(base, tool)
    with WardenSandbox(**kwargs) as sandbox:
        snap = sandbox.snapshot()
        kept = base / "home" / "snapshots" / snap
        assert (kept / "archive.tar").is_file()
        # The sandbox sees its workspace grant (the host shell at its host path, beside the
        # home): the home is not there.
        root = "/workspace" if tool == "shell" else base / "workspace"
        seen = sandbox.execute(f"ls {root}; ls {kept} 2>&1; ls {base / 'home'} 2>&1")
        assert "README.txt" in seen.output, "a reach the sandbox has shows"
        assert "archive.tar" not in seen.output and "snapshot.json" not in seen.output, seen.output


def read_write(base: Path, tool: str) -> tuple[dict, Path, str]:
    """The shipped shell `tool` as `rw-shell`, its grant a read-write root `rw` of `base`:
    the sandbox's arguments, the root, and where its sandbox sees it."""
    shipped = "shell-host.toml" if tool == "host-shell" else "shell-docker.toml"
    root = base / "rw"
    root.mkdir()
    root.chmod(0o777)
    (base / "policies" / "rw.toml").write_text(
        (base / "policies" / shipped).read_text()
        .replace(f'name = "{tool}"', 'name = "rw-shell"')
        .replace('host = "../workspace"', 'host = "../rw"')
        .replace('access = "read-only"', 'access = "read-write"')
    )
    kwargs = made(base, "rw-shell") if tool == "host-shell" else {**made(base, tool), "tool": "rw-shell"}
    return kwargs, root, str(root) if tool == "host-shell" else "/workspace"


@pytest.mark.parametrize("tool", SHELLS)
def test_read_write_roots_are_rewound_by_a_restore(base, tool):
    """A session's read-write root is the real folder, each command's changes a call's
    transaction: a restore undoes the calls committed to it since the snapshot (byte-exact,
    modes kept), a root changed by no call since is a `conflict` that leaves it as it is,
    and a forced restore replaces what changed."""
    kwargs, root, seen = read_write(base, tool)
    with WardenSandbox(**kwargs) as sandbox:
        first = sandbox.execute(f"cd {seen} && printf one >a && chmod 640 a && mkdir d && echo x >/tmp/t")
        assert first.exit_code == 0, first.output
        snap = sandbox.snapshot()
        later = sandbox.execute(f"cd {seen} && printf two >a && chmod 600 a && rm -r d && printf b >b")
        assert later.exit_code == 0, later.output
        sandbox.execute(f"cd {seen} && printf three >>a && echo y >/tmp/t")
        sandbox.restore(snap)
        assert sorted(p.name for p in root.iterdir()) == ["a", "d"]
        assert (root / "a").read_bytes() == b"one" and (root / "a").stat().st_mode & 0o777 == 0o640
        assert sandbox.execute("cat /tmp/t").output == "x\n"
        with pytest.raises(McpError) as shape:
            sandbox._session.request(
                "warden/restore", {"tool": "rw-shell", "snapshot": snap, "fork": "yes"}
            )
        assert shape.value.code == -32602
        sandbox.execute(f"printf four >{seen}/a")
        (root / "a").write_bytes(b"a person's edit")
        with pytest.raises(WardenSnapshotError) as clash:
            sandbox.restore(snap)
        assert clash.value.kind == "conflict" and "/a" in str(clash.value), clash.value
        assert (root / "a").read_bytes() == b"a person's edit"
        sandbox.restore(snap, force=True)
        assert (root / "a").read_bytes() == b"one", "forced, over the edit"
        with pytest.raises(McpError) as both:
            sandbox._session.request(
                "warden/restore",
                {"tool": "rw-shell", "snapshot": snap, "fork": True, "force": True},
            )
        assert both.value.code == -32602


def tree(root: Path) -> dict[str, str]:
    """Each entry below `root`: a file's content and mode, a link's target, a folder."""
    out = {}
    for p in sorted(root.rglob("*")):
        name = str(p.relative_to(root))
        if p.is_symlink():
            out[name] = "-> " + str(p.readlink())
        elif p.is_dir():
            out[name] = "dir"
        else:
            out[name] = f"{p.read_text()} {p.stat().st_mode & 0o777:o}"
    return out


@pytest.mark.parametrize("tool", SHELLS)
def test_a_fork_writes_copies_of_the_read_write_roots_until_it_commits(base, tool):
    """A fork of a sandbox with a read-write root writes a copy of it, made as the snapshot
    found the root: the real folder does not change, nor does the fork see what its origin
    writes after, until the fork commits. A commit applies what the fork changed as one call
    (`warden undo` puts it back), and a path the real folder changed meanwhile is a
    `conflict` that applies nothing. The copy goes with the fork, and a fork of an older
    snapshot starts from the root as it was then."""
    kwargs, root, seen = read_write(base, tool)
    forks = base / "home" / "snapshots" / "forks"
    with WardenSandbox(**kwargs) as origin:
        first = origin.execute(f"cd {seen} && printf one >a && chmod 640 a && mkdir d && printf x >d/x")
        assert first.exit_code == 0, first.output
        old = origin.snapshot()
        assert origin.execute(f"cd {seen} && printf two >a && printf b >b").exit_code == 0
        before = tree(root)
        with origin.fork() as fork:
            assert fork.execute(f"cd {seen} && cat a b d/x").output == "twobx"
            wrote = fork.execute(f"cd {seen} && printf fork >a && rm -r d && printf c >c && ln -s /etc/passwd l")
            assert wrote.exit_code == 0, wrote.output
            assert tree(root) == before, "the real folder is as it was"
            assert origin.execute(f"cd {seen} && printf e >e && ls").output == "a\nb\nd\ne\n"
            assert fork.execute(f"cd {seen} && ls").output == "a\nb\nc\nl\n", "not the origin's e"
            assert len(list(forks.iterdir())) == 1
            # The fork's own snapshots rewind its copy; a fork of one is refused, since it
            # marks the copy, which no policy grants.
            own = fork.snapshot()
            fork.execute(f"printf z >{seen}/z")
            fork.restore(own)
            assert fork.execute(f"ls {seen}").output == "a\nb\nc\nl\n"
            with pytest.raises(WardenSnapshotError) as twice:
                WardenSandbox._made_from(own, fork=True, **kwargs)
            assert twice.value.kind == "read_write_roots", twice.value
            assert tree(root) == {**before, "e": "e 644"}, "the origin's e alone"
            call = fork.commit()
            assert call is not None
            assert tree(root) == {
                "a": "fork 640", "b": "b 644", "c": "c 644", "e": "e 644", "l": "-> /etc/passwd",
            }, tree(root)
            assert fork.commit() is None, "nothing more to commit"
            undo = subprocess.run(
                [str(warden_bin()), "undo", call], capture_output=True, text=True,
                env={"WARDEN_HOME": str(base / "home"), "WARDEN_TOOLBOX": str(base / "policies")},
            )
            assert undo.returncode == 0, undo.stderr
            assert tree(root) == {**before, "e": "e 644"}, tree(root)
            fork.execute(f"printf again >{seen}/a")
            origin.execute(f"printf origin >{seen}/a")
            with pytest.raises(WardenSnapshotError) as clash:
                fork.commit()
            assert clash.value.kind == "conflict" and "/a" in str(clash.value), clash.value
            assert (root / "a").read_text() == "origin", "nothing applied"
            with pytest.raises(WardenSnapshotError) as unforked:
                origin.commit()
            assert unforked.value.kind == "not_a_fork", unforked.value
        assert list(forks.iterdir()) == [], "the copy went with the fork"
        then = WardenSandbox._made_from(old, fork=True, **kwargs)
        try:
            shown = then.execute(f"cd {seen} && ls && stat -c %a a && cat a d/x").output
            assert shown == "a\nd\n640\nonex", shown
            with pytest.raises(WardenSnapshotError) as elsewhere:
                then.restore(old)
            assert elsewhere.value.kind == "read_write_roots", elsewhere.value
        finally:
            then.close()
        assert (root / "a").read_text() == "origin" and (root / "d" / "x").read_text() == "x"
    # Under a changed policy a fork is refused, and leaves no copy behind.
    policy = base / "policies" / "rw.toml"
    policy.write_text(policy.read_text().replace('timeout = "30s"', 'timeout = "29s"'))
    with pytest.raises(WardenSnapshotError) as changed:
        WardenSandbox._made_from(old, fork=True, **kwargs)
    assert changed.value.kind == "policy_changed", changed.value
    assert list(forks.iterdir()) == []


def test_what_a_stopped_warden_left_goes_when_a_server_starts(base):
    """A fork's copies, and a snapshot's archive half written, outlive a warden killed while
    it ran: the next server of the home removes them as it starts, and leaves a live warden's
    alone."""
    kwargs, root, seen = read_write(base, "host-shell")
    forks = base / "home" / "snapshots" / "forks"
    with WardenSandbox(**kwargs) as origin:
        origin.execute(f"printf one >{seen}/a")
        with origin.fork():
            [live] = list(forks.iterdir())
            # A copy of a warden of another boot: gone, whatever its pid.
            left = forks / "00000000-0000-0000-0000-000000000000_1_1-0"
            (left / "0").mkdir(parents=True)
            (left / "0" / "a").write_text("left behind")
            half = base / "home" / "snapshots" / "partial" / left.name
            half.mkdir(parents=True)
            (half / "archive.tar").write_bytes(b"\0" * 4096)
            with WardenSandbox(**kwargs) as other:
                other.execute("true")
                assert not left.exists(), "the stopped warden's copy is gone"
                assert not half.exists(), "so is the snapshot it was writing"
                assert live.exists(), "a live fork's copy stays"


@pytest.mark.parametrize("how", ["gvisor", "copied"])
def test_a_docker_sessions_roots_are_transactions_under_gvisor_and_when_copied_in(base, how, monkeypatch):
    """Under gVisor (warden reaches the session's view through the engine's mount of it) and
    over roots copied into the container (an engine elsewhere: each command's changes read
    back from the copies), a docker session's commands are transactions: a restore rewinds
    the root and the sandbox sees the rewound files; a fork writes a copy, the real folder
    untouched, until its commit applies what the fork changed."""
    require_docker()
    kwargs, root, seen = read_write(base, "shell")
    policy = base / "policies" / "rw.toml"
    if how == "gvisor":
        runtimes = subprocess.run(
            ["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True
        ).stdout
        if "runsc-nonet" not in runtimes:
            assert os.environ.get("CI") != "true", "CI=true and no runtime runsc-nonet (.ci/run registers it)"
            pytest.skip("the engine has no runtime runsc-nonet")
        line = 'runtime = "runsc-nonet"'
    else:
        monkeypatch.setenv("WARDEN_DOCKER_FILES", "copy")
        line = "copy_back = true"
    policy.write_text(policy.read_text().replace("[executor]\n", f"[executor]\n{line}\n", 1))
    with WardenSandbox(**kwargs) as origin:
        assert origin.execute(f"printf one >{seen}/a").exit_code == 0
        assert (root / "a").read_text() == "one"
        snap = origin.snapshot()
        assert origin.execute(f"printf two >{seen}/a && echo t >/tmp/t").exit_code == 0
        assert (root / "a").read_text() == "two"
        origin.restore(snap)
        assert (root / "a").read_text() == "one"
        assert origin.execute(f"cat {seen}/a").output == "one"
        with origin.fork() as fork:
            assert fork.execute(f"printf fork >{seen}/a && cat {seen}/a").output == "fork"
            assert (root / "a").read_text() == "one"
            fork.commit()
            assert (root / "a").read_text() == "fork"
        assert (root / "a").read_text() == "fork"


def test_the_cli_lists_and_deletes_snapshots(base):
    with WardenSandbox(**made(base, "host-shell")) as sandbox:
        snap = sandbox.snapshot()
    env = {"WARDEN_HOME": str(base / "home"), "WARDEN_TOOLBOX": str(base / "policies")}
    cli = lambda *args: subprocess.run(  # noqa: E731
        [str(warden_bin()), "snapshot", *args], capture_output=True, text=True, env=env
    )
    listed = cli("list")
    assert listed.returncode == 0 and snap in listed.stdout and "(host-shell)" in listed.stdout
    assert cli("delete", snap).returncode == 0
    assert cli("list").stdout.startswith("no snapshot")
    gone = cli("delete", snap)
    assert gone.returncode != 0 and "no snapshot" in gone.stderr, gone.stderr


@pytest.mark.parametrize("tool", SHELLS)
def test_a_fifo_in_tmp_is_left_out_not_a_failure(base, tool):
    with WardenSandbox(**made(base, tool)) as sandbox:
        made_it = sandbox.execute("mkfifo /tmp/pipe && echo kept >/tmp/file")
        assert made_it.exit_code == 0, made_it.output
        snap = sandbox.snapshot()
        sandbox.execute("rm /tmp/pipe /tmp/file")
        sandbox.restore(snap)
        after = sandbox.execute("cat /tmp/file; test -e /tmp/pipe || echo no-fifo").output
    assert after == "kept\nno-fifo\n", after
