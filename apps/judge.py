"""--search on a calibrated machine: the result judged by the whole calibrated model.

The search's simulator runs the smooth model of `python -m strategy calibrate`'s two files
(task times and host costs times contention x factor). The calibration's own prediction
(strategy.calibration.predict) has more: the MPI executor's gradient buckets and their
collectives' waits, the ranks' speeds in one iteration, their wake-ups, the contention of
ranks working side by side. When --machine is such a file (its calibration record holds the
prediction: calibration.fit_from_files) and --profile the profile written with it, the
searched strategy, data parallelism and the search's other starts (the app's expert
strategy, --strategy) are predicted by the calibration, the fastest by it is the result,
and a line says which model judged it: a search does not return a strategy that the
calibrated model predicts slower than data parallelism, nor one it predicts faster by less
than the calibration's error on strategies held out of its fit (Fit.heldout, estimated by
calibrate itself: strategy/heldout.py), or, where it has none (fewer than 3 strategies in
its traces, a file written before 2026-12-07), its error on its own runs (Fit.error); the
line names which (strategy.heldout.margin; docs/simulator.md).
"""
from __future__ import annotations

from .errors import UsageError

SEARCHED = "searched"
DATA_PARALLEL = "data parallel"


def calibration_of(config):
    """(Fit, ranks, devices per rank) of the calibration --machine was written by, or None
    (a preset, `local`, a machine file without the record). Checked before the search: a
    profile not written with it is refused here, not after the search's time."""
    from strategy.calibration import CalibrationError, fit_from_files
    from strategy.costs.profile import Profile, ProfileError
    from .hooks import machine_model
    if not config.machine or not config.profile:
        return None
    base = machine_model(config.machine)
    if not (base.calibration.get("from_traces") or {}).get("prediction"):
        return None
    try:
        fit = fit_from_files(base, Profile.load(config.profile), f"--machine {config.machine}")
    except (CalibrationError, ProfileError) as e:
        raise UsageError(f"--profile {config.profile}: {e}") from None
    ranks, per_rank = base.calibration["from_traces"]["layout"]
    return fit, int(ranks), int(per_rank)


def unjudged_note(config) -> str | None:
    """What to tell a user whose --machine was calibrated from traces but holds no record
    of the whole model (written before 2026-12-04 22:30), or who gave no --profile: the
    search's result is then not judged."""
    from .hooks import machine_model
    if not config.machine:
        return None
    traces = machine_model(config.machine).calibration.get("from_traces")
    if not traces or (traces.get("prediction") and config.profile):
        return None
    why = ("give --profile NAME.profile, written with it" if traces.get("prediction") else
           "it predates the record of the whole model: calibrate again")
    return (f"note: --machine {config.machine} is a calibration, but the search's result "
            f"was not judged by its whole model ({why}; docs/search.md)")


def candidates(app, net, mm, searched: dict, starts: dict) -> dict:
    """{name: configs}: the searched strategy, data parallelism, the app's expert strategy
    and the search's other starts, each once (the first name of equal configs)."""
    from strategy import standard
    from strategy.experts import expert_for
    out = {SEARCHED: searched,
           DATA_PARALLEL: standard.data_parallel(net.model, list(range(mm.num_devices)))}
    expert = expert_for(app, net.model, mm)
    if expert is not None:
        out["expert"] = expert
    for name, configs in starts.items():
        out.setdefault(name, configs)
    kept = {}
    for name, configs in out.items():
        if all(configs != c for c in kept.values()):
            kept[name] = configs
    return kept


def judge(calibration: tuple, mm, net, named: dict, optimizer) -> list:
    """[(predicted s, name)] of the named strategies by the calibration's prediction,
    fastest first (calibration.judged), their graphs built as a run would (lower + plan on
    the searched machine model's devices)."""
    from parallel_ops.lowering import lower
    from strategy.calibration import judged
    from taskrt import plan
    fit, ranks, per_rank = calibration
    machine = mm.taskrt_machine()
    graphs = {}
    for name, configs in named.items():
        lowered = lower(net.model, configs, machine, optimizer)
        graphs[name] = plan(lowered.launches, machine, initial=lowered.initial)
    return judged(fit, graphs, net.int_ranges, ranks, per_rank)


def verdict_text(times: list, machine: str, margin: tuple = (0.0, "no error")) -> str:
    """The line saying which model judged the search's result and what it kept
    (strategy.heldout.kept: data parallelism unless another is predicted faster by more
    than the margin: (relative error, what it is) of strategy.heldout.margin)."""
    from strategy.heldout import kept as kept_of
    error, what = margin
    best = kept_of(times, error, DATA_PARALLEL)
    every = ", ".join(f"{name} {t * 1e3:.4g} ms" for t, name in times)
    judged_dp = any(name == DATA_PARALLEL for _, name in times)
    if best != times[0][1]:
        kept = (f"keeping {DATA_PARALLEL}: {times[0][1]} is predicted faster by less than "
                f"{what}")
    elif best == SEARCHED:
        kept = "the searched strategy is the fastest" + (
            f", by more than {what}" if judged_dp else "")
    else:
        kept = (f"keeping {best}: the calibrated model predicts it faster than the searched "
                "strategy, which the search's own (smooth) model preferred")
    if not judged_dp:
        every += " (the searched strategy is data parallel)"
    return (f"judged by the calibration of --machine {machine} (calibration.predict: "
            f"gradient buckets, ranks' speeds, wake-ups; not the search's model): {every}; "
            f"{kept}")


def check_layout(calibration: tuple, mm, config) -> None:
    """The calibration's layout must be the searched machine's devices."""
    _, ranks, per_rank = calibration
    if ranks * per_rank != mm.num_devices:
        raise UsageError(f"--machine {config.machine}: calibrated on {ranks} x {per_rank} "
                         f"devices, the search is for {mm.num_devices}")
