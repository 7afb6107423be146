"""The package's exceptions: each says what went wrong and what to do about it."""

from __future__ import annotations


class WardenError(RuntimeError):
    """Something between Python and the `warden` process failed."""


class WardenNotFoundError(WardenError, FileNotFoundError):
    """No `warden` binary could be found or run."""


class WardenVersionError(WardenNotFoundError):
    """The `warden` binary found is another release than the one this package drives."""


class WardenStartError(WardenError):
    """`warden serve` did not start: its toolbox did not load, or it exited at once."""


class WardenProcessError(WardenError):
    """The `warden` process ended, or stopped answering, while calls were waiting on it."""


class WardenSnapshotError(WardenError):
    """warden refused a snapshot, a restore or a fork's commit; `kind` says why
    (`not_found`, `full`, `policy_changed`, `read_write_roots` for a restore into a sandbox
    that writes other roots than the snapshot's, `conflict` for roots changed meanwhile,
    `not_undoable`, `not_a_fork`, `in_place`, `too_large`, `limit_exceeded`, `refused`,
    `unavailable`, …)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
