"""The SOAP search space: the configurations a search may give each operator (paper §5).

A config splits any of an operator's dims (sample, attribute, parameter and reduction alike)
with degrees whose product p is at most the device count, each degree at most its dim's
extent, and places the p parts on p distinct devices. Device lists come in three families:

  block    p consecutive device ids, starting anywhere they fit
  node     p consecutive ids starting at a node boundary: inside one node when p fits in a
           node, else whole nodes (what hierarchical all-reduces like)
  subset   any p distinct devices, in any order

so operation parallelism (an operator on fewer devices than exist, others elsewhere) is part
of the space. `SearchSpace.restricted()` is a small sub-space for exhaustive search:
power-of-two degrees on sample and parameter dims, at most `max_split` dims split at once,
node-aligned blocks only; operators in `frozen` keep their config in any space.

    space = SearchSpace(model, num_devices=16, devices_per_node=4)
    cfg = space.random_config(op, rng)         # uniform degrees, then a device family
    cfg = space.neighbor(op, cfg, rng)         # a small step: one degree x2 or /2, or a move
    for cfg in space.configs(op): ...          # every config (finite spaces: restricted ones)
"""
from __future__ import annotations

import itertools
import random
from math import prod

from parallel_ops.config import ParallelConfig

FAMILIES = ("block", "node", "subset")


def weight_parts(op, weight_dims: set):
    """A key on degree tuples (in op.dims order): how many parts they split weights into."""
    def key(t: tuple) -> int:
        return prod(k for d, k in zip(op.dims, t) if d.name in weight_dims)
    return key


def _weight_dims(op) -> set[str]:
    """The names of the dims that split the operator's weights: from its labels, or, for an
    operator that gives none (its part() computes every rect, e.g. a convolution with halos),
    its parameter and reduction dims."""
    if op.labels is None:
        return {d.name for d in op.dims if d.kind in ("parameter", "reduction")}
    return {name for labels in op.labels.get("weights", ()) for name in labels
            if name is not None}


class SearchSpace:
    def __init__(self, model, num_devices: int, devices_per_node: int | None = None, *,
                 pow2: bool = False, max_split: int | None = None,
                 families=FAMILIES, frozen=(), kinds=None):
        if num_devices < 1:
            raise ValueError(f"SearchSpace: {num_devices} devices; a search needs at least 1")
        unknown = set(families) - set(FAMILIES)
        if unknown or not families:
            raise ValueError(f"SearchSpace: device families {sorted(unknown) or '(none)'}; "
                             f"use some of {FAMILIES}")
        self.model, self.n = model, num_devices
        self.per_node = devices_per_node or num_devices
        self.pow2, self.max_split, self.families = pow2, max_split, tuple(families)
        self.frozen = set(frozen)                  # operators the search leaves alone
        self.kinds = None if kinds is None else tuple(kinds)   # dim kinds it may split
        self._degrees: dict[str, list[tuple[int, ...]]] = {}
        self._regular_space = None
        self._partners: dict | None = None         # see partners()
        self._ops: dict | None = None              # see op()

    @classmethod
    def for_machine(cls, model, machine_model, **kw) -> "SearchSpace":
        return cls(model, machine_model.num_devices, machine_model.devices_per_node, **kw)

    def restricted(self, max_split: int = 1, kinds=("sample", "parameter"),
                   frozen=None) -> "SearchSpace":
        """A small sub-space for exhaustive search (see the module doc): power-of-two
        degrees on at most `max_split` dims of the given kinds, node-aligned blocks."""
        return SearchSpace(self.model, self.n, self.per_node, pow2=True, max_split=max_split,
                           families=("node",), kinds=kinds,
                           frozen=self.frozen if frozen is None else frozen)

    def searchable(self) -> list:
        """The operators a search may change (all but the frozen ones)."""
        return [op for op in self.model.ops if op.name not in self.frozen]

    # -- degrees ----------------------------------------------------------------------------
    def degree_tuples(self, op) -> list[tuple[int, ...]]:
        """Every degree tuple (in op.dims order) this space allows for `op`."""
        got = self._degrees.get(op.name)
        if got is None:
            got = self._degrees[op.name] = self._enumerate_degrees(op)
        return got

    def _enumerate_degrees(self, op) -> list[tuple[int, ...]]:
        out = [()]
        for d in op.dims:
            top = 1 if self.kinds is not None and d.kind not in self.kinds else \
                min(d.max_degree, self.n)
            choices = [k for k in range(1, top + 1) if not self.pow2 or k & (k - 1) == 0]
            out = [t + (k,) for t in out for k in choices if prod(t) * k <= self.n]
        if self.max_split is not None:
            out = [t for t in out if sum(k > 1 for k in t) <= self.max_split]
        return out

    @staticmethod
    def config(op, degrees: tuple[int, ...], devices) -> ParallelConfig:
        named = tuple((d.name, k) for d, k in zip(op.dims, degrees) if k > 1)
        return ParallelConfig(named, tuple(devices))

    # -- devices ----------------------------------------------------------------------------
    def starts(self, p: int, family: str) -> list[int]:
        """First devices of the consecutive lists of length p in `family`."""
        if family == "block":
            return list(range(self.n - p + 1))
        if p <= self.per_node:   # inside one node, at multiples of p from its first device
            return [node + k for node in range(0, self.n, self.per_node)
                    for k in range(0, self.per_node - p + 1, p) if node + k + p <= self.n]
        return list(range(0, self.n - p + 1, self.per_node))

    def device_lists(self, p: int):
        """Every device list of length p in this space's families (without repeats)."""
        seen = set()
        for family in self.families:
            if family == "subset":
                lists = itertools.permutations(range(self.n), p)
            else:
                lists = (tuple(range(s, s + p)) for s in self.starts(p, family))
            for devs in lists:
                if devs not in seen:
                    seen.add(devs)
                    yield devs

    def random_devices(self, p: int, rng: random.Random) -> tuple[int, ...]:
        family = rng.choice(self.families)
        if family == "subset":
            return tuple(rng.sample(range(self.n), p))
        starts = self.starts(p, family) or self.starts(p, "block")
        s = rng.choice(starts)
        return tuple(range(s, s + p))

    # -- configs ----------------------------------------------------------------------------
    def configs(self, op):
        """Every config of `op` in this space (use on restricted spaces: it can be huge)."""
        for t in self.degree_tuples(op):
            for devs in self.device_lists(prod(t)):
                yield self.config(op, t, devs)

    def count(self, op) -> int:
        return sum(1 for _ in self.configs(op))

    def random_config(self, op, rng: random.Random) -> ParallelConfig:
        """A uniformly drawn degree tuple on devices of a uniformly drawn family."""
        t = rng.choice(self.degree_tuples(op))
        return self.config(op, t, self.random_devices(prod(t), rng))

    def neighbor(self, op, cfg: ParallelConfig, rng: random.Random) -> ParallelConfig:
        """A small step from `cfg`: double or halve one dim's degree (devices extended or
        cut at the end where they can be, else redrawn), or the same degrees elsewhere."""
        current = tuple(cfg.degree(d.name) for d in op.dims)
        allowed = set(self.degree_tuples(op))
        steps = []
        for i in range(len(op.dims)):
            for k in (current[i] * 2, current[i] // 2):
                t = current[:i] + (k,) + current[i + 1:]
                if k >= 1 and t != current and t in allowed:
                    steps.append(t)
        if not steps or rng.random() < 0.25:
            return self.config(op, current, self.random_devices(prod(current), rng))
        t = rng.choice(steps)
        p, devs = prod(t), list(cfg.devices)
        if p < len(devs):
            devs = devs[:p]
        else:
            spare = [d for d in range(devs[-1] + 1, self.n) if d not in devs] + \
                    [d for d in range(self.n) if d not in devs]
            devs = devs + spare[:p - len(devs)]
        if not self.has_devices(devs):
            devs = list(self.random_devices(p, rng))
        return self.config(op, t, devs)

    def has_devices(self, devs) -> bool:
        """Whether the device list `devs` is one of this space's families' lists."""
        devs, p = tuple(devs), len(devs)
        if "subset" in self.families:
            return len(set(devs)) == p and all(0 <= d < self.n for d in devs)
        if devs != tuple(range(devs[0], devs[0] + p)) or devs[-1] >= self.n or devs[0] < 0:
            return False
        return "block" in self.families or devs[0] in self.starts(p, "node")

    def shard(self, op, cfg: ParallelConfig, rng: random.Random) -> ParallelConfig | None:
        """A step that splits the operator's weights finer (fewer bytes on each of its
        devices): one dim that splits a weight (a parameter or reduction dim) gets its degree
        times 2, 4, ... up to the devices per node, and where the parts would then outnumber
        the devices the sample degree is cut to make room (Megatron's trade of data for
        tensor parallelism). Same devices, cut or extended at the end. None when no dim can
        be split further."""
        weight_dims = _weight_dims(op)
        current = tuple(cfg.degree(d.name) for d in op.dims)
        sample = next((i for i, d in enumerate(op.dims) if d.kind == "sample"), None)
        allowed = set(self.degree_tuples(op))
        options = []
        for i, d in enumerate(op.dims):
            if d.name not in weight_dims or d.kind == "sample":
                continue
            f = 2
            while f <= max(self.per_node, 2):
                t = list(current)
                t[i] *= f
                if prod(t) > self.n and sample is not None:
                    t[sample] = max(1, self.n // (prod(t) // t[sample]))
                t = tuple(t)
                if t in allowed and t != current:
                    options.append(t)
                f *= 2
        if not options:
            return None
        # half the time the largest split: a model far over memory needs most weights
        # split by a node's worth of devices, in as few accepted steps as may be
        t = max(options, key=weight_parts(op, weight_dims)) if rng.random() < 0.5 \
            else rng.choice(options)
        p, devs = prod(t), list(cfg.devices)
        if p <= len(devs):
            devs = devs[:p]
        else:
            devs += [d for d in range(self.n) if d not in devs][:p - len(devs)]
        return self.config(op, t, devs)

    def propose(self, rng: random.Random, configs) -> tuple[str, ParallelConfig]:
        """One proposal: a uniformly chosen operator and a new config for it: a uniformly
        random one (40%), a neighbor of its current one (40%), or a random one of the
        restricted space's regular configs (20%: power-of-two splits of the sample or a
        parameter dim on node-aligned blocks, the configs experts write by hand, which a
        uniform draw over the whole space rarely hits)."""
        ops = self.searchable()
        if not ops:
            raise ValueError("SearchSpace: every operator is frozen; nothing to search")
        regular = self._regular()
        for _ in range(100):
            op = self.draw_op(rng, ops)
            cur = configs[op.name]
            r = rng.random()
            if r < 0.4:
                new = self.random_config(op, rng)
            elif r < 0.8:
                new = self.neighbor(op, cur, rng)
            else:
                new = regular.random_config(op, rng)
            if new != cur:
                return op.name, new
        return op.name, new

    def op(self, name: str):
        """The model's operator of that name."""
        if self._ops is None:
            self._ops = {op.name: op for op in self.model.ops}
        return self._ops[name]

    def partners(self, op) -> list:
        """The searchable operators next to `op` in the dataflow: its producers and
        consumers, looking through frozen operators (a convolution's partner past a frozen
        relu and pool is the next convolution), in model order."""
        if self._partners is None:
            made, used = {}, {}
            for o in self.model.ops:
                for t in o.outputs:
                    made[t.name] = o
                for t in o.inputs:
                    used.setdefault(t.name, []).append(o)
            frozen = self.frozen
            links: dict[str, set[str]] = {}
            for o in self.model.ops:
                if o.name in frozen:
                    continue
                seen, todo = {o.name}, [o]
                while todo:             # consumers, through frozen ones
                    for t in todo.pop().outputs:
                        for c in used.get(t.name, ()):
                            if c.name not in seen:
                                seen.add(c.name)
                                if c.name in frozen:
                                    todo.append(c)
                                else:
                                    links.setdefault(o.name, set()).add(c.name)
                                    links.setdefault(c.name, set()).add(o.name)
            order = {o.name: k for k, o in enumerate(self.model.ops)}
            ops = {o.name: o for o in self.model.ops}
            self._partners = {name: [ops[n] for n in sorted(near, key=order.get)]
                              for name, near in links.items()}
        return self._partners.get(op.name, [])

    def match(self, op, cfg: ParallelConfig, like) -> ParallelConfig | None:
        """A config of `op` like `cfg` of operator `like`: on the same devices, with the
        same sample degree, the other parts on dims of the same names where `op` has them
        (the most such dims; the first such tuple in the space); None when this space has
        no such config."""
        if not self.has_devices(cfg.devices):
            return None
        sample = {d.name for d in like.dims if d.kind == "sample"}
        n = max((cfg.degree(name) for name in sample), default=1)
        p, best, score = len(cfg.devices), None, -1
        for t in self.degree_tuples(op):
            if prod(t) != p:
                continue
            if any(d.kind == "sample" and k != n for d, k in zip(op.dims, t)):
                continue
            same = sum(k == cfg.degree(d.name) for d, k in zip(op.dims, t))
            if same > score:
                best, score = t, same
        return None if best is None else self.config(op, best, cfg.devices)

    def draw_op(self, rng: random.Random, ops: list):
        """The operator a proposal changes: uniformly drawn (a subclass may weigh them:
        strategy/moves.py GuidedSpace)."""
        return rng.choice(ops)

    def _regular(self) -> "SearchSpace":
        if self._regular_space is None:
            self._regular_space = self if self.families == ("node",) and self.pow2 else \
                self.restricted()
        return self._regular_space
