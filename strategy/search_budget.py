"""A search's budget (strategy/search.py): what is left of its seconds and proposals, shared
out evenly among the candidates still to search. The clock is the search's (a test drives
it)."""
from __future__ import annotations

import math
import time


class Budget:
    """What is left of a search's time and proposals, shared out among candidates."""

    def __init__(self, seconds: float | None, proposals: int | None, clock=time.perf_counter):
        if seconds is None and proposals is None:
            raise ValueError("search: give a budget in seconds, in proposals, or both")
        if (seconds is not None and seconds <= 0) or (proposals is not None and proposals < 1):
            raise ValueError(f"search: budget {seconds} s / {proposals} proposals; "
                             "use a positive time or proposal count")
        self._clock = clock
        self.t0, self.cpu0 = clock(), time.process_time()
        self.seconds, self.proposals, self.used = seconds, proposals, 0

    def share(self, candidates_left: int) -> tuple[float, float]:
        """(seconds, proposals) for the next candidate: an even share of what is left."""
        secs = props = math.inf
        if self.seconds is not None:
            secs = max(0.0, self.seconds - (self._clock() - self.t0)) / candidates_left
        if self.proposals is not None:
            props = max(0, self.proposals - self.used) / candidates_left
        return secs, props

    def left(self) -> float:
        """Seconds left (infinite for a budget of proposals only)."""
        if self.seconds is None:
            return math.inf
        return self.seconds - (self._clock() - self.t0)

    def exhausted(self) -> bool:
        return ((self.seconds is not None and self._clock() - self.t0 >= self.seconds)
                or (self.proposals is not None and self.used >= self.proposals))
