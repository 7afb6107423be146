"""langchain-tests' SandboxIntegrationTests, unmodified, against WardenSandbox on the shipped
host shell (policies/shell-host.toml) and the Debian docker shell (policies/shell-docker.toml),
as they are: their `output` limit of 64 KiB stays, though the suite prints 500 KiB through
`execute` and reads files of as much back through it (`execute` reads what the limit cuts from
the sandbox in chunks). Run with deepagents 0.6.3 (the pinned one) and 0.7.32 alike."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol
from langchain_tests.integration_tests import SandboxIntegrationTests

from langchain_harness import require_docker, scratch, shell_toolbox, warden_bin
from langchain_warden import WardenSandbox

# The suite's async tests carry no marker of their own.
pytestmark = pytest.mark.anyio


def _sandbox(tool: str) -> Iterator[WardenSandbox]:
    with scratch() as base:
        box = shell_toolbox(base)
        with WardenSandbox(
            tool=tool, toolbox=box, home=base / "home", warden=warden_bin()
        ) as sandbox:
            yield sandbox


class TestWardenHostShellSandbox(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls) -> Iterator[SandboxBackendProtocol]:
        yield from _sandbox("host-shell")


class TestWardenDockerShellSandbox(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls) -> Iterator[SandboxBackendProtocol]:
        require_docker()
        yield from _sandbox("shell")
