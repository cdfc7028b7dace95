"""--simulate: predict one training iteration of an app on a machine model without training
(`predict`), and the report, --json object and --trace file of that prediction.

The graph is the one a real run would execute on the model's devices (lower + plan of the
app's model under the strategy); strategy/simulator.py times it with the cost model
(measured times from --profile FILE, else the analytic model, calibrated from the profile
where it holds enough measurements). Owns no simulation and no machine models.
"""
from __future__ import annotations

import json
import math
import statistics
import time
import warnings
from dataclasses import dataclass

from parallel_ops.lowering import lower
from strategy.costs import CostModel, CostWarning, Profile, ProfileError
from strategy.simulator import NodeTimer, SimResult, simulate, trace_of
from taskrt import Machine, plan
from taskrt.gcpause import gc_paused
from taskrt.trace import to_chrome

from .app import App, Network
from .errors import UsageError
from .judge import calibration_of
from .progress import counted, elapsed, progress_bar
from .report import machine_text, parameters
from .runconfig import RunConfig


@dataclass
class Prediction:
    """One simulated iteration of an app on a machine model."""
    app: App
    config: RunConfig
    network: Network
    machine: Machine                  # the runtime's devices (ids as in the graph)
    machine_model: object             # MachineModel, or its SharedDevices view
    graph: object
    result: SimResult
    timer: NodeTimer
    costs: CostModel
    strategy_name: str
    rank: int = 0
    search: object | None = None      # the SearchResult of --search
    calibrated: float | None = None   # seconds by the whole calibrated model (_calibrated)
    simulated = True                  # result_json tells predictions from runs by this

    @property
    def iteration_time(self) -> float:
        return self.result.makespan

    @property
    def samples_per_s(self) -> float:
        t = self.result.makespan
        return self.config.batch_size / t if 0 < t < math.inf else 0.0

    @property
    def model_flops(self) -> float | None:
        """The app's count of FLOPs per iteration (None when the app has none)."""
        return self.app.model_flops(self.config, self.network.model) \
            if self.app.model_flops else None

    @property
    def tflops_per_device(self) -> float | None:
        """Model FLOPs per second per device, in TFLOP/s (None without a count or a time)."""
        f, t = self.model_flops, self.result.makespan
        return f / t / len(self.machine) / 1e12 if f and 0 < t < math.inf else None

    def compute_resources(self) -> list[str]:
        """The compute resource of every device, in device order, without repeats."""
        return list(dict.fromkeys(self.timer.compute(d) for d in range(len(self.machine))))

    def devices_used(self) -> int:
        """Devices some task of the graph runs on (the full simulation counted them)."""
        return self.result.traffic["devices_used"]

    def communication_bytes(self) -> dict[str, int]:
        """Bytes of copies between devices and of all-reduces (each counted once; the full
        simulation summed them from its columns: strategy.simulator.traffic_of)."""
        t = self.result.traffic
        return {"copy": t["copy"], "allreduce": t["allreduce"]}

    def text(self) -> str:
        return prediction_report(self)

    def json(self) -> dict:
        return prediction_json(self)


def cost_model(config: RunConfig, net: Network) -> CostModel:
    """The cost model of --simulate and --search: --profile FILE's measurements, else analytic."""
    if not config.profile:
        return CostModel(int_ranges=net.int_ranges)
    try:
        return CostModel(Profile.load(config.profile), int_ranges=net.int_ranges)
    except ProfileError as e:
        raise UsageError(f"--profile {config.profile}: {e}") from None


def predict(app: App, setup, optimizer, out=None) -> Prediction:
    """Lower, plan and simulate one iteration on the setup's machine model (a progress bar
    on `out` while the graph is planned, and its size and time once done)."""
    # One pause of the collector over lowering, planning and simulating: they allocate
    # objects per node that all live as long as the prediction (taskrt/gcpause.py).
    with gc_paused(long_lived=True):
        return _predict(app, setup, optimizer, out)


def _predict(app: App, setup, optimizer, out) -> Prediction:
    config, net, machine, mm = setup.config, setup.network, setup.machine, setup.machine_model
    calibration = calibration_of(config)     # a bad record or profile: refused before work
    say = (lambda text: print(text, file=out, flush=True)) \
        if out is not None and setup.rank == 0 and not config.quiet else (lambda text: None)
    t = time.perf_counter()
    lowered = lower(net.model, setup.strategy, machine, optimizer)
    bar = progress_bar(out if setup.rank == 0 else None, config.quiet, "planning the graph",
                       total=len(lowered.launches), unit="launch")
    try:
        graph = plan(counted(lowered.launches, bar), machine, initial=lowered.initial)
    finally:
        bar.close()
    say(f"graph of {len(net.model.ops)} operators on {len(machine)} devices: "
        f"{len(graph.nodes):,} nodes, built in {time.perf_counter() - t:.1f} s")
    costs = cost_model(config, net)
    timer = NodeTimer(mm, costs)
    t = time.perf_counter()
    with warnings.catch_warnings(), \
            elapsed(out if setup.rank == 0 else None, config.quiet, "simulating"):
        warnings.simplefilter("ignore", CostWarning)   # the report says where costs come from
        result = simulate(graph, mm, costs, timer)
    say(f"simulated in {time.perf_counter() - t:.1f} s")
    return Prediction(app, config, net, machine, mm, graph, result, timer, costs,
                      setup.strategy_name, setup.rank, setup.search,
                      _calibrated(calibration, mm, net, graph))


def _calibrated(calibration, mm, net: Network, graph) -> float | None:
    """The graph's iteration by the whole calibrated model (strategy.calibration.predict:
    gradient buckets, ranks' speeds, wake-ups), when --machine is a calibration holding its
    record and --profile the profile written with it (`calibration`: judge.calibration_of),
    and the machine is the one it was calibrated on; else None. The simulator's time is the
    files' smooth model, the one the search uses: a judged --search then prints the judge's
    number beside it."""
    from strategy.calibration import judged
    if calibration is None:
        return None
    fit, ranks, per_rank = calibration
    if ranks * per_rank != mm.num_devices:
        return None
    return judged(fit, {"this": graph}, net.int_ranges, ranks, per_rank)[0][0]


def _ms(s: float) -> str:
    return f"{1e3 * s:.3f} ms" if math.isfinite(s) else "inf"


def prediction_report(p: Prediction) -> str:
    """What --simulate prints: time, throughput, devices, links, communication, memory."""
    a, r, c = p.config, p.result, p.graph.count()
    span = r.span                 # the timeline, also when invalid
    n = len(p.machine)
    lines = [f"Predicted: {p.app.title}{' --small' if a.small else ''} on "
             f"{p.machine_model.name}, {p.machine_model}, {n} device{'s' if n > 1 else ''}, "
             f"batch {a.batch_size}, strategy {p.strategy_name}"]
    if r.valid:
        lines.append(f"  iteration time  {_ms(r.makespan)}  ({p.samples_per_s:.1f} samples/s, "
                     f"{p.samples_per_s / n:.1f} per device)")
    else:
        lines.append(f"  INVALID: memory over capacity on {len(r.over_capacity)} device(s); "
                     f"predicted time is infinite (timeline without the memory rule: "
                     f"{_ms(span)})")
    if p.calibrated is not None:
        lines.append(f"  calibrated      {_ms(p.calibrated)} by the whole calibrated model of "
                     f"--machine (gradient buckets, ranks' speeds, wake-ups); the time above "
                     "is its smooth model's, the one the search simulates")
    if p.tflops_per_device is not None:
        lines.append(f"  model FLOPs     {p.model_flops:.4g} per iteration (forward and "
                     f"backward, recomputation counted): {p.tflops_per_device:.1f} TFLOP/s per "
                     f"device")
    lines.append(f"  per iteration   {c['task']} tasks, {c['copy']} copies, {c['reduce']} "
                 f"reductions, {c['allreduce']} all-reduces")
    comm = p.communication_bytes()
    lines.append(f"  communication   {comm['copy'] / 1e6:.3f} MB in copies, "
                 f"{comm['allreduce'] / 1e6:.3f} MB all-reduced")
    used = p.devices_used()
    if used <= n // 2:
        lines.append(f"  warning: the strategy uses {used} of the {n} devices; the other "
                     f"{n - used} stay idle. Search a strategy for this machine (--search "
                     "SECONDS), or simulate on a machine of the size the strategy was made for.")
    computes = p.compute_resources()
    busy = [r.busy.get(name, 0.0) for name in computes]
    util = [b / span if span else 0.0 for b in busy]
    lines.append(f"  devices busy    min {_ms(min(busy))}, median {_ms(statistics.median(busy))}"
                 f", max {_ms(max(busy))}; utilization {100 * min(util):.0f}-"
                 f"{100 * max(util):.0f}% (mean {100 * statistics.fmean(util):.0f}%)")
    if len(computes) <= 16:
        for name, b, u in zip(computes, busy, util):
            lines.append(f"    {name:<24} busy {_ms(b):>12}  {100 * u:5.1f}%")
    compute = set(computes)       # (once: 6,144 links x 1,024 devices at Megatron GPT@1,024)
    links = sorted(((v, k) for k, v in r.busy.items() if k not in compute), reverse=True)
    if links:
        top = ", ".join(f"{k} {_ms(v)}" for v, k in links[:3])
        lines.append(f"  links busy      {len(links)} used; busiest {top}")
    cap = {d: p.machine_model.device(d).memory_capacity for d in r.memory}
    worst = max(r.memory, key=lambda d: r.memory[d] / cap[d], default=None)
    if worst is not None:
        lines.append(f"  memory          at most {r.memory[worst] / 1e6:.1f} MB on device "
                     f"{worst} of {cap[worst] / 1e9:.3g} GB capacity")
    for d, over in sorted(r.over_capacity.items())[:8]:
        lines.append(f"    device {d}: needs {r.memory[d] / 1e9:.3g} GB, {over / 1e9:.3g} GB "
                     f"over its {cap[d] / 1e9:.3g} GB")
    lines.append(f"  task costs      {p.costs.summary().removeprefix('cost keys used: ')}")
    return "\n".join(lines)


def prediction_json(p: Prediction) -> dict:
    """The --json object: the keys of a real run's (apps/report.py), with predictions."""
    a, r = p.config, p.result
    t = r.makespan if r.valid else None
    computes = p.compute_resources()
    span = r.span
    return {"app": p.app.name,
            "parameters": parameters(p.network.model),
            "batch_size": a.batch_size,
            "iterations": 1,
            "devices": len(p.machine),
            "machine": str(p.machine_model),
            "simulated": True,
            "iteration_time_s": t,
            "samples_per_s": p.samples_per_s if t else None,
            "loss": None,
            "strategy": p.strategy_name,
            "calibrated_iteration_time_s": p.calibrated,
            # details
            "valid": r.valid,
            "machine_model": p.machine_model.name,
            "samples_per_s_per_device": p.samples_per_s / len(p.machine) if t else None,
            "model_flops": p.model_flops,
            "tflops_per_device": p.tflops_per_device,
            "ranks": p.machine.num_ranks,
            "runtime_machine": machine_text(p.machine),
            "small": a.small,
            "dtype": a.dtype,
            "seed": a.seed,
            "operators": len(p.network.model.ops),
            "graph": dict(p.graph.count(), bytes_moved=p.graph.bytes_moved()),
            "communication_bytes": p.communication_bytes(),
            "device_busy_s": {k: r.busy.get(k, 0.0) for k in computes},
            "device_utilization": {k: (r.busy.get(k, 0.0) / span if span else 0.0)
                                   for k in computes},
            "link_busy_s": {k: v for k, v in r.busy.items() if k not in set(computes)},
            "memory_bytes": {str(d): b for d, b in sorted(r.memory.items())},
            "memory_capacity_bytes": {str(d): p.machine_model.device(d).memory_capacity
                                      for d in sorted(r.memory)},
            "over_capacity_bytes": {str(d): b for d, b in sorted(r.over_capacity.items())},
            "devices_used": p.devices_used(),
            "cost_sources": p.costs.summary(),
            **({"search": p.search.to_dict()} if p.search is not None else {})}


def write_prediction_trace(path: str, p: Prediction, argv) -> None:
    """The simulated timeline as Chrome JSON, like a real run's --trace file."""
    events = trace_of(p.graph, p.result, p.timer)
    data = to_chrome(events, process_name=f"predicted on {p.machine_model}")
    data["otherData"] = {"soapflow": {"simulated": True, "app": p.app.name,
                                      "argv": list(argv), "machine": str(p.machine_model),
                                      "fingerprint": p.graph.fingerprint()}}
    with open(path, "w") as f:
        json.dump(data, f)
