"""MCMC strategy search (paper §6): Metropolis-Hastings over strategies, delta-simulated.

The cost of a strategy is its simulated iteration time on a machine model. Each proposal
gives one operator another config (strategy/space.py SearchSpace.propose: 40% uniformly
random, 40% a neighbor of its config, 20% a regular config of the restricted space), and
in memory PAIR_MOVE of them give it, matched, to a dataflow neighbour too (strategy/moves.py
pair_move); EXCHANGE_MOVE of them instead make two groups of operators trade devices
(moves.py exchange_move: the operators on one operator's device set and those on another
list of the space swap places, or two operators' device sets of any sizes, or every
operator's devices renamed at once; one change_all). strategy/delta.py re-simulates only what
changed (a rejected pair: the second change undone, the first changed back). A proposal that is
`cost(new) - cost(cur)` slower is accepted with probability exp(-beta * that); rejected ones
are undone (SimulationSession.undo: the planner's saved state and node groups are put back,
nothing is re-planned or re-simulated). With delta=False every proposal (and undo) is a rebuild and
full simulation instead: the same chain, for measuring what delta saves.

Garbage collection. Every change allocates a graph's worth of long-lived objects, which sets
off full collections of the whole heap many times per proposal (a tenth of the search time).
The search runs with the collector paused (taskrt/gcpause.py); a chain freezes the heap once
its session is built (gc.freeze: torch, the model and the session's ~1M objects), and the
search freezes it again every GC_EVERY simulated proposals: what survives (accepted graphs,
the planner's remembered region plans) is never walked again (before, those objects took 50
of 271 CPU s of an 800-proposal search of Inception-v3 @16 under the profiler). A collection
walks what was made since the last freeze, so its cost is proportional to the simulations
since then, not to the garbage: so a due collection walks a short window only: the heap is
frozen when it is due and collected GC_WINDOW simulations later (then frozen again). NMT @16
keeps ~45-125k new tracked objects a simulation (at one collection: 62% tuples, 16% sets,
then the new plans' copy nodes, reduce inputs and rects): a collection of GC_EVERY
simulations walked 1.4-4M objects in 0.7-2.2 s, 10% of a 150-proposal search; one of
GC_WINDOW walks ~0.25-0.5M in ~0.26 s. It comes every GC_EVERY simulations at first, and
twice as long after each collection that found little garbage (under GC_LITTLE objects in
its window; at most GC_EVERY_MOST apart). Cycles made outside the windows are frozen with
the rest: a collection samples the garbage rate, it does not free all of it (nor did it
when it walked GC_EVERY of up to GC_EVERY_MOST simulations). What is frozen and dies
later (a chain's session, a plan the memo drops) only reference counting frees: those
structures must hold no reference cycle (docs/design.md;
tests/strategy/test_session_cycles.py). Measured
(2026-12-02): the exhaustive check's models leave no garbage at all, Inception-v3 @16 300-500
objects per 32 proposals (torch's pytree closures, a few bytes each); 2026-12-05:
Inception-v3 @16 0-15 per 32 simulations, NMT @16 126-168 per window of GC_WINDOW.

Known strategies. The simulation is deterministic, so the search remembers the cost of
every strategy it has simulated (keyed by the XOR of its (operator, config) hashes and the
recomputation state: one change is two XORs). A proposal of a known strategy is decided by
the same Metropolis rule from the remembered cost, and only simulated when accepted (the
session must move there): the chain is the one that simulates every proposal, with fewer
simulations. A chain sitting in a local optimum proposes the same few neighbours again and
again: on LeNet's exhaustive check 35-40% of 1,000 proposals are known. `simulated` in the
result counts the proposals that were simulated.

Temperature. The paper gives no beta, and a constant per millisecond means something else on
every model and machine. A proposal changes one operator, which moves the iteration time by
about 1/n of it (n searchable operators), so the temperature is a fraction of that share:
beta = n / (temperature * cost of the first candidate). With the default temperature 0.01 a
proposal slower by 1%/n of the starting point's time is accepted with probability 1/e (LeNet,
4 operators: 0.25%; Inception-v3, 221: 0.0045%). (Before 2026-12-02 beta was n times smaller:
on Inception-v3 --small @4, 265 of 322 uphill proposals were under 0.1% of the time and 95% of
all proposals were accepted, a random walk; 600 proposals, seeds 0 and 1, found 51.4 ms there
and 46.3 / 45.7 ms at the temperature of today.)

Memory is a hard constraint: a strategy that does not fit is never a result (its predicted
time is infinite). So that a chain that starts out of memory (data parallelism of a model
whose weights and Adam state do not fit one device) can find its way into memory, the chain
itself ranks such a strategy by `ranked`: OVER_MEMORY_RANK seconds times one plus its bytes
over capacity as a fraction of all devices' memory, plus its time without the memory rule:
every step that frees memory is a step down whatever it does to the time (time breaks ties),
and every strategy that fits ranks below every one that does not. Out of memory a chain
accepts only steps that are not up, and most of its proposals (MEMORY_MOVE) are aimed at
the memory (strategy/memory_moves.py: split an operator's weights finer, or give one and
its neighbours data parallelism where activations fill the fullest device); once in memory
it is MCMC again.

Memory last. A strategy's rank is never below its span (when its last node ends), and
the chance that the Metropolis rule takes a step up only falls as the step grows; so an
in-memory chain times a delta proposal first (SimulationSession.change_timed) and, when
its span is above the current rank, makes the rule's draw: if the draw rejects the span,
it rejects any rank at or above it, and the change is undone without its memory peak;
else the peak is computed (complete()) and the same draw decides on the rank. Such a
proposal is remembered by its span, a lower bound, and decided the same way when proposed
again (simulated again only when the bound does not decide it). The draws, decisions and
chain are those of a search that computes every peak (tests/strategy/test_memory_last.py);
Inception-v3 @16 skips the peak for about half its proposals.

Recomputation. With `recompute` (named plans of activation-recomputation segments,
parallel_ops/recompute.py, e.g. {"none": [], "full": one segment per block}), each candidate
is simulated under every plan and its chain starts under the best one (the fastest that
fits). Then recomputation is part of the chain's state: a proposal (probability
`recompute_move`, by default one over the number of operators, at most RECOMPUTE_MOVE)
switches one segment (strategy/moves.py RecomputeUnits: the plans'
distinct segments, for the GPT one per block and one per attention operator; switching one
on switches off those sharing an operator with it) on or off, accepted or rejected like any
other. Such a move changes which launches exist, which a delta change cannot: the proposal
builds a new session of the same configs under the new segments (a full simulation; the
old session is kept and is the undo), so it costs a session build. Out of memory the
segment switched on is the one that frees the most bytes on the fullest device (its
operators' activations and saved state: RecomputeUnits.target).
The result names the state (a plan's name, or which segments are on) and leaves it set on
the model, so the model trains with what was searched.

Time budget. A session build (a candidate, a restart, a recomputation move) is a full
plan and simulation, which for a large model takes longer than hundreds of proposals
(GPT 1.7B on 32 GPUs: ~10 s of CPU, a proposal ~0.16 s); the budget is checked between
proposals, so the search also keeps the longest build it has seen and starts no build that
would not end before the budget does: a later candidate, another recomputation plan of a
candidate, a restart or a recomputation move is skipped instead (`skipped` in the result
says what was). The first candidate's first session is always built, so a search takes at
least one build. (A 150 s search of GPT 1.7B on 32 GPUs ran 585 s before this rule.)

Session builds. A chain after the first starts from the last chain's session, changed
operator by operator to its start (`_reach`: every change a delta simulation), when that
many changes cost less CPU time than a session build by the means measured so far (a
restart from the best differs from the last chain's end in a few operators; on the
exhaustive check's models a build costs as much as 6-10 changes); otherwise, and with
recomputation, a new session is built. With too little budget left for a build, a restart
from the best is still made where it can be reached so (`_can_reach`).

Candidates. The search starts from data parallelism, then the expert strategy when one is
given, then any other named `starts` (a strategy file), then `random_starts` random ones,
and searches each in turn with an even share of what is left of the budget (time in seconds
and/or number of proposals). A candidate stops when its share is spent or, as in the paper,
when its best has not improved for half of the time (or proposals) it has used; under a
budget of proposals alone, half of the proposals only, so that the seed alone decides the
search (a stalled machine stops nothing early). The result is the best strategy seen over
all candidates, so it is never slower in simulation than data parallelism (it starts there).
Budget left after every candidate has stopped goes to restarts: from the best strategy so
far with the temperature divided by 4 at each such restart, alternating with new random
strategies. With restarts=False the search ends once every candidate has stopped (the
paper's end-to-end search time, as in its Table 5).

    result = search(model, machine_model, costs, budget_s=30, seed=0, expert=expert_configs)
    result.configs, result.predicted, result.speedup("data_parallel")
"""
from __future__ import annotations

import gc
import math
import random
import time

from parallel_ops.errors import ConfigError
from parallel_ops.lowering import resolve_configs
from parallel_ops.recompute import set_recompute
from taskrt.errors import PlanError
from taskrt.gcpause import gc_paused

from .delta import SimulationSession
from .explain import Breakdown
from .memory_moves import memory_move
from .moves import RecomputeUnits, exchange_move, pair_move
from .search_budget import Budget
from .search_changes import SessionChanges
from .search_result import CandidateRun, SearchResult
from .space import SearchSpace

DEFAULT_TEMPERATURE = 0.01
MEMORY_MOVE = 0.75           # share of an out-of-memory chain's proposals aimed at memory
RECOMPUTE_MOVE = 0.05        # the most a default chain gives to switching recomputation
OVER_MEMORY_RANK = 1e6       # seconds; see `ranked`
_clock = time.perf_counter   # the search's clock (a test drives it)
GC_EVERY = 32                # simulations between freezes of the heap (module doc) ...
GC_EVERY_MOST = 1024         # ... and between collections, at most this many
GC_WINDOW = 4                # simulations a collection walks: made since the freeze before it
GC_LITTLE = 125              # a collection that found fewer objects found little garbage
#                              (1,000 per GC_EVERY simulations when it walked as many)
PAIR_MOVE = 0.3             # share of proposals that also give a partner a matching config
EXCHANGE_MOVE = 0.1          # share of in-memory proposals where two groups trade devices
MIN_PROPOSALS = 50           # the stop rule waits for this many proposals, or one per
                             # searchable operator when there are more


class Search(SessionChanges):
    """One search: candidates, chains, the best strategy so far and its bookkeeping."""

    memory_last = True     # a delta proposal's memory peak only when its time is not
    #                        rejected already (module doc, "Memory last")

    def __init__(self, model, machine_model, costs, *, optimizer=None, seed: int = 0,
                 expert: dict | None = None, random_starts: int = 1,
                 temperature: float = DEFAULT_TEMPERATURE, space: SearchSpace | None = None,
                 progress=None, progress_every: float = 1.0, delta: bool = True,
                 starts: dict | None = None, recompute: dict | None = None,
                 recompute_move: float | None = None, session_factory=None,
                 restarts: bool = True):
        if temperature <= 0:
            raise ValueError(f"search: temperature {temperature}; use a positive fraction "
                             "of the starting cost (default 0.01)")
        self.model, self.machine_model, self.costs = model, machine_model, costs
        self.optimizer, self.seed, self.expert = optimizer, seed, expert
        self.random_starts, self.temperature = random_starts, temperature
        self.restarts = restarts       # False: end when every candidate has stopped (the
        #                                paper's end-to-end search time, Table 5)
        self.delta = delta             # False: rebuild and fully simulate every proposal
        self.starts = dict(starts or {})   # more named candidates (e.g. a strategy file)
        self.space = space or SearchSpace.for_machine(model, machine_model)
        self.rng = random.Random(seed)
        self.progress, self.progress_every = progress, progress_every
        self.best, self.best_configs = math.inf, None
        self.baselines, self.history, self.errors, self.beta = {}, [], [], None
        self.breakdowns: dict = {}    # "data_parallel", "best" -> Breakdown.later
        self.baseline_configs: dict = {}
        # the segments a chain switches; None: the model's own recomputation, unchanged
        self.units = RecomputeUnits(recompute) if recompute else None
        # A recomputation move builds a session: all operators' launches planned, about
        # the work of one proposal per operator. So by default one proposal in as many as
        # there are operators (at most RECOMPUTE_MOVE) switches a segment.
        self.recompute_move = recompute_move if recompute_move is not None else \
            min(RECOMPUTE_MOVE, 1.0 / max(1, len(self.space.searchable())))
        self.state: frozenset | None = None       # segments on in the session searched
        self.best_state: frozenset | None = None
        self.best_memory: dict = {}
        self.capacity = float(sum(machine_model.device(d).memory_capacity
                                  for d in range(machine_model.num_devices)))
        self.build_s = 0.0               # the longest session build so far (module doc)
        # makes a session: SimulationSession, or one alike (strategy/tied.py's TiedSessions)
        self.session_factory = session_factory or SimulationSession
        self.skipped: list[str] = []
        # Known strategies (module doc): (strategy key, recomputation state) -> its
        # (makespan, rank), or None for one the runtime could not plan.
        self.known: dict = {}
        self.simulated = 0
        # proposals decided on a remembered bound of their rank / simulated again to learn it
        self.bounded = self.resimulated = 0
        self.gc_every = self.next_gc = self.next_freeze = GC_EVERY    # see _collect
        self.gc_window = False        # frozen for a due collection, GC_WINDOW simulations on
        # Session builds and changes, their CPU seconds (module doc, "Session builds")
        self.build_cpu, self.build_count, self.change_cpu, self.change_count = 0.0, 0, 0.0, 0
        self.last_session = None      # the last chain's session, for _reach
        self.reached = 0              # chains whose start was reached by changes

    def candidates(self) -> list[tuple[str, dict | None]]:
        out = [("data_parallel", None)]
        if self.expert:
            out.append(("expert", self.expert))
        out += list(self.starts.items())
        for k in range(self.random_starts):
            ops = self.space.searchable()
            out.append((f"random {k}", {op.name: self.space.random_config(op, self.rng)
                                        for op in ops}))
        return out

    def run(self, budget_s: float | None = None, proposals: int | None = None) -> SearchResult:
        with gc_paused():
            try:
                return self._run(Budget(budget_s, proposals, lambda: _clock()))
            finally:
                gc.unfreeze()

    def _run(self, budget: Budget) -> SearchResult:
        runs = []
        cands = self.candidates()
        for k, (name, strategy) in enumerate(cands):
            if k > 0 and strategy is not None and not self._fits(name, strategy):
                continue
            if k > 0 and (budget.exhausted() or not self._can_build(budget)):
                if name == "expert":        # a baseline is reported (and offered) anyway
                    self._baseline(name, strategy, budget)
                elif not budget.exhausted():
                    self._skip(f"candidate '{name}'", budget)
                continue
            runs.append(self._chain(name, strategy, budget, len(cands) - k))
        # Budget left after every candidate stopped on its own: restart from the best so far
        # with a quarter of the temperature each time (finer steps near the optimum), alternating
        # with fresh random starts (other valleys).
        # With no time left for a build, a restart from the best reached by changes (_reach).
        restarts = 0
        while self.restarts and not budget.exhausted():
            from_best = restarts % 2 == 0
            if not self._can_build(budget):
                if not self._can_reach(self.best_configs, budget):
                    self._skip("restarts", budget)
                    break
                from_best = True
            restarts += 1
            if from_best:
                runs.append(self._chain(f"best, restart {restarts}", self.best_configs, budget,
                                        1, cooling=4.0 ** -((restarts + 1) // 2)))
            else:
                ops = self.space.searchable()
                runs.append(self._chain(f"random, restart {restarts}",
                                        {op.name: self.space.random_config(op, self.rng)
                                         for op in ops}, budget, 1))
        segments, plan = [], None
        if self.units is not None:
            segments, plan = self.units.segments(self.best_state), \
                self.units.name(self.best_state)
            set_recompute(self.model, segments)
        return SearchResult(dict(self.best_configs), self.best, dict(self.baselines), runs,
                            budget.used, _clock() - budget.t0, self.seed,
                            self.beta, self.history, self.errors,
                            {k: later() for k, later in self.breakdowns.items()},
                            self.baseline_configs, plan, segments, self.best_memory,
                            self.skipped, self.simulated,
                            time.process_time() - budget.cpu0)

    def _fits(self, name: str, strategy: dict) -> bool:
        """Whether a given candidate (an expert strategy, a file) fits this model and machine;
        one that does not is skipped and said in `errors`, the search goes on."""
        try:
            resolve_configs(self.model, strategy, self.machine_model.taskrt_machine())
        except ConfigError as e:
            self.errors.append(f"candidate '{name}' skipped: {e}")
            return False
        return True

    def _can_build(self, budget: Budget) -> bool:
        """Whether a session build, as long as the longest so far, ends within the budget."""
        return budget.left() >= self.build_s

    def _skip(self, what: str, budget: Budget) -> None:
        self.skipped.append(f"{what}: a session build takes up to {self.build_s:.1f} s and "
                            f"{max(0.0, budget.left()):.1f} s were left")

    def _baseline(self, name: str, strategy, budget: Budget) -> None:
        session = self._session(strategy, self._plan_states())
        self.baselines[name] = session.result.makespan
        self._offer(session.result.makespan, session, budget)

    def _plan_states(self) -> list | None:
        """The recomputation states of the named plans (None without recomputation)."""
        return list(dict.fromkeys(self.units.plans.values())) if self.units else None

    def _build(self, strategy) -> SimulationSession:
        t, cpu = _clock(), time.process_time()
        session = self.session_factory(self.model, self.machine_model, self.costs, strategy,
                                       self.optimizer)
        self.build_s = max(self.build_s, _clock() - t)
        self.build_cpu += time.process_time() - cpu
        self.build_count += 1
        return session

    def _session(self, strategy, states=None, budget: Budget | None = None
                 ) -> SimulationSession:
        """A session of `strategy`; with recomputation, under the best of `states`
        (default the current self.state), which becomes self.state. With `budget`, states
        after the first whose build would not end within it are not tried."""
        if self.units is None:
            return self._build(strategy)
        best = None
        states = states or [self.state]
        for k, state in enumerate(states):
            if k > 0 and budget is not None and not self._can_build(budget):
                self._skip(f"{len(states) - k} of {len(states)} recomputation plans of a "
                           "candidate", budget)
                break
            set_recompute(self.model, self.units.segments(state))
            session = self._build(strategy)
            if best is None or ranked(session.result, self.capacity) < best[2]:
                best = (state, session, ranked(session.result, self.capacity))
        self.state = best[0]
        set_recompute(self.model, self.units.segments(self.state))
        return best[1]

    def _propose(self, session, fits: bool, can_build: bool = True) -> tuple:
        """('recompute', segment index) or ('op', op name, config): see the module doc.
        Without `can_build` (no time left for a session build) no recomputation move."""
        if self.units is not None and self.rng.random() < self.recompute_move and can_build:
            if fits:
                return "recompute", self.rng.randrange(len(self.units))
            unit = self.units.target(session, self.state)
            if unit is not None:     # out of memory, switching one off cannot help
                return "recompute", unit
        if not fits and self.rng.random() < MEMORY_MOVE:
            move = memory_move(self.space, session, self.rng)
            if move is not None:
                return move
        if fits and self.rng.random() < EXCHANGE_MOVE:
            move = exchange_move(self.space, session.configs, self.rng)
            if move is not None:
                return move
        name, cfg = self.space.propose(self.rng, session.configs)
        if fits and self.rng.random() < PAIR_MOVE:
            move = pair_move(self.space, session.configs, name, cfg, self.rng)
            if move is not None:
                return move
        return "op", name, cfg

    def _chain(self, name: str, strategy, budget: Budget, left: int,
               cooling: float = 1.0) -> CandidateRun:
        t_start = _clock()
        # every plan for a new candidate, the best's state for a restart from the best
        session = self._reach(strategy) or self._session(
            strategy, [self.best_state] if name.startswith("best") else self._plan_states(),
            budget)
        gc.freeze()             # the periodic collections skip what exists now (module doc)
        secs, props = budget.share(left)     # after the build: each chain gets to search
        t0 = _clock()
        cost = session.result.makespan
        if name in ("data_parallel", "expert"):
            self.baselines[name] = cost
        cur = ranked(session.result, self.capacity)
        if self.beta is None:         # the scale of times, also when the start does not fit
            ref = session.result.span
            ops = max(1, len(self.space.searchable()))
            self.beta = ops / (self.temperature * (ref if ref > 0 else 1.0))
        run = CandidateRun(name, cost, cost)
        if name == "data_parallel":
            self.breakdowns[name] = Breakdown.later(session)
            self.baseline_configs = dict(session.configs)
        self._offer(cost, session, budget)
        lowest = cur                     # the stop rule's measure: the chain's own ranking
        fits = session.result.valid
        key = strategy_key(session.configs)
        self.known[key, self.state] = (cost, cur)
        best_at_t, best_at_p = 0.0, 0
        patience = max(MIN_PROPOSALS, len(self.space.searchable()))
        last_report = _clock()
        while True:
            elapsed = _clock() - t0
            if elapsed >= secs or budget.exhausted():
                run.stopped_by = "budget"
                break
            if run.proposals >= props:
                run.stopped_by = "proposals"
                break
            # the paper's rule, half of the time without improvement, or of the proposals: a
            # chain stuck among known strategies proposes them almost for free. A budget of
            # proposals alone (secs infinite) stops by proposals only, so that such a search
            # repeats exactly with its seed, whatever the machine's speed
            if run.proposals >= patience and (best_at_p < run.proposals / 2 or (
                    secs != math.inf and best_at_t < elapsed / 2)):
                run.stopped_by = "no improvement"
                break
            move = self._propose(session, fits, self._can_build(budget))
            run.proposals += 1
            budget.used += 1
            new_key, known, draw, resolving = key, (), None, False
            if move[0] != "recompute":
                changes = move[1] if move[0] == "group" else [move[1:3]]
                for op_name, cfg in changes:
                    new_key ^= hash((op_name, session.configs[op_name])) ^ hash((op_name, cfg))
                if move[0] == "pair":
                    new_key ^= hash((move[3], session.configs[move[3]])) \
                        ^ hash((move[3], move[4]))
                    changes = changes + [move[3:5]]
                known = self.known.get((new_key, self.state), ())
                if known and known[0] is None:      # a lower bound of its rank (below)
                    known, draw = (), self._bound_draw(known[1], cur, fits, cooling)
                    resolving = True        # simulated again, if at all, to know its rank
                    if draw is False:
                        run.known += 1      # rejected on its time before, and now
                        self.bounded += 1
                        continue
                elif known is None or (known and not self._accept(known[1], cur, fits,
                                                                  cooling)):
                    run.known += 1      # unplannable, or simulated before and rejected now
                    continue
            # Rejected on its time alone (module doc, "Memory last"): what the rank would
            # reject, whatever the memory peak adds to it, is undone without computing it.
            timed = self.memory_last and self.delta and fits and not known and \
                not resolving and move[0] != "recompute" and \
                hasattr(session, "change_all") and hasattr(session, "change_timed")
            if not resolving:
                self.simulated += 1
                if self.simulated >= self.next_freeze:
                    self._collect()
            before = session, self.state
            try:
                if move[0] == "recompute":      # a new session: the old one is the undo
                    session = self._session(session.configs,
                                             [self.units.toggle(self.state, move[1])])
                    result = session.result
                elif timed:
                    span = self._change_timed(session, changes)
                    if span > cur:
                        draw = self._bound_draw(span, cur, fits, cooling)
                        if draw is False:
                            self.known[new_key, self.state] = (None, span)
                            self._back_to(before, move, session)
                            continue
                    result = self._complete(session)
                elif self.delta and move[0] == "pair":
                    result = self._change_pair(session, move)
                elif self.delta and move[0] == "group":
                    result = self._change_group(session, move)
                elif self.delta:
                    result = self._change(session, move[1], move[2])
                else:
                    configs = dict(session.configs)
                    configs.update(move[1] if move[0] == "group" else [move[1:3]])
                    if move[0] == "pair":
                        configs[move[3]] = move[4]
                    session = self._session(configs)
                    result = session.result
                t, r = result.makespan, ranked(result, self.capacity)
            except (ConfigError, PlanError) as e:
                run.failed += 1
                if move[0] != "recompute":
                    self.known[new_key, self.state] = None
                if len(self.errors) < 5:
                    self.errors.append(f"{' '.join(map(str, move[1:]))}: {e}")
                self._back_to(before, move)
                continue
            if move[0] != "recompute":
                self.known[new_key, self.state] = (t, r)
            if draw is not None:                # drawn on a lower bound of r, above
                accepted = math.isfinite(r) and draw < self._odds(r, cur, cooling)
            else:                               # known: accepted above
                accepted = bool(known) or self._accept(r, cur, fits, cooling)
            if accepted:
                cur, fits, key = r, result.valid, new_key
                self.known.setdefault((key, self.state), (t, r))   # a recomputation move
                run.accepted += 1
                if t < run.best:
                    run.best, run.improved = t, run.improved + 1
                    self._offer(t, session, budget)
                if r < lowest:
                    lowest = r
                    best_at_t, best_at_p = _clock() - t0, run.proposals
            else:
                session = self._back_to(before, move, session)
            if resolving:       # counted as a known proposal always was: simulated when
                if accepted:    # accepted, known when rejected
                    self.simulated += 1
                else:
                    run.known += 1
                    self.resimulated += 1
            now = _clock()
            if self.progress is not None and now - last_report >= self.progress_every:
                last_report = now
                self.progress(dict(candidate=name, elapsed=now - budget.t0,
                                   proposals=budget.used,
                                   rate=budget.used / max(now - budget.t0, 1e-9),
                                   current=cur, best=self.best))
        run.seconds = _clock() - t_start
        run.over_bytes = max(session.result.over_capacity.values(), default=0)
        self.last_session = session
        return run

    def _collect(self) -> None:
        """Freeze the heap (module doc). A collection that is due waits GC_WINDOW
        simulations after a freeze, so that it walks only what they made; the next one is
        due GC_EVERY simulations later, or twice as many as this one waited (at most
        GC_EVERY_MOST) when this one found little garbage."""
        if self.gc_window:
            found = gc.collect()
            self.gc_window = False
            self.gc_every = GC_EVERY if found >= GC_LITTLE else \
                min(2 * self.gc_every, GC_EVERY_MOST)
            self.next_gc = self.simulated + self.gc_every
        elif self.simulated >= self.next_gc:
            gc.freeze()
            self.gc_window = True
            self.next_freeze = self.simulated + GC_WINDOW
            return
        gc.freeze()             # what survived (kept plans, region plans) is not walked again
        self.next_freeze = self.simulated + GC_EVERY

    def _accept(self, r: float, cur: float, fits: bool, cooling: float) -> bool:
        """The Metropolis rule on ranks: out of memory the chain only goes downhill (into
        memory); in memory, a step `r - cur` seconds up is taken with exp(-beta * that)."""
        return r <= cur or (fits and math.isfinite(r) and
                            self.rng.random() < self._odds(r, cur, cooling))

    def _odds(self, r: float, cur: float, cooling: float) -> float:
        """The probability that the Metropolis rule takes a step `r - cur` up."""
        return math.exp(-self.beta / cooling * (r - cur))

    def _bound_draw(self, lower: float, cur: float, fits: bool, cooling: float):
        """For a proposal whose rank is `lower` or more: False when _accept rejects it
        whatever its rank (its draw says no even at `lower`: the odds only fall as the rank
        rises); else the draw _accept makes for it (None where it makes none: `lower` not
        above `cur`, out of memory, not finite), which then decides on its rank."""
        if not fits or lower <= cur or not math.isfinite(lower):
            return None
        draw = self.rng.random()
        return False if draw >= self._odds(lower, cur, cooling) else draw

    def _offer(self, t: float, session, budget: Budget) -> None:
        if t < self.best or self.best_configs is None:
            self.best, self.best_configs = t, dict(session.configs)
            self.best_state, self.best_memory = self.state, dict(session.result.memory or {})
            self.breakdowns["best"] = Breakdown.later(session)     # (summed at the end)
            self.history.append((_clock() - budget.t0, budget.used, t,
                                 time.process_time() - budget.cpu0))


def strategy_key(configs: dict) -> int:
    """A strategy's key in the known strategies: the XOR of its (operator, config) hashes,
    so that changing one operator's config changes the key by two XORs (see _chain)."""
    key = 0
    for item in configs.items():
        key ^= hash(item)
    return key


def ranked(result, capacity: float) -> float:
    """What a chain minimizes (module doc): the makespan of a strategy that fits; for one
    that does not, OVER_MEMORY_RANK * (1 + bytes over capacity / `capacity`, all devices'
    bytes) + its time without the memory rule."""
    if result.valid:
        return result.makespan
    over = sum(result.over_capacity.values()) / capacity
    return OVER_MEMORY_RANK * (1.0 + over) + result.span


def search(model, machine_model, costs, *, budget_s: float | None = None,
           proposals: int | None = None, **kw) -> SearchResult:
    """Search a strategy for `model` on `machine_model` (see the module doc for the knobs:
    optimizer, seed, expert, random_starts, temperature, space, progress)."""
    return Search(model, machine_model, costs, **kw).run(budget_s, proposals)
