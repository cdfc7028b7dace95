"""Search quality and search time (paper Figure 6 and Table 5), and delta vs full simulation
inside the search.

Quality: for the six paper apps at paper size on the P100 cluster model at 4, 8, 16 GPUs and
the K80 model at 4, 8, 16 (and 64 for AlexNet and ResNet-101), the predicted samples/s of data
parallelism, the app's expert strategy and the searched one (strategy/search.py, DP + expert
+ one random start, from seeds 0 and 1: seed 0's is the cell's, the other says whether seeds
agree), their ratios, a one-line "why" (strategy/explain.py: compute,
transfers, synchronization of the searched strategy minus data parallel's) and the paper's
qualitative findings checked on the searched strategies. figure6.png draws it (matplotlib,
part of the install).

Time: the whole benchmark fits a total budget, SOAPFLOW_SEARCH_BENCH_S seconds (default 1200),
or run(budget_s=...). Delta vs full (the same seeded single-chain search with a fixed number of
proposals, delta=True and delta=False; identical results asserted) takes its 20% first; the
quality cells follow, smallest first, each an even share of what is left weighted by GPUs +
8; a cell whose graph build (estimated from the same app on fewer GPUs, linear in GPUs) would
not fit three times in its share is skipped, and tried again with the time left at the end.
Search time: each search ends, as in the paper, when every candidate has stopped by the
paper's rule (its best not improved for half of its time), without restarts; the cell's share
of the budget is only a cap (a seed stopped by it is said). Its end-to-end seconds, the
seconds to its final best, proposals (and how many were simulated: the others were known
strategies) and CPU seconds stand next to the paper's Table 5 full / delta columns.

    python -m bench search_quality --out /tmp/sq
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings
from dataclasses import dataclass

APPS = ("alexnet", "resnet", "inception", "rnntc", "rnnlm", "nmt")
BIG_APPS = ("alexnet", "resnet")                 # also searched on 64 K80s
BUDGET_ENV = "SOAPFLOW_SEARCH_BENCH_S"
DEFAULT_BUDGET_S = 1200.0
QUALITY_FRACTION = 0.8                           # of the budget; the rest: delta vs full
MAX_CHAIN_PROPOSALS = 40     # < search.MIN_PROPOSALS: the clock-reading stop rule cannot fire
HERE = os.path.dirname(os.path.abspath(__file__))

# The paper's Table 5: end-to-end search time in seconds, (full, delta) simulation, mean of
# 10 random starts, per GPU count and app. The paper's numbers, not measured here.
PAPER_TABLE5 = {
    4: {"alexnet": (0.11, 0.04), "resnet": (1.4, 0.4), "inception": (14, 4.1),
        "rnntc": (16, 7.5), "rnnlm": (21, 9.2), "nmt": (40, 16)},
    8: {"alexnet": (0.40, 0.13), "resnet": (4.5, 1.4), "inception": (66, 17),
        "rnntc": (91, 39), "rnnlm": (76, 31), "nmt": (178, 65)},
    16: {"alexnet": (1.4, 0.48), "resnet": (22, 7.3), "inception": (388, 77),
         "rnntc": (404, 170), "rnnlm": (327, 121), "nmt": (998, 328)},
    32: {"alexnet": (5.3, 1.8), "resnet": (107, 33), "inception": (1746, 298),
         "rnntc": (1358, 516), "rnnlm": (1102, 342), "nmt": (2698, 701)},
    64: {"alexnet": (18, 5.9), "resnet": (515, 158), "inception": (8817, 1278),
         "rnntc": (4404, 1489), "rnnlm": (3406, 969), "nmt": (8982, 2190)},
}


@dataclass(frozen=True)
class Cell:
    cluster: str          # "p100" or "k80": 4 GPUs per node
    gpus: int
    app: str

    @property
    def preset(self) -> str:
        return f"{self.cluster}:{max(1, self.gpus // 4)}"


def quality_cells(apps=APPS) -> list[Cell]:
    """Figure 6's cells, fewest GPUs first (so that what a tight budget skips is the big end)."""
    cells = []
    for gpus in (4, 8, 16, 64):
        for cluster in ("p100", "k80"):
            if gpus == 64 and cluster == "p100":
                continue                           # the P100 cluster has 16 GPUs
            cells += [Cell(cluster, gpus, a) for a in apps if gpus < 64 or a in BIG_APPS]
    return cells


def total_budget(budget_s: float | None = None) -> float:
    """The benchmark's whole time budget: the argument, else $SOAPFLOW_SEARCH_BENCH_S."""
    if budget_s is None:
        raw = os.environ.get(BUDGET_ENV, "")
        try:
            budget_s = float(raw) if raw else DEFAULT_BUDGET_S
        except ValueError:
            raise ValueError(f"search_quality: {BUDGET_ENV}={raw!r} is not a number of "
                             "seconds") from None
    if not budget_s > 0:
        raise ValueError(f"search_quality: time budget {budget_s} s; give a positive number")
    return float(budget_s)


class TimePlan:
    """Shares a deadline among cells (weight GPUs + 8) and predicts graph-build times."""

    def __init__(self, seconds: float, cells: list[Cell], clock=time.perf_counter):
        self.clock = clock
        self.deadline = clock() + seconds
        self.left = list(cells)
        self.builds: dict[str, tuple[int, float]] = {}     # app -> (gpus, seconds) measured

    @staticmethod
    def weight(cell: Cell) -> float:
        return cell.gpus + 8

    def share(self, cell: Cell) -> float:
        """Seconds for `cell`: its weighted share of what is left (then it is no more left)."""
        remaining = max(0.0, self.deadline - self.clock())
        total = sum(self.weight(c) for c in self.left)
        out = remaining * self.weight(cell) / total if total else 0.0
        if cell in self.left:
            self.left.remove(cell)
        return out

    def record_build(self, app: str, gpus: int, seconds: float) -> None:
        self.builds[app] = (gpus, seconds)

    def estimated_build(self, cell: Cell) -> float | None:
        """Build seconds scaled linearly in GPUs from the app's last measured build."""
        known = self.builds.get(cell.app)
        return None if known is None else known[1] * cell.gpus / known[0]


# ------------------------------------------------------------------ findings (paper section 8)

def _split_kinds(op, cfg) -> set[str]:
    """Kinds of the dims ('sample', 'attribute', 'parameter', 'reduction') split by cfg."""
    kinds = {d.name: d.kind for d in op.dims}
    return {kinds.get(name, "?") for name, deg in cfg.degrees if deg > 1}


def weights_split(op, cfg) -> bool:
    return bool(_split_kinds(op, cfg) & {"parameter", "reduction"})


def resnet_finding(model, dp_configs: dict, configs: dict) -> tuple[bool, str]:
    """Close to data parallel: at least 90% of the operators keep their DP config."""
    same = sum(configs[op.name] == dp_configs[op.name] for op in model.ops)
    last = [op for op in model.ops if op.type == "linear"][-1]
    frac = same / len(model.ops)
    return frac >= 0.9, (f"{same}/{len(model.ops)} operators keep their DP config; last "
                         f"layer {last.name} {configs[last.name]}"
                         f"{' (split)' if weights_split(last, configs[last.name]) else ''}")


def alexnet_finding(model, configs: dict) -> tuple[bool, str]:
    """Convolutions keep their weights whole (sample/attribute splits, as data parallel);
    most fully connected layers split their weights (parameter or reduction dim)."""
    convs = [op for op in model.ops if op.type == "conv2d"]
    fcs = [op for op in model.ops if op.type == "linear"]
    conv_dp = [op for op in convs if not weights_split(op, configs[op.name])]
    fc_split = [op for op in fcs if weights_split(op, configs[op.name])]
    ok = len(conv_dp) == len(convs) and 2 * len(fc_split) > len(fcs)
    return ok, (f"convolutions data parallel {len(conv_dp)}/{len(convs)}, fully connected "
                f"split {len(fc_split)}/{len(fcs)} ("
                + ", ".join(f"{op.name} {configs[op.name]}" for op in fcs) + ")")


def nmt_finding(model, configs: dict, gpus: int) -> tuple[bool, str]:
    """Embeddings on at most half of the devices; the softmax layer split on its parameter dim."""
    embeds = [op for op in model.ops if op.type == "embedding"]
    few = [op for op in embeds if 2 * len(set(configs[op.name].devices)) <= gpus]
    last = [op for op in model.ops if op.type == "linear"][-1]
    soft = "parameter" in _split_kinds(last, configs[last.name])
    return len(few) == len(embeds) and soft, (
        f"embeddings on few devices {len(few)}/{len(embeds)} ("
        + ", ".join(f"{op.name} {configs[op.name]}" for op in embeds)
        + f"); {last.name} {configs[last.name]}")


FINDINGS = {
    "resnet": "ResNet-101 stays close to data parallel (last layer may split)",
    "alexnet": "AlexNet: convolutions data parallel, fully connected layers split",
    "nmt": "NMT: embeddings on few devices, softmax split on its parameter dim",
}


def check_finding(app: str, model, dp_configs: dict, configs: dict, gpus: int):
    """(holds, detail) of the app's finding, None for apps without one."""
    checks = {"resnet": lambda: resnet_finding(model, dp_configs, configs),
              "alexnet": lambda: alexnet_finding(model, configs),
              "nmt": lambda: nmt_finding(model, configs, gpus)}
    return checks[app]() if app in checks else None


def why_line(comparison) -> str:
    """One line from strategy.explain.compare: what the searched strategy saved vs DP."""
    a, b = comparison.a, comparison.b
    if not comparison.changes:
        return "same as data parallel (nothing better found)"
    deltas = {"compute": b.compute_s - a.compute_s, "transfers": b.transfer_s - a.transfer_s,
              "sync": b.sync_s - a.sync_s}
    main = min(deltas, key=deltas.get)
    top = max(comparison.changes, key=lambda c: abs(c.compute_s) + abs(c.sync_s))
    verb = "saved" if deltas[main] < 0 else "added (least)"
    return (f"mostly {main} {verb}: " + ", ".join(f"{k} {v * 1e3:+.3g} ms"
                                                  for k, v in deltas.items())
            + f" (device time); {len(comparison.changes)} op(s) changed, e.g. {top.op} "
            f"{top.old} -> {top.new}")


# ------------------------------------------------------------------ measuring

def _setup(app_name: str, preset: str, small: bool, cost_models: dict | None):
    """The app at its size for the preset's GPUs, and a cost model: one per app and size in
    `cost_models`, so that cells share costed keys (per-device part shapes repeat across GPU
    counts; keys are per device kind), as one long-running search tool would."""
    from strategy.costs import CostModel
    from strategy.costs.app_profile import load_app
    from strategy.machines import machine_model
    mm = machine_model(preset)
    gpus = len(mm.taskrt_machine())
    net = load_app(app_name, ["--small"] if small else [], gpus)
    cost_models = {} if cost_models is None else cost_models
    costs = cost_models.get((app_name, small))
    if costs is None:
        costs = cost_models[app_name, small] = CostModel(int_ranges=net.int_ranges)
    return net, mm, gpus, costs




SEEDS = (0, 1)       # each cell is searched from two seeds: do they agree?


def search_cell(cell: Cell, *, small: bool = False, budget_s: float | None = None,
                proposals: int | None = None, seeds=SEEDS,
                cost_models: dict | None = None) -> dict:
    """Data parallel, expert and searched strategies of one cell, with the why and findings.
    Each seed's search ends by the paper's stop rule (no restarts; `budget_s` split among
    the seeds is only a cap), so its seconds are comparable with the paper's Table 5. The
    cell's searched strategy is the first seed's; the others say whether seeds agree.
    build_s: the search's own data-parallel graph build (with the cost model warm)."""
    from strategy.delta import SimulationSession
    from strategy.experts import expert_for
    from strategy.explain import Breakdown, compare
    from strategy.search import search
    net, mm, gpus, costs = _setup(cell.app, cell.preset, small, cost_models)
    opt = net.optimizer
    model = net.model
    t = time.perf_counter()
    dp = SimulationSession(model, mm, costs, None, opt)
    if budget_s is not None:      # the best strategy's session comes on top
        budget_s = max(budget_s - 2 * (time.perf_counter() - t), 0.5)
    expert = expert_for(net, model, mm)
    runs = [search(model, mm, costs, proposals=proposals, seed=seed, expert=expert,
                   optimizer=opt, random_starts=1, restarts=False,
                   budget_s=None if budget_s is None else budget_s / len(seeds))
            for seed in seeds]
    res = runs[0]
    best = SimulationSession(model, mm, costs, res.configs, opt)
    assert best.result.makespan == res.predicted, (cell, best.result.makespan, res.predicted)
    cmp = compare(model, dp.configs, Breakdown.of(dp), best.configs, Breakdown.of(best))
    batch = net.batch_size
    times = {"dp": res.baselines.get("data_parallel"), "expert": res.baselines.get("expert"),
             "searched": res.predicted}           # seconds; inf: over memory; None: none
    out = {"app": cell.app, "cluster": cell.cluster, "gpus": gpus, "preset": cell.preset,
           "batch": batch, "status": "ok", "build_s": res.history[0][0],
           **{f"{k}_s": v for k, v in times.items()},
           **{f"{k}_sps": (batch / v if v is not None and 0 < v < math.inf else None)
              for k, v in times.items()},
           "vs_dp": _ratio(times["dp"], res.predicted),
           "vs_expert": _ratio(times["expert"], res.predicted),
           # DP's iteration over its compute per device (averaged): about the most that any
           # strategy doing the same work could gain on DP by hiding communication.
           "dp_headroom": _ratio(dp.result.makespan * gpus, Breakdown.of(dp).compute_s),
           "expert_note": ("no expert strategy for this device count" if expert is None else
                           next((e for e in res.errors if "'expert'" in e), "")),
           "time_to_best_s": res.history[-1][0] if res.history else None,
           "search_s": res.seconds, "proposals": res.proposals,
           "seeds": [_seed_summary(r) for r in runs],
           "why": why_line(cmp) if math.isfinite(res.predicted) else
           "every strategy tried is over memory (infinite predicted time)",
           "search": res.to_dict()}
    finding = check_finding(cell.app, model, dp.configs, res.configs, gpus)
    if finding is not None and math.isfinite(res.predicted):
        out["finding"] = {"holds": finding[0], "detail": finding[1]}
    return out


def _seed_summary(res) -> dict:
    """One seed's search: its best, proposals (simulated ones), wall and CPU seconds to its
    final best and in all, how its chains stopped."""
    last = res.history[-1] if res.history else (None, None, None, None)
    return {"seed": res.seed, "predicted_s": res.predicted, "proposals": res.proposals,
            "simulated": res.simulated, "search_s": res.seconds, "cpu_s": res.cpu_seconds,
            "time_to_best_s": last[0], "cpu_to_best_s": last[3],
            "stopped_by": [c.stopped_by for c in res.candidates],
            "load": os.getloadavg()[0]}


def agreement(seeds: list[dict]) -> str:
    """Whether the seeds found equally fast strategies: the slowest best over the fastest."""
    times = [s["predicted_s"] for s in seeds]
    if not all(math.isfinite(t) for t in times):
        return "some seed found nothing that fits"
    spread = max(times) / min(times) - 1
    return (f"seeds agree ({spread:.2%} apart)" if spread <= 0.005 else
            f"seeds differ by {spread:.1%}")


def _ratio(base: float | None, new: float) -> float | None:
    """How many times faster `new` is than `base` (None unless both are finite)."""
    ok = base is not None and 0 < base < math.inf and 0 < new < math.inf
    return base / new if ok else None


def delta_vs_full(app_name: str, preset: str, *, small: bool = False,
                  proposals: int | None = None, share_s: float | None = None,
                  seed: int = 0, cost_models: dict | None = None) -> dict:
    """The same single-chain search (from data parallel) with delta and with full
    simulation; proposals fixed (or chosen to fit share_s), results must be identical."""
    from strategy.delta import SimulationSession
    from strategy.search import search
    net, mm, gpus, costs = _setup(app_name, preset, small, cost_models)
    opt = net.optimizer
    SimulationSession(net.model, mm, costs, None, opt)       # warms the cost model
    t = time.perf_counter()
    SimulationSession(net.model, mm, costs, None, opt)
    build = time.perf_counter() - t
    if proposals is None:       # full simulation: about 1.5 builds per proposal
        proposals = int(min(MAX_CHAIN_PROPOSALS, max(5, (share_s or 0) / (1.6 * build))))
    proposals = min(proposals, MAX_CHAIN_PROPOSALS)
    kw = dict(proposals=proposals, seed=seed, optimizer=opt, random_starts=0)
    search(net.model, mm, costs, delta=True, **kw)    # costs every key of the chain: both
    t = time.perf_counter()                            # timed runs below find them cached
    d = search(net.model, mm, costs, delta=True, **kw)
    delta_s = time.perf_counter() - t
    t = time.perf_counter()
    f = search(net.model, mm, costs, delta=False, **kw)
    full_s = time.perf_counter() - t
    identical = d.configs == f.configs and d.predicted == f.predicted and \
        [(c.accepted, c.improved) for c in d.candidates] == \
        [(c.accepted, c.improved) for c in f.candidates]
    assert identical, f"delta and full searches of {app_name} on {preset} differ"
    return {"app": app_name, "preset": preset, "gpus": gpus, "small": small,
            "proposals": proposals, "build_s": build, "delta_s": delta_s, "full_s": full_s,
            "ratio": full_s / delta_s, "identical": identical,
            "accepted": d.candidates[0].accepted, "predicted_s": d.predicted}


# ------------------------------------------------------------------ report

def _num(x, fmt: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _tput(c: dict, kind: str) -> str:
    """Samples/s of one strategy of a cell, or why there is none."""
    t = c[f"{kind}_s"]
    if t is None:
        return "none"
    return f"{c[f'{kind}_sps']:.1f}" if math.isfinite(t) else "over memory"


def quality_rows(cells: list[dict]) -> list[tuple]:
    rows = []
    for c in cells:
        name = f"quality: {c['app']} on {c['gpus']} {c['cluster'].upper()}"
        if c["status"] != "ok":
            rows.append((name, "skipped", c["note"]))
            continue
        rows.append((name, f"DP {_tput(c, 'dp')} / expert {_tput(c, 'expert')} / "
                     f"searched {_tput(c, 'searched')} samples/s",
                     f"searched/DP {_num(c['vs_dp'], '.2f')}x, searched/expert "
                     f"{_num(c['vs_expert'], '.2f')}x; DP iteration / DP compute per device "
                     f"{_num(c.get('dp_headroom'), '.2f')}x; seeds "
                     + ", ".join(f"{s['seed']}: {s['predicted_s'] * 1e3:.4g} ms"
                                 for s in c["seeds"])
                     + f" ({agreement(c['seeds'])}); why: {c['why']}"
                     + (f"; expert: {c['expert_note'][:160]}" if c["expert_s"] is None
                        else "")))
    return rows


def finding_rows(cells: list[dict]) -> list[tuple]:
    rows = []
    for app, claim in FINDINGS.items():
        checked = [c for c in cells if c["app"] == app and "finding" in c]
        if not checked:
            rows.append((f"finding: {claim}", "not checked", "no cell of this app ran with "
                         "a strategy that fits in memory"))
            continue
        held = sum(c["finding"]["holds"] for c in checked)
        ex = checked[-1]
        rows.append((f"finding: {claim}", str(2 * held > len(checked)).lower(),
                     f"holds in {held}/{len(checked)} searched cells; at {ex['gpus']} "
                     f"{ex['cluster'].upper()}: {ex['finding']['detail']}"))
    return rows


def search_time_rows(cells: list[dict]) -> list[tuple]:
    """Table 5's cells up to 16 GPUs (P100) and 64 (K80, AlexNet and ResNet)."""
    rows = []
    for c in cells:
        if c["cluster"] != ("k80" if c["gpus"] == 64 else "p100") or c["status"] != "ok":
            continue
        full, delta = PAPER_TABLE5[c["gpus"]][c["app"]]
        if not math.isfinite(c["searched_s"]):
            rows.append((f"search time: {c['app']} on {c['gpus']} GPUs", "-",
                         f"every strategy over memory; paper: {full:g} / {delta:g} s"))
            continue
        seeds = c["seeds"]
        ended = [s for s in seeds if all(x == "no improvement" for x in s["stopped_by"])]
        rows.append((f"search time: {c['app']} on {c['gpus']} GPUs ({c['cluster'].upper()})",
                     " / ".join(f"{s['search_s']:.1f}" for s in seeds) + " s end to end "
                     "(seeds " + ", ".join(str(s["seed"]) for s in seeds) + ")",
                     f"paper (Table 5) full / delta: {full:g} / {delta:g} s; ours "
                     + "; ".join(f"seed {s['seed']}: {s['proposals']} proposals "
                                 f"({s['simulated']} simulated), final best at "
                                 f"{_num(s['time_to_best_s'])} s, CPU {s['cpu_s']:.1f} s"
                                 for s in seeds)
                     + f"; load average {seeds[0]['load']:.1f}; "
                     + (f"ended by the paper's stop rule in {len(ended)}/{len(seeds)} seeds"
                        + ("" if len(ended) == len(seeds) else
                           " (the others by the benchmark's cap: not convergence times)"))))
    return rows


def delta_rows(runs: list[dict]) -> list[tuple]:
    return [(f"delta vs full in the search: {r['app']}{' --small' if r['small'] else ''} on "
             f"{r['gpus']} GPUs", f"{r['ratio']:.1f}x faster with delta",
             f"{r['proposals']} proposals, same seed: full {r['full_s']:.1f} s, delta "
             f"{r['delta_s']:.1f} s; identical result: {str(r['identical']).lower()}")
            for r in runs]


def draw_figure(cells: list[dict], path: str) -> str:
    """Figure 6's bars (samples/s of DP, expert, searched per GPU count; one panel per app
    and cluster) as a PNG; returns a note (what was written, or why nothing was)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [c for c in cells if c["status"] == "ok"]
    if not ok:
        return "figure skipped: no cell was searched"
    clusters = [k for k in ("p100", "k80") if any(c["cluster"] == k for c in ok)]
    apps = [a for a in APPS if any(c["app"] == a for c in ok)] + \
        sorted({c["app"] for c in ok} - set(APPS))
    fig, axes = plt.subplots(len(clusters), len(apps), squeeze=False,
                             figsize=(3.0 * len(apps), 2.8 * len(clusters)))
    kinds = (("dp_sps", "data parallel"), ("expert_sps", "expert"), ("searched_sps", "searched"))
    for i, cluster in enumerate(clusters):
        for j, app in enumerate(apps):
            ax = axes[i][j]
            mine = sorted((c for c in ok if c["cluster"] == cluster and c["app"] == app),
                          key=lambda c: c["gpus"])
            for k, (key, label) in enumerate(kinds):
                xs = [g + (k - 1) * 0.27 for g in range(len(mine))]
                ax.bar(xs, [c[key] or 0 for c in mine], width=0.27, label=label)
            for g, c in enumerate(mine):
                if c["searched_sps"] is None:
                    ax.text(g, 0, "over\nmemory", ha="center", va="bottom", fontsize=7)
            ax.set_ylim(bottom=0)
            ax.set_xticks(range(len(mine)), [str(c["gpus"]) for c in mine])
            ax.set_title(f"{app} ({cluster.upper()})", fontsize=9)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("samples/s", fontsize=8)
            if i == len(clusters) - 1:
                ax.set_xlabel("GPUs", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Predicted training throughput (cf. paper Figure 6)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"written to {_shown(path)}"


def _shown(path: str) -> str:
    """`path` as results.md names it: relative to the repository when inside it, else
    whole and marked as not kept with the results (a run with --out elsewhere)."""
    root = os.path.dirname(HERE)
    full = os.path.abspath(path)
    if os.path.commonpath([root, full]) == root:
        return os.path.relpath(full, root)
    return f"{full} (outside the repository: not kept with these results)"


def out_dir(argv=None) -> str:
    """The --out folder of `python -m bench ... --out DIR` (bench/ by default)."""
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--out", default=HERE)
    return ap.parse_known_args(sys.argv[1:] if argv is None else argv)[0].out


def _quality_cell(plan: TimePlan, cell: Cell, cost_models: dict) -> dict:
    """One cell on its share of the plan, or a skip that says why."""
    share = plan.share(cell)
    est = plan.estimated_build(cell)
    if share <= 0 or (est is not None and 3 * est > share):
        return {"app": cell.app, "cluster": cell.cluster, "gpus": cell.gpus, "status": "skipped",
                "note": f"time budget: share {share:.0f} s, graph build estimated "
                        f"{_num(est)} s (x3 needed)"}
    print(f"search_quality: {cell}, {share:.0f} s", file=sys.stderr, flush=True)
    res = search_cell(cell, budget_s=share, cost_models=cost_models)
    plan.record_build(cell.app, cell.gpus, res["build_s"])
    return res


def measure_all(budget: float, t0: float, cost_models: dict) -> tuple[list, list]:
    """Delta vs full first (its fixed part of the budget), then the quality cells until the
    deadline, then a second pass over the cells skipped, with the time others left."""
    pairs = [("alexnet", "p100:1"), ("rnnlm", "p100:1"), ("alexnet", "p100:2")]
    end = t0 + (1 - QUALITY_FRACTION) * budget
    deltas = []
    for k, (app, preset) in enumerate(pairs):
        share = (end - time.perf_counter()) / (len(pairs) - k)
        if share > 0:     # else that part is spent: fewer pairs (the rows show which)
            deltas.append(delta_vs_full(app, preset, share_s=share, cost_models=cost_models))
    cells = quality_cells()
    plan = TimePlan(budget - (time.perf_counter() - t0), cells)
    results = {cell: _quality_cell(plan, cell, cost_models) for cell in cells}
    plan.left = [c for c in cells if results[c]["status"] == "skipped"]
    for cell in list(plan.left):
        results[cell] = _quality_cell(plan, cell, cost_models)
    return deltas, [results[c] for c in cells]


def run(quick: bool = False, budget_s: float | None = None, out: str | None = None) -> dict:
    from strategy.costs import CostWarning
    warnings.simplefilter("ignore", CostWarning)
    t0 = time.perf_counter()
    cost_models: dict = {}
    if quick:       # --small apps on one 4-GPU node, proposal budgets: a smoke run
        cells = [Cell("p100", 4, a) for a in ("alexnet", "nmt")]
        quality = [search_cell(c, small=True, proposals=12, cost_models=cost_models)
                   for c in cells]
        deltas = [delta_vs_full("alexnet", "p100:1", small=True, proposals=8,
                                cost_models=cost_models)]
        budget = None
    else:
        budget = total_budget(budget_s)
        deltas, quality = measure_all(budget, t0, cost_models)
    figure = draw_figure(quality, os.path.join(out or out_dir(), "figure6.png"))
    rows = quality_rows(quality) + finding_rows(quality) + search_time_rows(quality) + \
        delta_rows(deltas)
    rows.append(("figure 6 picture", "figure6.png" if figure.startswith("written") else "none",
                 figure))
    ran = sum(c["status"] == "ok" for c in quality)
    rows.append(("time budget", f"{time.perf_counter() - t0:.0f} s used"
                 + (f" of {budget:.0f} s" if budget else ""),
                 f"{ran}/{len(quality)} quality cells searched; ${BUDGET_ENV} sets the budget"))
    return {"title": "search quality and time", "rows": rows,
            "results": {"quality": quality, "delta_vs_full": deltas, "figure": figure,
                        "budget_s": budget, "paper_table5": PAPER_TABLE5}}
