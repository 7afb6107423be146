"""Test fixture: Python that loops forever or raises."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def spin(self) -> None:
        n = 0
        while True:
            n += 1

    def raise_error(self, message: str) -> None:
        raise ValueError(message)
