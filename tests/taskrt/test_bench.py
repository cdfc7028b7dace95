"""The benchmark harness runs every benchmark module and writes its two result files."""
import json

import pytest

from bench.__main__ import benchmark_modules, main


def test_bench_quick_run_writes_results(tmp_path, capsys):
    # Every public module of bench/ is a benchmark; the fast ones of the runtime are run here.
    mine = ["executor_overhead", "planner_scaling"]
    assert set(mine) <= set(benchmark_modules())
    assert not any(m.startswith("_") for m in benchmark_modules())
    assert main(["--quick", "--out", str(tmp_path)] + mine) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["quick"] is True and list(doc["benchmarks"]) == mine
    planner = doc["benchmarks"]["planner_scaling"]["results"]
    assert planner["ratio_per_task"] > 0 and planner["128"]["tasks"] >= 128
    assert doc["benchmarks"]["executor_overhead"]["results"]["us_per_task"]["executor"] > 0
    table = (tmp_path / "results.md").read_text()
    assert "| benchmark | metric | value | notes |" in table
    assert "executor overhead per task" in table and "per-task cost" in table
    assert table.split("\n\n", 1)[1] in capsys.readouterr().out


def test_bench_rejects_unknown_names(tmp_path, capsys):
    assert main(["nope", "--out", str(tmp_path)]) == 2
    assert "unknown benchmark(s) ['nope']" in capsys.readouterr().err


def test_bench_run_by_name_keeps_the_other_entries(tmp_path):
    # A run of one benchmark updates its entry and keeps the others of the same kind.
    assert main(["--quick", "--out", str(tmp_path), "executor_overhead", "planner_scaling"]) == 0
    first = json.loads((tmp_path / "results.json").read_text())["benchmarks"]
    assert main(["--quick", "--out", str(tmp_path), "executor_overhead"]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert list(doc["benchmarks"]) == ["executor_overhead", "planner_scaling"]
    assert doc["benchmarks"]["planner_scaling"] == first["planner_scaling"]
    assert doc["benchmarks"]["executor_overhead"]["date"] >= first["executor_overhead"]["date"]
    assert "planner" in (tmp_path / "results.md").read_text().lower()


def test_bench_merges_entries_of_another_run(tmp_path):
    other = tmp_path / "other"
    assert main(["--quick", "--out", str(other), "executor_overhead"]) == 0
    out = tmp_path / "main"
    assert main(["--quick", "--out", str(out), "planner_scaling"]) == 0
    assert main(["--quick", "--out", str(out), "--merge", str(other / "results.json")]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert set(doc["benchmarks"]) == {"planner_scaling", "executor_overhead"}
    assert main(["--out", str(out), "--merge", str(other / "results.json")]) == 2


def test_data_parallel_jobs_take_turns():
    # Three mpirun jobs (ours and DDP on 2 ranks, ours on 1) alternate in blocks; every block
    # after the warm-up one comes back from each, in the same number of iterations.
    from bench.data_parallel import run
    res = run(quick=True)
    its = res["data"]["iterations"]
    assert set(its) == {"ours", "ddp", "one_rank"}
    assert all(len(rows) == 2 and all(t > 0 for t, _ in rows) for rows in its.values())
    assert all(w == 0 for _, w in its["ddp"] + its["one_rank"])   # only ours waits on MPI
    assert [r[0] for r in res["rows"]][0] == "2 ranks: ours / torch DDP (gloo)"


def test_alternating_mpi_reports_a_job_that_dies():
    from bench._common import alternating_mpi
    with pytest.raises(RuntimeError, match=r"(?s)_dist_worker.py \(bad\) under mpirun exited.*"
                                           r"side 'nope'; expected ours or ddp"):
        alternating_mpi({"bad": (1, "_dist_worker.py", ["2", "nope"])}, blocks=1,
                        per_block=1, timeout=120)


def test_sim_scaling_quick_points_report_per_node_cost_and_its_growth():
    from bench import sim_scaling
    out = sim_scaling.run(quick=True)
    small, big = out["results"]["dp@8"], out["results"]["dp@16"]
    for r in (small, big):
        assert r["valid"] and r["nodes"] > 0 and r["us_per_node"] > 0 and r["first_cpu_s"] > 0
        assert r["peak_rss_gb"] >= r["base_rss_gb"] > 0
    assert big["nodes"] > small["nodes"]
    deep = out["results"]["dp@16x4/predict"]          # --simulate's path, 4 blocks, once
    assert deep["valid"] and deep["first_cpu_s"] is None and deep["layers"] == 4
    assert 1.5 * big["nodes"] < deep["nodes"] < 2 * big["nodes"]
    assert deep["iteration_s"] > big["iteration_s"]
    assert out["results"]["dp_growth"] == big["us_per_node"] / small["us_per_node"]
    assert [row[0] for row in out["rows"]][3] == \
        "GPT 2.7B widths, dp: per-node cost and memory, 16 / 8 GPUs"


def test_sim_scaling_reports_full_depth_growth_from_fewest_to_most_gpus():
    from bench import sim_scaling

    def point(kind, gpus, nodes, cpu, kb):
        return {"kind": kind, "gpus": gpus, "layers": sim_scaling.FULL_DEPTH, "path": "predict",
                "nodes": nodes, "cpu_s": cpu, "first_cpu_s": None, "us_per_node": cpu / nodes * 1e6,
                "peak_rss_gb": 1.0, "base_rss_gb": 0.2, "kb_per_node": kb, "valid": True}
    pts = [point("megatron", 4096, 160, 2.0, 0.5), point("megatron", 256, 10, 0.1, 1.0),
           point("megatron", 1024, 40, 0.45, 0.8)]
    out = sim_scaling.report({str(i): p for i, p in enumerate(pts)})
    assert out["results"]["megatronx32_growth"] == (2.0 / 160) / (0.1 / 10)
    row = [r for r in out["rows"] if "per-node cost" in r[0]]
    assert len(row) == 1 and row[0][0].endswith("megatron: per-node cost and memory, 4096 / 256 GPUs")
    assert row[0][1] == "1.25x us/node, 0.50x KB/node"
