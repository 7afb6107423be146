"""notes: plain-text notes under /workspace/notes. The policy decides what /workspace is and
whether it is writable; this code trusts the sandbox, not itself, for that."""

import os

import wit_world
from componentize_py_types import Err

NOTES = "/workspace/notes"


def _path(name: str) -> str:
    return os.path.join(NOTES, name)


class WitWorld(wit_world.WitWorld):
    def list_notes(self) -> list[str]:
        try:
            return sorted(os.listdir(NOTES))
        except OSError as e:
            raise Err(f"{NOTES}: {e.strerror}")

    def read_note(self, name: str) -> str:
        try:
            with open(_path(name), encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise Err(f"{name}: {e.strerror}")

    def add_note(self, name: str, line: str) -> None:
        try:
            os.makedirs(NOTES, exist_ok=True)
            with open(_path(name), "a", encoding="utf-8") as f:
                f.write(line.rstrip("\n") + "\n")
        except OSError as e:
            raise Err(f"{name}: {e.strerror}")
