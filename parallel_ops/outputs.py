"""Files a run writes for the user (strategy exports, traces, checkpoints): checked before
the work that fills them (`output_problem`), and written so that a write that still fails at
the end keeps the result (`write_keeping`: the working directory, then the temporary
directory) instead of losing minutes of search or training.

    problem = output_problem("out/s.json")                  # None, or what is wrong and a fix
    where, note = write_keeping("out/s.json", lambda p: save(p, ...))
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable


def _nearest_existing(path: str) -> str:
    d = os.path.abspath(path)
    while not os.path.exists(d):
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return d


def output_problem(path: str, directory: bool = False) -> str | None:
    """Why `path` cannot be written (a file, or with `directory` a folder that may still have
    to be created with its parents), or None when it can."""
    if directory:
        if os.path.exists(path) and not os.path.isdir(path):
            return f"{path} is a file, not a directory. Name a directory (it is created)."
        base = _nearest_existing(path)
        if not os.path.isdir(base):
            return f"{base} is a file, so the directory {path} cannot be created there."
        if not os.access(base, os.W_OK | os.X_OK):
            return f"no permission to write in {base}. Choose another directory."
        return None
    if os.path.isdir(path):
        return f"{path} is a directory. Give a file name (e.g. {os.path.join(path, 'out')})."
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return (f"the directory {os.path.dirname(path) or parent} does not exist. Create it "
                "first, or write somewhere else.")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{path} exists and is read-only. Choose another name."
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"no permission to write in {parent}. Choose another directory."
    return None


def write_keeping(path: str, write: Callable[[str], None]) -> tuple[str, str | None]:
    """Write with `write(path)`; when that fails, write the same to the working directory,
    then to the temporary directory, under the same file name. Returns (the path written, a
    note saying what failed and where it went instead, or None). Raises OSError only when
    every place failed."""
    name = os.path.basename(path) or "output"
    places = [path, os.path.join(os.getcwd(), name), os.path.join(tempfile.gettempdir(), name)]
    errors = []
    for place in dict.fromkeys(places):
        try:
            write(place)
        except OSError as e:
            errors.append(f"{place}: {e.strerror or e}")
            continue
        if place == path:
            return place, None
        return place, f"could not write {path} ({errors[0].split(': ', 1)[1]}); written to " \
                      f"{place} instead"
    raise OSError("could not write the output anywhere: " + "; ".join(errors))
