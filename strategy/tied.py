"""The search for a model of identical blocks (a GPT's transformer blocks) on proxies of a
few blocks, each block's configuration tied to the others, extrapolated to the full depth.

A session build or simulation of a full-depth GPT costs minutes at 64-256 devices (7.5B on
128 GPUs: ~300 s of CPU), so an MCMC over the whole graph makes almost no proposals in a
10-minute budget. Its blocks are identical, and a strategy that treats them alike (as
Megatron-LM's does) is described by one block's configs plus those of the operators
outside the blocks (embeddings, final layernorm, output layer, loss). So the search runs on
proxies with the full model's widths, batch and machine and a few blocks:

- The chain's model is the smallest proxy (e.g. 1 block): its operators are the kinds (one
  per operator of a block, and each operator outside the blocks), so a proposal, a random
  start, a memory move and a recomputation switch (for the GPT: none / selective / full,
  the same in every block) are about a kind.
- Each state is simulated on two proxies of a < b blocks at once (`TiedSession`: the
  chain's model and a deeper one in which every block takes the configs and recomputation
  of the chain's block: one change of a kind is a delta change of its operator in every
  block). What the search ranks is the full depth L extrapolated linearly from the two:
  v(L) = v_b + (L - b) (v_b - v_a) / (b - a), for the iteration time and for every
  device's peak memory, and the memory rule (a strategy over a device's capacity is
  invalid) is applied to the extrapolated peaks. Blocks being identical, each block adds
  the same bytes to the peak and the same time to the iteration; tests/strategy/
  test_tied_search.py holds the extrapolation against full-depth simulations.
- The result is expanded to the full model (`expand`: every block's operator takes its
  kind's config, the recomputation every block's), its recomputation left set on the model.
  Its predicted time and peak memory are the extrapolation: simulate the full-depth strategy
  once to check it (bench/llm.py does, beside Megatron-LM's full-depth simulation).

strategy/search.py runs the chain unchanged, with sessions made by `TiedSessions`
(Search's `session_factory`).

    res = search_tied(model, mm, costs, proxy=lambda k: gpt_with_k_blocks(k),
                      block_of=block_of, recompute=search_plans, budget_s=600)
"""
from __future__ import annotations

from dataclasses import dataclass

from parallel_ops.recompute import segments_of, set_recompute

from .delta import SimulationSession
from .moves import GuidedSpace
from .search import Search, SearchResult
from .simulator import SimResult
from .space import SearchSpace

DEPTHS = (1, 2)      # the proxies' numbers of blocks: the chain's and the deeper one


def kinds(model, block_of) -> dict:
    """{op name: (its block or None, its kind)}: an operator of block 'h3' named 'h3/attn'
    is of kind 'attn'; one outside the blocks is its own kind (its name)."""
    out = {}
    for op in model.ops:
        block = block_of(op)
        if block is None:
            out[op.name] = (None, op.name)
        elif not op.name.startswith(block + "/"):
            raise ValueError(f"tied search: operator '{op.name}' is in block '{block}' but "
                             f"its name does not start with '{block}/'; name a block's "
                             "operators '<block>/<kind>' so blocks can be matched.")
        else:
            out[op.name] = (block, op.name[len(block) + 1:])
    return out


def depth(model, block_of) -> int:
    """How many blocks `model` has."""
    return len({b for b, _ in kinds(model, block_of).values() if b is not None})


def expand(configs: dict, source, target, block_of) -> dict:
    """Configs of `source`'s operators as configs of `target`'s: each of `target`'s
    operators takes the config its kind has in `configs` (module doc). Raises ValueError for
    a kind `configs` does not give (the models are not of the same blocks)."""
    by_kind = {kind: configs[name] for name, (_, kind) in kinds(source, block_of).items()
               if name in configs}
    out = {}
    for name, (_, kind) in kinds(target, block_of).items():
        if kind not in by_kind:
            raise ValueError(f"tied search: no config for '{name}' (kind '{kind}'); the "
                             "proxy and the full model must have the same kinds of "
                             "operators.")
        out[name] = by_kind[kind]
    return out


def expand_segments(segments: list, source, target, block_of) -> list[list[str]]:
    """Recomputation segments of `source` as `target`'s: a segment inside a block becomes
    that segment in every block of `target`, one outside the blocks stays itself."""
    of_source, of_target = kinds(source, block_of), kinds(target, block_of)
    blocks: dict = {}
    for name, (block, kind) in of_target.items():
        blocks.setdefault(block, {})[kind] = name
    out = []
    for seg in segments:
        owners = {of_source[name][0] for name in seg}
        seg_kinds = [of_source[name][1] for name in seg]
        if owners == {None}:
            out.append(list(seg))
        elif None in owners or len(owners) > 1:
            raise ValueError(f"tied search: recomputation segment {seg} spans blocks or "
                             "leaves one; a tied segment lies inside one block.")
        else:
            out += [[names[k] for k in seg_kinds] for b, names in blocks.items()
                    if b is not None]
    return out


def extrapolate(v_a: float, v_b: float, a: int, b: int, full: int) -> float:
    """The value at depth `full` on the line through (a, v_a) and (b, v_b)."""
    return v_b + (full - b) * (v_b - v_a) / (b - a)


@dataclass
class ExtrapolatedResult(SimResult):
    """A SimResult at the full depth, extrapolated from two proxies (module doc). start,
    end and run are the chain's proxy's (they index its graph); makespan, busy, memory and
    over_capacity are the full depth's."""
    span_s: float = 0.0

    @property
    def span(self) -> float:
        return self.span_s


def extrapolated_result(small: SimResult, deep: SimResult, a: int, b: int, full: int,
                        machine_model) -> ExtrapolatedResult:
    """The full depth's result from the proxies' of a and b blocks."""
    memory = {d: int(round(extrapolate(small.memory.get(d, 0), m, a, b, full)))
              for d, m in deep.memory.items()}
    over = {d: m - machine_model.device(d).memory_capacity for d, m in memory.items()
            if m > machine_model.device(d).memory_capacity}
    span = extrapolate(small.span, deep.span, a, b, full)
    busy = {k: extrapolate(small.busy.get(k, 0.0), v, a, b, full)
            for k, v in deep.busy.items()}
    return ExtrapolatedResult(float("inf") if over else span, small.start, small.end, busy,
                              memory, over, small.run, span_s=span)


class TiedSession:
    """A state of the tied search: the chain's proxy (`small`, the model searched) and a
    deeper one (`deep`) whose blocks all take the small one's configs and recomputation,
    simulated together; `result` is the full depth's extrapolation. Quacks like
    SimulationSession for strategy/search.py and strategy/moves.py (configs, change, undo;
    model, lowering, planner and graph are the chain's proxy's)."""

    def __init__(self, model, deep, full: int, block_of, machine_model, costs,
                 strategy=None, optimizer=None):
        self.block_of, self.full = block_of, full
        self.a, self.b = depth(model, block_of), depth(deep, block_of)
        if not 0 < self.a < self.b:
            raise ValueError(f"tied search: proxies of {self.a} and {self.b} blocks; the "
                             "deeper one needs more blocks than the searched one, which "
                             "needs at least one.")
        self.deep_segments = expand_segments(segments_of(model), model, deep, block_of)
        set_recompute(deep, self.deep_segments)
        self.small = SimulationSession(model, machine_model, costs, strategy, optimizer)
        self.deep = SimulationSession(deep, machine_model, costs,
                                      expand(self.small.configs, model, deep, block_of),
                                      optimizer)
        self.machine_model = machine_model
        self.members = {}       # small's op name -> the deep proxy's ops of its kind
        by_kind = {kind: name for name, (_, kind) in kinds(model, block_of).items()}
        for name, (_, kind) in kinds(deep, block_of).items():
            self.members.setdefault(by_kind[kind], []).append(name)
        self._undo: list | None = None
        self.result = self._result()
        # how many of the full model's operators each of the chain's stands for: a block's
        # operator the full depth's blocks (shard_move weighs its bytes by it)
        self.multiplicity = {name: full if block is not None else 1
                             for name, (block, _) in kinds(model, block_of).items()}

    model = property(lambda self: self.small.model)
    lowering = property(lambda self: self.small.lowering)
    planner = property(lambda self: self.small.planner)
    graph = property(lambda self: self.small.graph)
    configs = property(lambda self: self.small.configs)

    def _result(self) -> ExtrapolatedResult:
        return extrapolated_result(self.small.result, self.deep.result, self.a, self.b,
                                   self.full, self.machine_model)

    def change(self, op_name: str, config) -> SimResult:
        """Give a kind (the chain's operator `op_name`) another config in every block of
        both proxies; `undo()` takes it back. On an error both proxies are as before."""
        done = []           # (session, op name, config before), in order
        self._undo = None
        # the deep proxy is shared by the sessions of a search: its recomputation is this one's
        set_recompute(self.deep.model, self.deep_segments)
        try:
            for session, name in [(self.small, op_name)] + [
                    (self.deep, n) for n in self.members[op_name]]:
                old = session.configs[name]
                session.change(name, config)
                done.append((session, name, old))
        except BaseException:
            self._take_back(done)
            raise
        self._undo = done
        self.result = self._result()
        return self.result

    def undo(self) -> SimResult:
        """Take back the last change() in both proxies."""
        if self._undo is None:
            raise ValueError("TiedSession.undo: no change to take back (one level).")
        done, self._undo = self._undo, None
        self._take_back(done)
        self.result = self._result()
        return self.result

    @staticmethod
    def _take_back(done: list) -> None:
        """Undo changes made in order: a session's last one by its undo(), earlier ones of
        the same session by a change back (a session keeps one level of undo)."""
        last = {}
        for k, (session, _, _) in enumerate(done):
            last[id(session)] = k
        for k in range(len(done) - 1, -1, -1):
            session, name, old = done[k]
            if last[id(session)] == k:
                session.undo()
            else:
                session.change(name, old)


class TiedSessions:
    """Search's session_factory for the tied search: TiedSession of the chain's model with
    `deep` (the deeper proxy), extrapolated to `full` blocks."""

    def __init__(self, deep, full: int, block_of):
        self.deep, self.full, self.block_of = deep, full, block_of

    def __call__(self, model, machine_model, costs, strategy=None, optimizer=None):
        return TiedSession(model, self.deep, self.full, self.block_of, machine_model, costs,
                           strategy, optimizer)


def restrict(configs: dict | None, model) -> dict | None:
    """Configs of a full-depth strategy (an expert's, a file's) for the chain's proxy: its
    operators' own (for a block, the first block's)."""
    if configs is None:
        return None
    names = {op.name for op in model.ops}
    return {name: cfg for name, cfg in configs.items() if name in names}


def regular_space(model, machine_model, block_of=None, full: int = 1) -> SearchSpace:
    """The tied search's default space (module doc): power-of-two degrees on at most two
    dims of any kind, on node-aligned blocks of devices, with trades and alignments among
    its proposals (strategy/moves.py GuidedSpace); with `block_of`, a block's operator is
    proposed sqrt(`full`) times as often as one outside the blocks (it stands for `full`
    operators of the model; the 6 outside them would otherwise take nearly half the
    proposals of a GPT)."""
    weights = {} if block_of is None else {
        name: full ** 0.5 for name, (block, _) in kinds(model, block_of).items()
        if block is not None}
    return GuidedSpace.for_machine(model, machine_model, pow2=True, families=("node",),
                                   max_split=2, op_weights=weights)


def search_tied(model, machine_model, costs, *, proxy, block_of, depths=DEPTHS,
                recompute=None, expert: dict | None = None, starts: dict | None = None,
                budget_s: float | None = None, proposals: int | None = None,
                space: str = "regular", **kw) -> SearchResult:
    """Search `model` (blocks found by `block_of(op)`) on proxies `proxy(k)` of k blocks for
    k in `depths` (module doc); `recompute(model)` gives the named recomputation plans of a
    model (apps/gpt.py search_plans); `space` "regular" (`regular_space`) or "full" (every
    SOAP config, strategy/space.py). Other knobs as strategy.search.search. The result's
    configs and recomputation are the full model's (the recomputation set on it); its
    predicted time and peak memory the extrapolation to the full depth."""
    if space not in ("regular", "full"):
        raise ValueError(f"search_tied: space '{space}'; use 'regular' or 'full'.")
    a, b = depths
    full = depth(model, block_of)
    if not 0 < a < b or full < b:
        raise ValueError(f"search_tied: depths {depths} for a model of {full} blocks; use "
                         "0 < a < b <= the model's blocks.")
    small, deep = proxy(a), proxy(b)
    if depth(small, block_of) != a or depth(deep, block_of) != b:
        raise ValueError(f"search_tied: proxy({a}) and proxy({b}) have "
                         f"{depth(small, block_of)} and {depth(deep, block_of)} blocks; "
                         "proxy(k) must build the model with k blocks.")
    plans = recompute(small) if recompute is not None else None
    res = Search(small, machine_model, costs, expert=restrict(expert, small),
                 space=regular_space(small, machine_model, block_of, full)
                 if space == "regular" else None,
                 starts={k: restrict(v, small) for k, v in (starts or {}).items()},
                 recompute=plans, session_factory=TiedSessions(deep, full, block_of),
                 **kw).run(budget_s, proposals)
    res.configs = expand(res.configs, small, model, block_of)
    res.baseline_configs = expand(res.baseline_configs, small, model, block_of)
    if plans is not None:
        res.recompute_segments = expand_segments(res.recompute_segments, small, model,
                                                 block_of)
        set_recompute(model, res.recompute_segments)
    return res


__all__ = ["DEPTHS", "kinds", "regular_space", "depth", "expand", "expand_segments", "extrapolate",
           "ExtrapolatedResult", "TiedSession", "TiedSessions", "restrict", "search_tied"]
