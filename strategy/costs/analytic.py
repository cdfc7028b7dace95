"""The analytic cost of a part on a device one may not have, and its calibration.

    time = overhead + kernels * kernel_overhead
           + max(flops / (peak(dtype) * efficiency(flops)), bytes / (memory_bandwidth * mem_eff))
    efficiency(s) = eff_max * s / (s + s_half)

`efficiency` is the fraction of peak a part of `s` FLOPs reaches: it rises with the work and
is half of `eff_max` at `s = s_half`. (So the compute term is (flops + s_half) / (peak *
eff_max): a part pays for s_half FLOPs it does not do, as small kernels do.) A part with no
FLOPs (elementwise, copies, optimizer updates) is memory bound. `overhead` is what a task
costs beyond its kernels (the runtime's host work per task); `kernel_overhead` is paid per
kernel the part launches (the spec's launch overhead: per kernel on a GPU, per op on a CPU),
which is what small parts on a GPU mostly cost.

Calibration fits (overhead, kernel_overhead, eff_max, s_half, mem_eff) to a measured profile
of one device kind by least squares on log time: Levenberg-Marquardt over the logs of the
times and of s_half and the logits of the two efficiencies (kept in (0, 1]), from several
starts, with a weak pull towards the defaults so that terms the data does not exercise (say,
compute efficiency in a profile of memory-bound parts) stay at their defaults. A profile from
one GPU kind thus calibrates the analytic model of that kind.

Device specs are strategy.machine_model.DeviceSpec: peak_flops(dtype), the memory bandwidth
and launch_overhead are read (`spec_numbers`), and `kind` names the device in profiles.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .profile import Profile, Work

# Defaults before calibration: a part reaches half of eff_max when its work equals HALF_TIME
# seconds at peak (a few microseconds: small kernels are latency bound); the runtime's host
# work per task is TASK_OVERHEAD (the executor's step, one autograd call per backward part).
HALF_TIME = 5e-6
TASK_OVERHEAD = 10e-6
DEFAULT_EFF = {"gpu": (0.7, 0.8), "cpu": (0.5, 0.5)}     # (eff_max, mem_eff)
MIN_POINTS = 8                                            # measurements needed to calibrate


class CalibrationError(ValueError):
    """A profile cannot calibrate the analytic model (too few usable measurements)."""


@dataclass(frozen=True)
class Calibration:
    """Parameters of the analytic model for one device kind (see the module doc)."""
    kind: str
    overhead: float          # seconds per task
    kernel_overhead: float   # seconds per kernel
    eff_max: float           # fraction of peak FLOP/s reached by large parts
    s_half: float            # FLOPs at which a part reaches half of eff_max
    mem_eff: float           # fraction of memory bandwidth reached
    points: int = 0          # measurements fitted (0: defaults, not calibrated)
    rms_log_error: float = 0.0

    @property
    def calibrated(self) -> bool:
        return self.points > 0

    def __str__(self) -> str:
        how = (f"fitted to {self.points} measurements, rms log error "
               f"{self.rms_log_error:.3f}" if self.calibrated else "defaults")
        return (f"{self.kind}: overhead {self.overhead * 1e6:.3g} us + "
                f"{self.kernel_overhead * 1e6:.3g} us/kernel, eff_max {self.eff_max:.3g}, "
                f"s_half {self.s_half:.3g} FLOP, mem_eff {self.mem_eff:.3g} ({how})")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "overhead": self.overhead,
                "kernel_overhead": self.kernel_overhead, "eff_max": self.eff_max,
                "s_half": self.s_half, "mem_eff": self.mem_eff, "points": self.points,
                "rms_log_error": self.rms_log_error}

    @staticmethod
    def from_dict(d: dict) -> "Calibration":
        return Calibration(str(d["kind"]), float(d["overhead"]), float(d["kernel_overhead"]),
                           float(d["eff_max"]), float(d["s_half"]), float(d["mem_eff"]),
                           int(d.get("points", 0)), float(d.get("rms_log_error", 0.0)))


# -- device specs ------------------------------------------------------------------------------
def spec_numbers(spec, dtype: str = "float32") -> tuple[float, float, float]:
    """(peak FLOP/s for dtype, memory bandwidth B/s, launch overhead s) of a DeviceSpec."""
    bw = getattr(spec, "mem_bandwidth", None) or getattr(spec, "memory_bandwidth", None)
    if bw is None:
        raise TypeError(f"device spec {spec!r} has no mem_bandwidth; pass a "
                        "strategy.machine_model.DeviceSpec.")
    return float(spec.peak_flops(dtype)), float(bw), float(spec.launch_overhead or 0.0)


def device_class(kind: str) -> str:
    return "cpu" if kind.lower().startswith("cpu") else "gpu"


def default_calibration(spec) -> Calibration:
    """The analytic model's parameters for a device kind nobody measured."""
    peak, _, launch = spec_numbers(spec)
    eff, mem = DEFAULT_EFF[device_class(spec.kind)]
    return Calibration(spec.kind, TASK_OVERHEAD, launch, eff, peak * eff * HALF_TIME, mem)


# -- the model ---------------------------------------------------------------------------------
def key_dtype(key) -> str:
    """The compute dtype of a cost key: its first floating-point part's dtype."""
    for _, _, dt in key[1]:
        if dt.startswith(("float", "bfloat")):
            return dt
    return "float32"


def terms(work: Work, peak: float, bandwidth: float, c: Calibration) -> tuple[float, ...]:
    """(overheads, compute, memory) seconds of the model, for explanations."""
    compute = 0.0
    if work.flops > 0:
        compute = (work.flops + c.s_half) / (peak * c.eff_max)
    return (c.overhead + work.kernels * c.kernel_overhead, compute,
            work.bytes / (bandwidth * c.mem_eff))


def analytic_time(work: Work, peak: float, bandwidth: float, c: Calibration) -> float:
    """Seconds of a part of `work` on a device of this peak and bandwidth (module doc)."""
    fixed, compute, memory = terms(work, peak, bandwidth, c)
    return fixed + max(compute, memory)


# -- calibration -------------------------------------------------------------------------------
def _points(profile: Profile, spec):
    rows = []
    for (key, kind), m in profile.times.items():
        w = profile.work.get(key)
        if kind != spec.kind or w is None or m.seconds <= 0:
            continue
        peak, bw, _ = spec_numbers(spec, key_dtype(key))
        rows.append((w.flops, w.bytes, w.kernels, peak, bw, m.seconds))
    return np.array(rows, dtype=float).reshape(-1, 6).T


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def _params(theta):
    """(overhead, kernel_overhead, eff_max, s_half, mem_eff) from the fitted vector."""
    return (math.exp(theta[0]), math.exp(theta[1]), float(_sigmoid(theta[2])),
            math.exp(theta[3]), float(_sigmoid(theta[4])))


def _theta(overhead, kernel_overhead, eff_max, s_half, mem_eff):
    return np.array([math.log(overhead), math.log(kernel_overhead), _logit(eff_max),
                     math.log(s_half), _logit(mem_eff)])


def _predict(theta, flops, nbytes, kernels, peaks, bws):
    overhead, kernel, eff, s_half, mem = _params(theta)
    compute = np.where(flops > 0, (flops + s_half) / (peaks * eff), 0.0)
    return overhead + kernels * kernel + np.maximum(compute, nbytes / (bws * mem))


def _lm(resid, x0, iters: int = 100):
    """Levenberg-Marquardt with a forward-difference Jacobian; returns (x, cost)."""
    x = np.array(x0, dtype=float)
    r = resid(x)
    cost = float(r @ r)
    mu = 1e-3
    for _ in range(iters):
        h = 1e-6
        J = np.empty((r.size, x.size))
        for j in range(x.size):
            e = np.zeros_like(x)
            e[j] = h
            J[:, j] = (resid(x + e) - r) / h
        A, g = J.T @ J, J.T @ r
        while True:
            dx = np.linalg.solve(A + mu * (np.diag(np.diag(A)) + 1e-12 * np.eye(x.size)), -g)
            rn = resid(x + dx)
            cn = float(rn @ rn)
            if cn < cost:
                x, r, improvement, cost = x + dx, rn, cost - cn, cn
                mu = max(mu / 3, 1e-12)
                break
            mu *= 4
            if mu > 1e12:
                return x, cost
        if improvement < 1e-14 * max(cost, 1e-30) or np.max(np.abs(dx)) < 1e-10:
            break
    return x, cost


def calibrate(profile: Profile, spec, prior_weight: float = 1e-3) -> Calibration:
    """Fit the analytic model of `spec.kind` to the profile's measurements of that kind.

        cal = calibrate(Profile.load("h200.profile"), machine.device(0))
        CostModel(calibrations={cal.kind: cal})
    """
    flops, nbytes, kernels, peaks, bws, times = _points(profile, spec)
    n = times.size
    if n < MIN_POINTS:
        raise CalibrationError(
            f"calibrate {spec.kind}: the profile has {n} usable measurement(s) of this kind "
            f"(kinds in it: {', '.join(profile.kinds()) or 'none'}); at least {MIN_POINTS} "
            "are needed. Profile an app on that device first (python -m strategy.costs "
            "profile APP --device cuda).")
    d = default_calibration(spec)
    prior = _theta(d.overhead, max(d.kernel_overhead, 1e-7), d.eff_max, d.s_half, d.mem_eff)
    log_t = np.log(times)
    w = prior_weight * math.sqrt(n)

    def resid(theta):
        pred = _predict(theta, flops, nbytes, kernels, peaks, bws)
        return np.concatenate([np.log(pred) - log_t, w * (theta - prior)])

    best = None
    starts = [prior]
    t_min = float(np.min(times))
    for oh in (t_min * 0.5, t_min * 0.05):
        for sh in (d.s_half * 1e-2, d.s_half, d.s_half * 1e2):
            starts.append(_theta(oh, oh * 0.1, d.eff_max, sh, d.mem_eff))
    for x0 in starts:
        x, cost = _lm(resid, x0)
        if best is None or cost < best[1]:
            best = (x, cost)
    theta = best[0]
    fit = np.log(_predict(theta, flops, nbytes, kernels, peaks, bws)) - log_t
    return Calibration(spec.kind, *_params(theta), n, float(np.sqrt(np.mean(fit ** 2))))
