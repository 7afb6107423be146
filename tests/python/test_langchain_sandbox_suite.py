"""langchain-tests' SandboxIntegrationTests, unmodified, against WardenSandbox on the shipped
host shell (policies/shell-host.toml) and the Debian docker shell (policies/shell-docker.toml).

The suite reads files of up to 500 KiB back through `execute` (`read` answers them as base64,
`test_execute_large_stdout_payload` prints 500 KiB): the copies' `output` limit is raised to
2 MiB for it. Uploads and downloads go through the shell in chunks whatever the limit."""

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
