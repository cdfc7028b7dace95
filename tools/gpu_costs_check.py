"""GPU check of the cost model (docs/costs.md): profile an app on the GPU, calibrate the
analytic model of its kind, and compare the profile with the same tasks run in an iteration.

    python3 tools/gpu_costs_check.py OUT_DIR [APP] [APP FLAGS...]     # default: alexnet --small

Writes OUT_DIR/<app>.<kind>.profile (copy it back: it calibrates simulations of this GPU
kind anywhere) and prints: profiling time, the calibration, the analytic model's error on the
measured keys, and per task measured-in-isolation / measured-in-iteration (median, p10, p90).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from strategy.costs import Profile, analytic_time, calibrate, load_app, profile_app  # noqa: E402
from strategy.costs.analytic import key_dtype, spec_numbers  # noqa: E402
from strategy.costs.profile import device_kind  # noqa: E402
from strategy.machine_model import DEVICE_SPECS  # noqa: E402
from taskrt import Machine  # noqa: E402
from taskrt.taskgraph import TASK  # noqa: E402


def main(out, app="alexnet", *argv):
    argv = list(argv) or ["--small"]
    torch.set_num_threads(1)
    kind = device_kind("cuda")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{app}.{kind}.profile")
    t = time.perf_counter()
    prof = profile_app(app, argv, devices=2, device="cuda", repeats=5, warmup=2, output=path)
    print(f"profiled {app} {' '.join(argv)} on {kind} ({torch.cuda.get_device_name()}): "
          f"{len(prof)} keys in {time.perf_counter() - t:.1f} s, {len(prof.failures)} failed")
    for f in list(prof.failures.values())[:3]:
        print("  failure:", f)
    prof = Profile.load(path)
    spec = DEVICE_SPECS.get(kind)
    if spec is not None:
        cal = calibrate(prof, spec)
        print("calibration:", cal)
        ratios = sorted(analytic_time(prof.work[k], *spec_numbers(spec, key_dtype(k))[:2], cal)
                        / m.seconds for (k, d), m in prof.times.items() if d == kind)
        print(f"analytic/measured over {len(ratios)} keys: median {statistics.median(ratios):.2f}"
              f", p10 {ratios[len(ratios) // 10]:.2f}, p90 {ratios[9 * len(ratios) // 10]:.2f}")
    net = load_app(app, argv, 2)
    opt = net.optimizer
    trainer = net.model.compile(Machine.local(2, "cuda", num_gpus=1), {}, opt,
                                record_trace=True, executor="local")
    runs = {}
    for it in range(6):
        trainer.step(net.synthetic(0, it))
        torch.cuda.synchronize()
        if it >= 2:
            for ev in trainer.executor.trace:
                if ev.kind is TASK:
                    runs.setdefault(ev.node, []).append(ev.end - ev.start)
    ratios, iso, situ = [], 0.0, 0.0
    for nid, ts in runs.items():
        m = prof.get(trainer.graph.nodes[nid].cost_key, kind)
        if m is not None:
            ratios.append(m.seconds / statistics.median(ts))
            iso += m.seconds
            situ += statistics.median(ts)
    ratios.sort()
    print(f"isolation/iteration per task over {len(ratios)} tasks: median "
          f"{statistics.median(ratios):.2f}, p10 {ratios[len(ratios) // 10]:.2f}, p90 "
          f"{ratios[9 * len(ratios) // 10]:.2f}; sums {iso * 1e3:.1f} / {situ * 1e3:.1f} ms "
          "(iteration times are host times of asynchronous launches)")


if __name__ == "__main__":
    main(*sys.argv[1:])
