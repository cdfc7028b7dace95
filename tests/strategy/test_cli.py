"""python -m strategy: search, simulate, show and diff through the apps' own flags, in process
(the search is short: these check the plumbing and the files, not the search's quality)."""
import json

import pytest

from strategy import files
from strategy.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::strategy.costs.CostWarning")

APP = ["--app", "alexnet", "--small", "--machine", "p100:1"]


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "alexnet.json"
    return out


def test_search_writes_a_strategy_that_simulate_predicts_alike(searched, capsys):
    assert main(["search"] + APP + ["--budget", "4", "-o", str(searched), "--json"]) == 0
    text = capsys.readouterr().out
    result = last_json(text)
    assert "best found" in text and "searched vs data parallel" in text
    assert result["simulated"] is True and result["devices"] == 4
    search = result["search"]
    assert search["predicted_s"] <= search["baselines_s"]["data_parallel"]
    assert {"data_parallel", "expert"} <= set(search["baselines_s"])
    assert result["iteration_time_s"] == pytest.approx(search["predicted_s"], rel=1e-12)
    sf = files.read(str(searched))
    assert sf.model == "alexnet" and sf.machine["devices"] == 4
    # the file is a strategy like any other: simulate it and get the same prediction
    assert main(["simulate"] + APP + ["--strategy", str(searched), "--json"]) == 0
    again = last_json(capsys.readouterr().out)
    assert again["iteration_time_s"] == pytest.approx(search["predicted_s"], rel=1e-12)
    assert again["strategy"] == str(searched)


def test_simulate_without_a_strategy_is_data_parallel(capsys):
    assert main(["simulate"] + APP + ["--json"]) == 0
    res = last_json(capsys.readouterr().out)
    assert res["strategy"] == "data_parallel" and res["iteration_time_s"] > 0
    assert "search" not in res


def test_show_and_diff(searched, tmp_path, capsys):
    if not searched.exists():
        pytest.skip("needs the search test's file")
    assert main(["show", str(searched), "--app", "alexnet", "--small"]) == 0
    text = capsys.readouterr().out
    for op in ("conv1", "fc8", "loss"):
        assert op in text
    assert main(["show", str(searched), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "alexnet"
    dp = tmp_path / "dp.json"
    sf = files.read(str(searched))
    from parallel_ops import ParallelConfig
    changed = dict(sf.configs)
    # fc8 unsplit on a device other than its searched config's first (the search may have
    # put it on device 3 alone: a change must differ from it)
    moved = 2 if sf.configs["fc8"].devices[:1] == (3,) else 3
    changed["fc8"] = ParallelConfig((), (moved,))
    files.save_file(str(dp), files.StrategyFile(sf.model, sf.machine, changed, sf.types))
    assert main(["diff", str(searched), str(dp)]) == 0
    out = capsys.readouterr().out
    assert "fc8" in out and "conv1" not in out
    assert main(["diff", str(searched), str(searched)]) == 0
    assert "identical" in capsys.readouterr().out


def test_errors_are_clear_and_exit_2(tmp_path, capsys):
    assert main(["search", "--app", "nosuchapp", "--budget", "1"]) == 2
    assert "no such app" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["diff", str(bad), str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert main(["search"] + APP + ["--budget", "0"]) == 2     # named as the user wrote it
    assert "--budget 0: give the search a positive number of seconds" in \
        capsys.readouterr().err


def test_a_bad_output_path_is_refused_before_the_search(tmp_path, capsys):
    """-o into a missing directory: refused at once (the search used to run, then fail
    with a traceback and lose its result)."""
    out = tmp_path / "missing" / "s.json"
    assert main(["search"] + APP + ["--budget", "600", "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert f"-o {out}: the directory {out.parent} does not exist" in captured.err
    assert "searching" not in captured.out and "Traceback" not in captured.err
    assert main(["search"] + APP + ["--budget", "600", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_help_of_search_and_simulate_lists_the_app_flags(capsys):
    assert main(["simulate", "--app", "rnnlm", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--app", "--small", "--strategy", "--machine", "--devices-per-rank",
                 "--vocab", "p100 (16 GPUs: 4 nodes x 4 P100)"):
        assert flag in " ".join(out.split()), flag
    assert main(["search", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--budget" in out and "Add --app NAME" in out
    assert "alexnet" in out and "transformer" in out          # the registered apps


def test_search_then_train_under_mpirun(tmp_path):
    # Rank 0 searches (the other rank sleeps), every rank trains with the same result.
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mpi_launch import ROOT, run_mpi
    out = tmp_path / "searched.json"
    rc, text, _ = run_mpi(2, [os.path.join(ROOT, "apps", "alexnet.py"), "--small",
                              "--batch-size", "4", "--search", "3", "--iterations", "1",
                              "--warmup", "0", "--json", "--export", str(out)], timeout=300)
    assert rc == 0, text
    res = last_json(text)
    assert res["strategy"].startswith("searched") and res["simulated"] is False
    assert res["search"]["predicted_s"] <= res["search"]["baselines_s"]["data_parallel"]
    assert res["devices"] == 2 and res["loss"] is not None
    assert files.read(str(out)).machine["devices"] == 2
    assert "these times come from the analytic cost model" in text     # no --profile


def test_a_proposal_bounded_search_repeats_exactly(tmp_path, capsys):
    outs = [tmp_path / f"s{k}.msgpack" for k in range(2)]
    for out in outs:
        assert main(["search"] + APP + ["--budget", "600", "--proposals", "30", "--seed", "5",
                                        "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "searched 30 proposals" in text
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert main(["search"] + APP + ["--budget", "5", "--proposals", "0"]) == 2
    assert "--proposals 0: give a positive number of proposals" in capsys.readouterr().err


def test_a_users_own_app_file_is_a_workload(tmp_path, capsys):
    """A Python file defining APP (outside the apps package) works like a built-in app."""
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "apps",
                        "tiny_app.py")
    assert main(["simulate", "--app", path, "--machine", "p100:1", "--json"]) == 0
    res = last_json(capsys.readouterr().out)
    assert res["app"] == "tiny" and res["devices"] == 4 and res["simulated"] is True
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    assert main(["simulate", "--app", str(empty), "--machine", "p100:1"]) == 2
    assert f"--app {empty}: the module defines no APP record" in capsys.readouterr().err
    empty.write_text("APP = [1]\n")
    assert main(["simulate", "--app", str(empty)]) == 2
    assert "its APP (list) lacks main(argv) and build_from_flags" in capsys.readouterr().err


def test_replay_of_a_missing_trace_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", "--app", "alexnet", "--small",
                 "--run-trace", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "none.json: cannot read it" in err and "Traceback" not in err
