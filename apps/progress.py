"""Progress bars for the phases of a run that can take more than a few seconds (building a
graph, simulating it, writing a checkpoint): tqdm on rank 0's terminal, nothing when the
output is not a terminal (logs, pipes, tests) or with --quiet.

    bar = progress_bar(out, quiet, "graph", total=len(launches), unit="launch")
    for launch in counted(launches, bar): ...
    bar.close()
    with elapsed(out, quiet, "simulating"):     # no steps to count: the time it has taken
        ...
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import contextmanager


class _NoBar:
    """What progress_bar returns when no bar is shown."""

    def update(self, n: int = 1) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


def shows_progress(out, quiet: bool) -> bool:
    """Whether a bar would show on `out`: a terminal, and not --quiet."""
    isatty = getattr(out, "isatty", None)
    return out is not None and not quiet and isatty is not None and bool(isatty())


def progress_bar(out, quiet: bool, desc: str, total: int | None = None, unit: str = "it",
                 unit_scale: bool = False, bar_format: str | None = None):
    """A tqdm bar on `out`, or an object with the same update/close that shows nothing."""
    if not shows_progress(out, quiet):
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=out,
                leave=False, dynamic_ncols=True, mininterval=0.5, bar_format=bar_format)


class counted(Sequence):
    """`items` as a sequence that advances `bar` as iteration passes each item."""

    def __init__(self, items: Sequence, bar):
        self.items, self.bar = items, bar

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        for x in self.items:
            yield x
            self.bar.update(1)


@contextmanager
def elapsed(out, quiet: bool, desc: str, every_s: float = 0.5):
    """A bar showing the seconds a phase without countable steps has taken so far."""
    bar = progress_bar(out, quiet, desc, bar_format="{desc} ... {elapsed}")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every_s):
            bar.refresh()
    ticker = None if isinstance(bar, _NoBar) else threading.Thread(target=tick, daemon=True)
    if ticker is not None:
        ticker.start()
    try:
        yield
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()
        bar.close()


def bytes_progress(bar):
    """A checkpoint write's progress(done, total) callback that advances a bytes bar."""
    state = {"done": 0}

    def progress(done: int, total: int) -> None:
        if (getattr(bar, "total", None) != total or done < state["done"]) and \
                hasattr(bar, "reset"):             # a new file (or a retried write)
            bar.reset(total=total)
            state["done"] = 0
        bar.update(done - state["done"])
        state["done"] = done
    return progress
