"""textstats: counts words, lines and characters. A pure tool: no grants needed."""

import wit_world
from wit_world import Stats


class WitWorld(wit_world.WitWorld):
    def stats(self, text: str, top: int | None) -> Stats:
        words = [w.strip(".,;:!?\"'()").lower() for w in text.split()]
        words = [w for w in words if w]
        counts: dict[str, int] = {}
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        # Most frequent first; ties in order of first appearance (dicts keep insertion order).
        common = sorted(counts.items(), key=lambda kv: -kv[1])[: 5 if top is None else top]
        return Stats(
            words=len(words),
            lines=text.count("\n") + (1 if text and not text.endswith("\n") else 0),
            chars=len(text),
            top_words=[w for w, _ in common],
        )
