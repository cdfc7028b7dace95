"""The search space, MCMC search and exhaustive search, on a small MLP on a 4-GPU node model.

The exhaustive optimum is checked against fresh full simulations of every strategy, and MCMC
restricted to the same space must find it."""
import itertools
import math
import random
import re

import pytest

from parallel_ops import SGD, Model, validate
from parallel_ops.lowering import lower
from strategy.costs import CostModel
from strategy.exhaustive import SpaceTooLarge, exhaustive, gray_steps, space_size
from strategy.machines import machine_model
from strategy.search import search
from strategy.simulator import simulate
from strategy.space import SearchSpace
from taskrt import plan


pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")


def full_time(m, mm, costs, strategy):
    machine = mm.taskrt_machine()
    low = lower(m, strategy, machine, SGD(lr=0.1))
    return simulate(plan(low.launches, machine, initial=low.initial), mm, costs).makespan


def test_gray_code_visits_every_combination_once_one_digit_at_a_time():
    radices = [3, 1, 4, 2]
    digits, seen = [0, 0, 0, 0], {(0, 0, 0, 0)}
    for j, v in gray_steps(radices):
        assert abs(digits[j] - v) == 1
        digits[j] = v
        seen.add(tuple(digits))
    assert seen == set(itertools.product(*map(range, radices)))
    assert sum(1 for _ in gray_steps(radices)) == math.prod(radices) - 1


def test_space_configs_are_valid_and_cover_soap(setting):
    m, mm, _ = setting
    machine = mm.taskrt_machine()
    space = SearchSpace.for_machine(m, mm)
    rng = random.Random(0)
    for op in m.ops:
        for t in space.degree_tuples(op):
            assert math.prod(t) <= 4
            assert all(k <= d.extent for k, d in zip(t, op.dims))
        for _ in range(30):
            cfg = space.random_config(op, rng)
            validate(op, cfg, machine)
            validate(op, space.neighbor(op, cfg, rng), machine)
    fc1 = m.op("fc1")
    kinds = {d.kind for d in fc1.dims}
    assert "reduction" in kinds        # every SOAP dim of a linear layer may be split
    split_dims = {d.name for t in space.degree_tuples(fc1)
                  for d, k in zip(fc1.dims, t) if k > 1}
    assert split_dims == {d.name for d in fc1.dims}
    # fewer devices than exist, and any subset of them, are in the space
    devs = {space.random_config(fc1, rng).devices for _ in range(300)}
    assert any(len(d) == 1 for d in devs)
    assert (1, 3) in devs or (3, 1) in devs


def test_node_family_stays_inside_nodes():
    mm = machine_model("p100:2")               # 2 nodes x 4 GPUs
    m = Model("one", seed=0)
    m.linear(m.input("x", (16, 8)), 8, name="fc")
    space = SearchSpace.for_machine(m, mm, families=("node",))
    assert space.starts(2, "node") == [0, 2, 4, 6]
    assert space.starts(4, "node") == [0, 4]
    assert space.starts(8, "node") == [0]
    assert space.starts(3, "node") == [0, 4]
    restricted = space.restricted()
    for cfg in restricted.configs(m.op("fc")):
        assert sum(k > 1 for _, k in cfg.degrees) <= 1
        assert len({mm.node_of(d) for d in cfg.devices}) == max(1, len(cfg.devices) // 4)


def test_exhaustive_optimum_equals_the_best_fresh_full_simulation(setting):
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1", "loss"})
    total, sizes = space_size(space)
    assert total == 100 and sizes == {"fc1": 10, "fc2": 10}
    ex = exhaustive(m, mm, costs, space, optimizer=SGD(lr=0.1))
    assert ex.evaluated == total
    times = {}
    for c1 in space.configs(m.op("fc1")):
        for c2 in space.configs(m.op("fc2")):
            times[c1, c2] = full_time(m, mm, costs, {"fc1": c1, "fc2": c2})
    assert ex.predicted == pytest.approx(min(times.values()), rel=1e-12)
    assert times[ex.configs["fc1"], ex.configs["fc2"]] == pytest.approx(ex.predicted, rel=1e-12)
    assert ex.predicted < full_time(m, mm, costs, None)      # better than data parallel here
    with pytest.raises(SpaceTooLarge, match=r"100 strategies \(10 x 10 configs for 2 operators"):
        exhaustive(m, mm, costs, space, limit=99)


def test_mcmc_finds_the_exhaustive_optimum_and_never_loses_to_data_parallel(setting):
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1", "loss"})
    ex = exhaustive(m, mm, costs, space, optimizer=SGD(lr=0.1))
    r = search(m, mm, costs, proposals=300, seed=0, space=space, optimizer=SGD(lr=0.1))
    assert r.predicted == pytest.approx(ex.predicted, rel=1e-12)
    assert r.predicted <= r.baselines["data_parallel"]
    assert r.speedup() == pytest.approx(r.baselines["data_parallel"] / r.predicted)
    assert full_time(m, mm, costs, r.configs) == pytest.approx(r.predicted, rel=1e-12)
    assert [c.name for c in r.candidates][0] == "data_parallel"
    assert r.history[-1][2] == r.predicted


def test_search_is_reproducible_with_a_seed_and_reports_progress(setting):
    m, mm, costs = setting
    seen = []
    runs = [search(m, mm, costs, proposals=60, seed=7, optimizer=SGD(lr=0.1),
                   progress=seen.append, progress_every=0.0) for _ in range(2)]
    assert runs[0].configs == runs[1].configs and runs[0].predicted == runs[1].predicted
    assert runs[0].proposals == 60
    assert seen and {"elapsed", "proposals", "rate", "current", "best"} <= set(seen[-1])
    assert all(s["best"] <= runs[0].baselines["data_parallel"] for s in seen)


def test_search_budget_and_temperature_errors(setting):
    m, mm, costs = setting
    with pytest.raises(ValueError, match="give a budget"):
        search(m, mm, costs)
    with pytest.raises(ValueError, match="positive time or proposal count"):
        search(m, mm, costs, budget_s=-1)
    with pytest.raises(ValueError, match="temperature"):
        search(m, mm, costs, proposals=5, temperature=0)


def test_explain_breaks_the_iteration_down_and_names_the_changed_operators(setting):
    from strategy.delta import SimulationSession
    from strategy.explain import Breakdown, compare
    m, mm, costs = setting
    dp = SimulationSession(m, mm, costs, None, SGD(lr=0.1))
    base = Breakdown.of(dp)
    durations = {k: 0.0 for k in ("task", "reduce", "copy", "allreduce")}
    for n in dp.graph.nodes:
        durations[n.kind] += dp.result.end[n.id] - dp.result.start[n.id]
    assert base.compute_s == pytest.approx(durations["task"] + durations["reduce"])
    assert base.sync_s == pytest.approx(durations["allreduce"])
    # data parallelism all-reduces every weight's gradient once, in float32
    assert base.sync_bytes == 4 * sum(math.prod(w.shape) for w in m.weights)
    assert set(base.op_sync) == {"fc1", "fc2"}
    assert sum(base.op_compute.values()) + base.other_tasks_s == \
        pytest.approx(durations["task"])
    assert 0 <= base.other_tasks_s < 0.1 * durations["task"]
    new = dict(dp.configs)
    new["fc2"] = SearchSpace.config(m.op("fc2"), (1, 4, 1), (0, 1, 2, 3))
    other = SimulationSession(m, mm, costs, new, SGD(lr=0.1))
    cmp = compare(m, dp.configs, base, other.configs, Breakdown.of(other))
    assert [c.op for c in cmp.changes] == ["fc2"]
    assert cmp.changes[0].sync_s == pytest.approx(-base.op_sync["fc2"])   # o-split: no sync
    text = cmp.text()
    assert "fc2: [n=4]@0-3 -> [o=4]@0-3" in text and "1 operator(s) changed" in text


def test_full_simulation_search_walks_the_same_chain_as_delta(setting):
    # Delta simulation equals full simulation, so with one seed both searches see the same
    # costs, take the same decisions and end with the same strategy.
    m, mm, costs = setting
    a = search(m, mm, costs, proposals=40, seed=3, optimizer=SGD(lr=0.1))
    b = search(m, mm, costs, proposals=40, seed=3, optimizer=SGD(lr=0.1), delta=False)
    assert a.configs == b.configs and a.predicted == b.predicted
    assert [(c.accepted, c.improved) for c in a.candidates] == \
        [(c.accepted, c.improved) for c in b.candidates]


def test_a_candidate_that_does_not_fit_is_skipped_and_said(setting):
    m, mm, costs = setting
    bad = {"fc2": SearchSpace.config(m.op("fc2"), (1, 1, 1), (7,))}     # device 7 of 4
    r = search(m, mm, costs, proposals=20, seed=0, expert=bad, optimizer=SGD(lr=0.1))
    assert "expert" not in r.baselines and r.predicted <= r.baselines["data_parallel"]
    assert any("candidate 'expert' skipped" in e and "devices [7] do not exist" in e
               for e in r.errors)
    assert "note: candidate 'expert' skipped" in r.text()


def test_the_result_explains_itself_from_the_simulations_it_ran(setting):
    from strategy.delta import SimulationSession
    from strategy.explain import Breakdown, compare
    m, mm, costs = setting
    r = search(m, mm, costs, proposals=60, seed=1, optimizer=SGD(lr=0.1))
    dp = SimulationSession(m, mm, costs, None, SGD(lr=0.1))
    best = SimulationSession(m, mm, costs, r.configs, SGD(lr=0.1))
    fresh = compare(m, dp.configs, Breakdown.of(dp), best.configs, Breakdown.of(best),
                    "data parallel", "searched")
    got = r.explain(m)
    assert got.text() == fresh.text()
    assert got.b.makespan == pytest.approx(r.predicted, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_a_breakdown_from_the_planners_groups_equals_one_from_the_graph(setting, seed):
    """Breakdown.of reads a session's nodes from its planner's node groups, not from the
    object graph (a search explains each new best): the same breakdown as from the graph's
    nodes in id order, after random changes and undos."""
    from strategy.delta import SimulationSession
    from strategy.explain import Breakdown
    m, mm, costs = setting
    session = SimulationSession(m, mm, costs, None, SGD(lr=0.1))
    space = SearchSpace.for_machine(m, mm)
    rng = random.Random(seed)
    for k in range(6):
        session.change(*space.propose(rng, session.configs))
        if k % 3 == 2:
            session.undo()
        assert Breakdown.of(session) == Breakdown.of_nodes(session, session.graph.nodes)


def test_a_session_build_that_would_end_past_the_budget_is_not_started(setting, monkeypatch):
    """On a clock that the test drives (a build takes 10 s, a proposal 0.1 s), a 22 s search
    builds data parallelism (10 s), searches its share (4 s), and then skips the random
    starts, whose builds would end past 22 s (the old search built one: 24 s). The time left
    goes to restarts from the best, each reached from the last chain's end by changes, not
    a build (the search before left it unused: 8 of 22 s)."""
    import strategy.search as search_module
    m, mm, costs = setting
    now = [0.0]
    monkeypatch.setattr(search_module, "_clock", lambda: now[0])
    # CPU time too: whether a restart is reached by changes or built compares their mean CPU
    # times (search_changes.py), which on a loaded machine could go either way
    monkeypatch.setattr(search_module.time, "process_time", lambda: now[0])

    builds = []

    class TimedSession(search_module.SimulationSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            now[0] += 10.0
            builds.append(now[0])

        def change(self, *args, **kwargs):
            now[0] += 0.1
            return super().change(*args, **kwargs)

        def change_timed(self, *args, **kwargs):      # (the search's "memory last")
            now[0] += 0.1
            return super().change_timed(*args, **kwargs)
    monkeypatch.setattr(search_module, "SimulationSession", TimedSession)
    res = search(m, mm, costs, budget_s=22, seed=0, random_starts=2)
    assert now[0] <= 22.0 + 0.1 + 1e-9
    names = [c.name for c in res.candidates]
    assert names[0] == "data_parallel" and len(names) > 1, names
    assert all(re.fullmatch(r"best, restart \d+", n) for n in names[1:]), names
    assert len(builds) == 1, builds          # (every restart reached, none built)
    assert now[0] > 22.0 - 0.1, now[0]       # the budget used to its end
    assert re.fullmatch(r"candidate 'random 0': a session build takes up to 10\.0 s and "
                        r"(7\.9|8\.0) s were left", res.skipped[0]), res.skipped
    assert "skipped: candidate 'random 0'" in res.text()


def test_a_restricted_space_proposes_only_its_own_configs():
    """Neighbours in a node-aligned space stay node-aligned: halving [n=4]@0-3 may not give
    [n=2]@1-2, a config the exhaustive search never visits (the search wasted proposals
    outside the space it was given)."""
    mm = machine_model("p100:2")
    m = Model("one", seed=0)
    m.linear(m.input("x", (16, 8)), 8, name="fc")
    op = m.op("fc")
    space = SearchSpace.for_machine(m, mm).restricted()
    allowed = set(space.configs(op))
    rng = random.Random(0)
    cfg = SearchSpace.config(op, (8, 1, 1), range(8))
    for _ in range(2000):
        cfg = space.neighbor(op, cfg, rng)
        assert cfg in allowed, cfg
    for _ in range(300):
        name, cfg = space.propose(rng, {"fc": cfg})
        assert cfg in allowed, cfg


class _Forgetful(dict):
    """Known strategies that are never remembered: every proposal is simulated."""

    def __setitem__(self, key, value):
        pass

    def setdefault(self, key, value=None):
        return value


def test_known_strategies_save_simulations_and_leave_the_chain_unchanged(setting,
                                                                         monkeypatch):
    """A proposal of a strategy simulated before is decided from its remembered cost: the
    chain (accepted, improved, result) is the one that simulates every proposal, with fewer
    simulations. (The stop rule, which reads the clock, is kept from firing: saved
    simulations make a chain's time shorter.)"""
    import strategy.search as search_module
    monkeypatch.setattr(search_module, "MIN_PROPOSALS", 10**6)
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1", "loss"})
    kw = dict(seed=5, space=space, optimizer=SGD(lr=0.1))
    a = search_module.Search(m, mm, costs, **kw).run(proposals=300)
    b = search_module.Search(m, mm, costs, **kw)
    b.known = _Forgetful()
    b = b.run(proposals=300)
    assert a.configs == b.configs and a.predicted == b.predicted
    assert [(c.name, c.proposals, c.accepted, c.improved) for c in a.candidates] == \
        [(c.name, c.proposals, c.accepted, c.improved) for c in b.candidates]
    assert b.simulated == b.proposals == 300 and sum(c.known for c in b.candidates) == 0
    assert a.simulated + sum(c.known for c in a.candidates) == 300
    assert a.simulated < 150          # 100 strategies in this space: most are known
    assert f"{a.simulated} simulated" in a.text()


def test_without_restarts_the_search_ends_by_the_papers_stop_rule(setting):
    m, mm, costs = setting
    r = search(m, mm, costs, proposals=2000, seed=0, optimizer=SGD(lr=0.1),
               restarts=False)
    assert [c.name for c in r.candidates] == ["data_parallel", "random 0"]
    assert all(c.stopped_by == "no improvement" for c in r.candidates)
    assert r.proposals == sum(c.proposals for c in r.candidates) < 2000
    assert 0 < r.cpu_seconds and all(0 <= h[3] <= r.cpu_seconds for h in r.history)


def test_collections_that_find_little_garbage_come_less_often(setting, monkeypatch):
    """A collection walks everything made since the heap was last frozen, and its cost is
    that, not the garbage (NMT @16: 1.4-4M objects in 0.7-2.2 s, none of them garbage): the
    heap is frozen every GC_EVERY simulations, and a collection that is due comes
    GC_WINDOW simulations after a freeze (it walks what they made only); the interval
    doubles after each one that found little garbage, and is back to GC_EVERY after one
    that found more."""
    import gc

    import strategy.search as search_module
    m, mm, costs = setting
    s = search_module.Search(m, mm, costs, seed=0, optimizer=SGD(lr=0.1))
    every, window = search_module.GC_EVERY, search_module.GC_WINDOW
    collections, found = [], []
    collect = gc.collect

    def counted():
        found.append(collect())
        return found[-1]
    monkeypatch.setattr(gc, "collect", counted)

    def step(garbage: int = 0):
        for _ in range(garbage):        # cycles, as torch's pytree closures make
            cycle = [1]
            cycle.append(cycle)
            del cycle
        s.simulated = s.next_freeze
        before = len(found)
        s._collect()
        collections.append(len(found) > before)
        assert s.next_freeze == s.simulated + (window if s.gc_window else every)

    collect()
    gc.disable()                        # as the search runs (taskrt/gcpause.py)
    try:
        for _ in range(10):
            step()
        # frozen every 32 simulations; collections due at 32, 100, 232 (64, then 128 after
        # the one before), each 4 simulations after its freeze
        assert [s_ for s_, c in zip([32, 36, 68, 100, 104, 136, 168, 200, 232, 236],
                                    collections) if c] == [36, 104, 236]
        assert s.gc_every == 8 * every and s.next_gc == 236 + 8 * every
        # garbage made before the window's freeze is frozen: not walked, not found
        while s.simulated + every < s.next_gc:
            step(garbage=50)
        step(garbage=5000)              # opens the window
        assert s.gc_window and not collections[-1]
        step(garbage=search_module.GC_LITTLE - 1)
        assert collections[-1] and search_module.GC_LITTLE - 1 <= found[-1] < 5000
        assert s.gc_every == 16 * every
        for _ in range(200):
            step(garbage=search_module.GC_LITTLE - 1)
        assert s.gc_every == search_module.GC_EVERY_MOST
        while s.simulated + every < s.next_gc:
            step()
        step()
        assert s.gc_window
        step(garbage=search_module.GC_LITTLE)
        assert collections[-1] and s.gc_every == every
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_chain_started_by_changing_the_last_session_walks_as_after_a_build(setting,
                                                                            monkeypatch):
    """Restarts and the random candidate reach their start by changing the last chain's
    session (Search._reach) when that is cheaper than a build: the chains are the ones
    that build every start. (The clock is driven by the test, one tick per simulated
    proposal, so the stop rule fires at the same proposals in both searches.)"""
    import strategy.search as search_module
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1"})
    runs = []
    for reach in (False, True):
        monkeypatch.setattr(search_module, "_clock", lambda: s.simulated * 1e-3)
        monkeypatch.setattr(search_module.Search, "_cheaper_by_changes",
                            lambda self, n: reach)
        s = search_module.Search(m, mm, costs, seed=3, space=space, optimizer=SGD(lr=0.1),
                                 starts={"fc1 only": {"fc1": space.config(
                                     m.op("fc1"), (1, 1, 2), (0, 1))}})
        r = s.run(proposals=400)
        runs.append((r, s.reached))
    (built, none), (reached, count) = runs
    assert none == 0 and count >= 3 and len(reached.candidates) >= 5
    assert [(c.name, c.start, c.proposals, c.accepted, c.best) for c in reached.candidates] \
        == [(c.name, c.start, c.proposals, c.accepted, c.best) for c in built.candidates]
    assert reached.configs == built.configs and reached.predicted == built.predicted


def test_the_temperature_is_a_fraction_of_one_operators_share_of_the_time(setting):
    """beta = n / (T * cost of the first candidate), n searchable operators: a proposal
    changes one operator, about 1/n of the iteration (on Inception-v3, 221 operators, the
    temperature of the whole iteration accepted 95% of proposals)."""
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm, frozen={"loss"})
    r = search(m, mm, costs, proposals=5, seed=0, optimizer=SGD(lr=0.1), space=space,
               temperature=0.02)
    n = len(space.searchable())
    assert n == len(m.ops) - 1
    assert r.beta == pytest.approx(n / (0.02 * r.baselines["data_parallel"]))


def test_a_chain_stops_when_half_its_proposals_brought_no_improvement(setting, monkeypatch):
    """The paper's stop rule, half the time without improvement, or half the proposals: a
    chain in a local optimum whose neighbours are all known strategies proposes them
    almost for free (no simulation), so its time hardly grows (here, with the clock
    stopped, not at all) while its proposals are spent."""
    import strategy.search as search_module
    monkeypatch.setattr(search_module, "_clock", lambda: 0.0)
    m, mm, costs = setting
    space = SearchSpace.for_machine(m, mm).restricted(frozen={"relu1", "loss"})
    r = search(m, mm, costs, proposals=3000, seed=0, optimizer=SGD(lr=0.1), space=space,
               restarts=False)
    assert [c.stopped_by for c in r.candidates] == ["no improvement"] * 2
    assert r.proposals < 1000


def test_a_search_of_proposals_alone_repeats_whatever_the_clock(monkeypatch):
    """A budget of proposals only is stopped by proposals only: the same seed gives the
    same chains on a machine that stalls as on one that does not (a clock that jumps once;
    with the time half of the rule, a stall at the 120th reading stopped a chain early)."""
    import itertools

    import strategy.search as search_module
    mm = machine_model("p100:1")
    m = Model("mlp6", seed=0)
    h = m.input("x", (64, 256))
    y = m.input("y", (64,), dtype="int64")
    for i in range(6):
        h = m.relu(m.linear(h, 256, name=f"fc{i}"), name=f"r{i}")
    m.softmax_cross_entropy(m.linear(h, 64, name="out"), y, name="loss")

    def run():
        r = search(m, mm, CostModel(), proposals=600, seed=1, optimizer=SGD(lr=0.1),
                   restarts=False, random_starts=1)
        return [(c.name, c.proposals, c.stopped_by, c.best) for c in r.candidates], \
            r.predicted, r.configs

    monkeypatch.setattr(search_module, "_clock", lambda: 0.0)
    steady = run()
    for pause_at in (20, 60, 120, 240):
        ticks = itertools.count()
        monkeypatch.setattr(search_module, "_clock",
                            lambda: (t := next(ticks)) + (1e6 if t > pause_at else 0.0))
        assert run() == steady, pause_at
