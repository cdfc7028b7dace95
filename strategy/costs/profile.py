"""Profiles: measured task times keyed by (cost key, device kind), as versioned msgpack files.

A cost key is `TaskNode.cost_key`: the launch's cost tag (op type, params, phase) plus
(privilege, part shape, dtype) per requirement. A profile holds

  times   (cost key, device kind) -> Measurement (median seconds of `repeats` timed runs)
  work    cost key -> Work (FLOPs, bytes and kernels of the part; the same on every device), so that
          a profile alone can calibrate the analytic model of its device kind

The file is msgpack (never pickle: profiles are shipped between machines and people):

    {"format": "soapflow-profile", "version": 1, "meta": {...},
     "times": [[key, kind, median_s, repeats, min_s, max_s], ...],
     "work":  [[key, flops, bytes, kernels], ...]}

Keys are nested lists in the file and nested tuples in memory. A path ending in `.json`
gets the same object as JSON for people to read; loading sniffs the content. Profiles merge
(`merge`: the newer measurement of a key wins), so runs on several machines or days add up.
This module owns the format; measuring is profiler.py, using the numbers model.py.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Iterable

import msgpack

FORMAT = "soapflow-profile"
VERSION = 1


class ProfileError(ValueError):
    """A profile file cannot be read or written."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """Median time of one cost key on one device kind, with its spread."""
    seconds: float
    repeats: int = 1
    min_s: float = 0.0
    max_s: float = 0.0

    def __str__(self) -> str:
        return f"{self.seconds * 1e3:.4g} ms (median of {self.repeats})"


@dataclass(frozen=True, slots=True)
class Work:
    """What a part does, independent of the device: FLOPs, bytes of its tensors, kernels."""
    flops: float
    bytes: int
    kernels: int = 0

    def __str__(self) -> str:
        return f"{self.flops / 1e9:.4g} GFLOP, {self.bytes / 1e6:.4g} MB, {self.kernels} kernels"


def device_kind(device: str = "cpu") -> str:
    """The kind a profile measured on torch `device` is filed under: "cpu", or the GPU's
    family as the machine-model presets name it ("H200", "A100", "P100", ...).

        device_kind("cuda:0")   # "H200" on an NVIDIA H200
    """
    if not str(device).startswith("cuda"):
        return "cpu"
    import torch
    return gpu_kind(torch.cuda.get_device_name(torch.device(device)))


_FAMILIES = re.compile(r"\b(GB200|B200|B100|H200|H100|H800|GH200|A100|A800|A40|A30|A10G?|"
                       r"L40S?|L4|V100|T4|P100|P40|P4|K80|K40)\b")


def gpu_kind(name: str) -> str:
    """'NVIDIA H200' -> 'H200', 'Tesla P100-SXM2-16GB' -> 'P100'; a GPU of no known family
    is named by the letters, digits and "_.-" of its name."""
    m = _FAMILIES.search(name.upper())
    if m:
        return m.group(1)
    return "".join(c for c in name if c.isalnum() or c in "_.-") or "cuda"


def canonical_key(key) -> tuple:
    """`key` as nested tuples of str/int/float/bool/None, or ProfileError naming the leaf."""
    if isinstance(key, (tuple, list)):
        return tuple(canonical_key(k) for k in key)
    if key is None or isinstance(key, (str, int, float, bool)):
        return key
    raise ProfileError(f"cost key part {key!r} ({type(key).__name__}) cannot be stored in a "
                       "profile. Cost tags must be built from str, int, float, bool, None and "
                       "tuples of them (Op.cost_tag uses repr() of parameters).")


def _to_tuple(x):
    return tuple(_to_tuple(v) for v in x) if isinstance(x, list) else x


@dataclass
class Profile:
    times: dict[tuple, Measurement] = field(default_factory=dict)   # (key, kind) -> time
    work: dict[tuple, Work] = field(default_factory=dict)            # key -> work
    meta: dict = field(default_factory=dict)
    failures: dict[tuple, str] = field(default_factory=dict)        # key -> error (not saved)

    def get(self, key, kind: str) -> Measurement | None:
        return self.times.get((key, kind))

    def add(self, key, kind: str, m: Measurement, work: Work | None = None) -> None:
        self.times[key, kind] = m
        if work is not None:
            self.work[key] = work

    def kinds(self) -> list[str]:
        return sorted({k for _, k in self.times})

    def keys(self, kind: str | None = None) -> list[tuple]:
        return [k for k, d in self.times if kind is None or d == kind]

    def __len__(self) -> int:
        return len(self.times)

    def merge(self, other: "Profile") -> "Profile":
        """Add `other`'s measurements and work to this profile (other wins on equal keys)."""
        self.times.update(other.times)
        self.work.update(other.work)
        self.failures.update(other.failures)
        for k, v in other.meta.items():
            if k == "runs":
                self.meta["runs"] = list(self.meta.get("runs", [])) + list(v)
            else:
                self.meta[k] = v
        return self

    def summary(self) -> str:
        kinds = ", ".join(f"{k}: {len(self.keys(k))}" for k in self.kinds()) or "none"
        return f"profile: {len(self.times)} measurements ({kinds}), {len(self.work)} work entries"

    # -- files ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        for key, _ in self.times:
            canonical_key(key)
        times = [[list_key(k), kind, m.seconds, m.repeats, m.min_s, m.max_s]
                 for (k, kind), m in self.times.items()]
        work = [[list_key(k), w.flops, w.bytes, w.kernels] for k, w in self.work.items()]
        return {"format": FORMAT, "version": VERSION, "meta": self.meta, "times": times,
                "work": work}

    @staticmethod
    def from_dict(d, where: str = "profile") -> "Profile":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ProfileError(f"{where}: not a soapflow profile (format {got!r}, expected "
                               f"{FORMAT!r}). Give a file written by Profile.save or "
                               "`python -m strategy.costs profile`.")
        v = d.get("version")
        if not isinstance(v, int) or v > VERSION or v < 1:
            raise ProfileError(f"{where}: profile version {v!r} is not supported (this "
                               f"soapflow reads versions 1..{VERSION}). Re-profile, or update "
                               "soapflow to the version that wrote it.")
        p = Profile(meta=dict(d.get("meta") or {}))
        try:
            for i, (key, kind, sec, rep, lo, hi) in enumerate(d.get("times", [])):
                m = Measurement(float(sec), int(rep), float(lo), float(hi))
                if not all(math.isfinite(x) and x >= 0 for x in (m.seconds, m.min_s, m.max_s)):
                    raise ValueError(f"times entry {i} ({key[0] if key else key!r} on {kind}) "
                                     f"has seconds {sec!r}, min {lo!r}, max {hi!r}: times "
                                     "must be finite and not negative")
                p.times[_to_tuple(key), str(kind)] = m
            for i, (key, flops, nbytes, *kernels) in enumerate(d.get("work", [])):
                w = Work(float(flops), int(nbytes), int(kernels[0]) if kernels else 0)
                if not (math.isfinite(w.flops) and w.flops >= 0 and w.bytes >= 0
                        and w.kernels >= 0):
                    raise ValueError(f"work entry {i} has flops {flops!r}, bytes {nbytes!r}: "
                                     "counts must be finite and not negative")
                p.work[_to_tuple(key)] = w
        except (TypeError, ValueError) as e:
            raise ProfileError(f"{where}: malformed profile entry ({e}). The file is damaged; "
                               "re-profile or restore a copy.") from None
        return p

    def save(self, path, merge: bool = False) -> None:
        """Write the profile (JSON if the name ends in .json); with merge, add it to the
        measurements already in `path` (this profile wins on equal keys)."""
        path = os.fspath(path)
        out = self
        if merge and os.path.exists(path):
            out = Profile.load(path).merge(self)
        d = out.to_dict()
        tmp = f"{path}.tmp{os.getpid()}"
        if path.endswith(".json"):
            with open(tmp, "w") as f:
                json.dump(d, f, indent=1)
                f.write("\n")
        else:
            with open(tmp, "wb") as f:
                f.write(msgpack.packb(d, use_bin_type=True))
        os.replace(tmp, path)

    @staticmethod
    def load(path) -> "Profile":
        """Read a profile file (msgpack or JSON, sniffed); ProfileError names a bad file."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ProfileError(f"{path}: cannot read the profile ({e.strerror}).") from None
        if not data:
            raise ProfileError(f"{path}: the profile file is empty. Re-profile (python -m "
                               "strategy.costs profile APP) or copy the file again.")
        try:
            if data.lstrip()[:1] == b"{":
                d = json.loads(data)
            else:
                d = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:       # msgpack raises several types for damaged input
            raise ProfileError(f"{path}: not a readable profile, the file is corrupt or "
                               f"truncated ({type(e).__name__}: {e}). Re-profile or copy the "
                               "file again.") from None
        return Profile.from_dict(d, where=path)


def list_key(key):
    return [list_key(k) for k in key] if isinstance(key, tuple) else key


def merged(profiles: Iterable[Profile]) -> Profile:
    """One profile holding all of `profiles` (later ones win on equal keys)."""
    out = Profile()
    for p in profiles:
        out.merge(p)
    return out
