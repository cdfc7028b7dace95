"""The shared command line (apps/common.py), flag by flag, including the message each
misuse gives (exit status 2, no traceback); the scikit-learn digits path; and the real
scripts: one process with --json, and a usage error under mpirun ending every rank."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from app_cases import app_module  # noqa: E402
from apps.common import main, parameters, run  # noqa: E402
from strategy import files  # noqa: E402
from taskrt import Machine  # noqa: E402
from test_apps import run_mpirun  # noqa: E402

RNNLM = app_module("rnnlm").APP
NMT = app_module("nmt").APP
SMALL = ["--small", "--batch-size", "4", "--iterations", "2", "--warmup", "0"]
KEYS = ("app", "parameters", "batch_size", "iterations", "devices", "machine", "simulated",
        "iteration_time_s", "samples_per_s", "loss", "strategy")


def cli(capsys, app, argv):
    """main(app, argv) -> (exit status, stdout, stderr)."""
    code = main(app, argv)
    out, err = capsys.readouterr()
    return code, out, err


def fails(capsys, app, argv, *fragments):
    code, out, err = cli(capsys, app, argv)
    assert code == 2, out + err
    assert "Traceback" not in err + out
    assert err.startswith(f"{app.name}: error: ")
    for f in fragments:
        assert f in err, f"{f!r} not in {err!r}"
    return err


def test_json_is_the_last_line_and_human_output_comes_first(capsys):
    code, out, _ = cli(capsys, RNNLM, SMALL + ["--warmup", "1", "--json"])
    assert code == 0
    lines = out.splitlines()
    result = json.loads(lines[-1])
    assert all(k in result for k in KEYS)
    assert result["app"] == "rnnlm" and result["batch_size"] == 4 and result["devices"] == 1
    assert result["iterations"] == 2 and len(result["iteration_times_s"]) == 2
    assert len(result["losses"]) == 3 and result["loss"] == result["losses"][-1]
    assert result["simulated"] is False and result["strategy"] == "data_parallel"
    assert result["samples_per_s"] == pytest.approx(4 / result["iteration_time_s"])
    assert result["machine"] == "1 cpu device on 1 rank"
    text = "\n".join(lines[:-1])
    for fragment in ("RNNLM --small: 33,536 parameters", "torch threads per rank 1",
                     "Strategy:", "softmax_fc", "iter 1/3 [", "(warm-up)", "samples/s (",
                     "/device)", "Done: RNNLM", "throughput", "per iteration"):
        assert fragment in text, fragment


def test_parameters_count_trainable_scalars_only():
    """Batch norm running statistics are weights of the graph but not parameters."""
    app = app_module("resnet").APP
    res = run(app, ["--small", "--depth", "50", "--batch-size", "2", "--iterations", "1",
                    "--quiet", "--image-size", "32"], out=None)
    model = res.network.model
    assert parameters(model) < model.num_parameters
    assert res.json()["parameters"] == parameters(model)


def test_seed_makes_runs_repeatable():
    a = run(RNNLM, SMALL + ["--quiet", "--seed", "3"], out=None).losses
    b = run(RNNLM, SMALL + ["--quiet", "--seed", "3"], out=None).losses
    c = run(RNNLM, SMALL + ["--quiet", "--seed", "4"], out=None).losses
    assert a == b and a != c


def test_export_then_import_gives_the_same_run(tmp_path, capsys):
    path = str(tmp_path / "used.json")
    first = run(RNNLM, SMALL + ["--quiet", "--devices-per-rank", "2", "--export", path],
                out=None)
    sf = files.read(path)
    assert sf.model == "rnnlm" and list(sf.configs) == [o.name for o in first.network.model.ops]
    assert sf.configs["softmax_fc"].degrees == (("n", 2),)       # data parallel filled in
    second = run(RNNLM, SMALL + ["--quiet", "--devices-per-rank", "2", "--strategy", path],
                 out=None)
    assert second.losses == first.losses and second.strategy_name == path
    assert second.json()["strategy"] == path


def test_devices_per_rank_and_trace(tmp_path):
    path = str(tmp_path / "t.json")
    res = run(RNNLM, SMALL + ["--quiet", "--devices-per-rank", "2", "--trace", path], out=None)
    assert res.json()["devices"] == 2
    trace = json.load(open(path))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"device 0", "device 1"} <= tracks
    assert len(events) == len(res.trainer.graph.nodes)


@pytest.mark.parametrize("argv,fragments", [
    (["--search", "0"], ["--search 0: give the search a positive number of seconds"]),
    (["--search", "5", "--machine", "p100"], ["--machine p100: its model has 16 devices and "
                                              "this job runs on 1", "or add --simulate"]),
    (["--machine", "p100"], ["--machine p100: a machine model is for --simulate",
                             "Add --simulate, or leave out --machine"]),
    (["--machine", "p100x99", "--simulate"], ["--machine p100x99: machine 'p100x99': not a "
                                              "preset nor a file; did you mean 'p100x4'?"]),
    (["--machine", "cluster.json", "--simulate"], ["--machine cluster.json"]),
    (["--profile", "costs.profile"], ["--profile costs.profile: no such file"]),
    (["--check-prediction", "3"], ["--check-prediction 3: give a positive number of "
                                   "iterations, with --search SECONDS"]),
    (["--search", "5", "--check-prediction", "0"], ["--check-prediction 0"]),
    (["--search", "5", "--simulate", "--check-prediction", "2"], ["without --simulate"]),
    (["--search-ranks", "2"], ["--search-ranks 2: give a positive count, with --search"]),
    (["--search", "5", "--search-ranks", "0"], ["--search-ranks 0: give a positive count"]),
])
def test_simulator_and_search_flag_mistakes(capsys, argv, fragments):
    fails(capsys, RNNLM, SMALL + argv, *fragments)


@pytest.mark.parametrize("argv,fragments", [
    (["--dtype", "float16"], ["argument --dtype: invalid choice: 'float16'", "usage:"]),
    (["--iterations", "0"], ["--iterations 0: run at least 1 iteration"]),
    (["--warmup", "-1"], ["--warmup -1"]),
    (["--batch-size", "0"], ["--batch-size 0: use a positive global batch size"]),
    (["--devices-per-rank", "0"], ["--devices-per-rank 0"]),
    (["--data", "digits"], ["unrecognized arguments: --data digits"]),
    (["--hidden", "0"], ["--hidden 0: use a positive value"]),
    (["--strategy", "/nonexistent/s.json"], ["--strategy /nonexistent/s.json: no such file"]),
])
def test_misused_flags(capsys, argv, fragments):
    fails(capsys, RNNLM, SMALL + argv, *fragments)


def test_batch_size_the_strategy_cannot_split(tmp_path, capsys):
    fails(capsys, RNNLM, SMALL + ["--batch-size", "1", "--devices-per-rank", "2"],
          "--batch-size 1 cannot be split over 2 devices", "Use a batch of at least 2")
    path = str(tmp_path / "s.json")
    run(RNNLM, SMALL + ["--quiet", "--devices-per-rank", "2", "--export", path], out=None)
    fails(capsys, RNNLM, SMALL + ["--batch-size", "1", "--devices-per-rank", "2",
                                  "--strategy", path],
          f"strategy file {path} does not fit model 'rnnlm'",
          "degree 2 on 'n' exceeds its extent 1; use at most 1")


def test_strategy_file_for_another_model(tmp_path, capsys):
    path = str(tmp_path / "rnnlm.msgpack")
    run(RNNLM, SMALL + ["--quiet", "--export", path], out=None)
    err = fails(capsys, NMT, SMALL + ["--strategy", path],
                "the file is for model 'rnnlm', this model is 'nmt'", "unknown operator 'rnn_l0'")
    assert "problems:" in err


def test_corrupt_strategy_file(tmp_path, capsys):
    path = tmp_path / "s.msgpack"
    run(RNNLM, SMALL + ["--quiet", "--export", str(path)], out=None)
    path.write_bytes(path.read_bytes()[:-7])
    fails(capsys, RNNLM, SMALL + ["--strategy", str(path)], f"strategy file {path}",
          "corrupt or truncated")


def test_strategy_file_from_a_bigger_machine(tmp_path, capsys):
    path = str(tmp_path / "s.json")
    run(RNNLM, SMALL + ["--quiet", "--devices-per-rank", "4", "--export", path], out=None)
    err = fails(capsys, RNNLM, SMALL + ["--devices-per-rank", "2", "--strategy", path],
                "1 problem:", "the file was made for 4 devices; this machine has 2 (0..1), "
                "so 5 operators (embed, rnn_l0, rnn_l1, ...) use devices it lacks",
                "search one (--search SECONDS)")
    assert err.count("\n  - ") == 1                       # one line, not one per operator


def test_help_lists_every_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(RNNLM, ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--batch-size", "--iterations", "--warmup", "--seed", "--dtype", "--strategy",
                 "--search", "--export", "--machine", "--simulate", "--trace",
                 "--devices-per-rank", "--small", "--json", "--vocab", "mpirun -np 2"):
        assert flag in out, flag


def test_digits_train_identically_under_different_strategies(tmp_path):
    """Real data: AlexNet's loss falls and its accuracy rises, the same (float64) under data
    parallelism on one device and a mixed strategy on two."""
    pytest.importorskip("sklearn")
    app = app_module("alexnet").APP
    argv = ["--small", "--data", "digits", "--image-size", "63", "--batch-size", "32",
            "--iterations", "40", "--warmup", "0", "--optimizer", "adam", "--lr", "0.002",
            "--dtype", "float64", "--quiet"]
    net = app.build_from_flags(argv, devices=1)
    path = str(tmp_path / "mixed.json")
    files.save(path, app.mixed_strategy(net.model, 2), net.model, Machine.local(2))
    one = run(app, argv, out=None)
    two = run(app, argv + ["--devices-per-rank", "2", "--strategy", path], out=None)
    assert two.losses == pytest.approx(one.losses, rel=1e-12)
    assert two.accuracies == one.accuracies and two.test_accuracy == one.test_accuracy
    first, last = one.losses[:8], one.losses[-8:]
    assert sum(last) / 8 < sum(first) / 8 - 0.2
    assert sum(one.accuracies[-8:]) / 8 > sum(one.accuracies[:8]) / 8 + 0.1
    assert one.test_accuracy > 0.2                        # chance is 0.1
    assert one.json()["test_accuracy"] == one.test_accuracy


def test_real_script_prints_json_last():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "apps", "rnntc.py"), "--small",
                        "--iterations", "1", "--batch-size", "2", "--json"],
                       capture_output=True, text=True, timeout=120, cwd="/")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["app"] == "rnntc"


def test_usage_error_under_mpirun_ends_every_rank_with_status_2(tmp_path):
    """An error only rank 0 sees (it alone writes the outputs) still ends every rank."""
    trace = tmp_path / "missing" / "t.json"
    rc, out = run_mpirun(2, [os.path.join(ROOT, "apps", "nmt.py"), "--small",
                             "--trace", str(trace)], timeout=120)
    assert rc == 2, out
    assert out.count(f"nmt: error: --trace {trace}: the directory") == 1   # once, by rank 0
    assert "Traceback" not in out and "Abort" not in out


def test_checkpoint_and_resume_under_another_device_count_continues_exactly(capsys, tmp_path):
    base = ["--small", "--batch-size", "4", "--warmup", "0", "--dtype", "float64", "--json",
            "--quiet"]
    code, out, _ = cli(capsys, RNNLM, base + ["--iterations", "4"])
    assert code == 0
    straight = json.loads(out.splitlines()[-1])["losses"]
    ck = str(tmp_path / "ck")
    code, out, _ = cli(capsys, RNNLM, base + ["--iterations", "2", "--checkpoint-dir", ck,
                                              "--checkpoint-every", "1"])
    assert code == 0 and "checkpoints in" in out
    assert sorted(os.listdir(ck))[-1] == "step-00000002.ckpt" or "latest" in os.listdir(ck)
    code, out, _ = cli(capsys, RNNLM, base + ["--iterations", "4", "--checkpoint-dir", ck,
                                              "--resume", "--devices-per-rank", "2"])
    assert code == 0, out
    assert "resumed from the checkpoint at iteration 2" in out
    resumed = json.loads(out.splitlines()[-1])["losses"]
    assert resumed == pytest.approx(straight[2:], rel=1e-10)


def test_checkpoint_flag_misuse(capsys, tmp_path):
    fails(capsys, RNNLM, SMALL + ["--resume"], "--resume needs --checkpoint-dir")
    fails(capsys, RNNLM, SMALL + ["--checkpoint-every", "-1", "--checkpoint-dir", "x"],
          "--checkpoint-every -1")
    ck = str(tmp_path / "ck")
    assert cli(capsys, RNNLM, SMALL + ["--checkpoint-dir", ck])[0] == 0
    fails(capsys, RNNLM, SMALL + ["--checkpoint-dir", ck, "--resume"],
          "the checkpoint in", "is at iteration 2", "Ask for more iterations")
    for f in os.listdir(ck):
        if f.endswith(".ckpt"):
            with open(os.path.join(ck, f), "r+b") as fh:
                fh.seek(100)
                fh.write(b"garbage!")
    code, out, err = cli(capsys, RNNLM, SMALL[:-2] + ["--iterations", "3", "--checkpoint-dir",
                                                      ck, "--resume"])
    assert code == 2 and "Traceback" not in err
    assert "checksum mismatch" in err and "rnnlm: error: --resume:" in err
    assert "no usable checkpoint" in err


def test_check_prediction_runs_searched_and_data_parallel(capsys):
    res = run(RNNLM, SMALL + ["--devices-per-rank", "2", "--search", "30",
                              "--search-proposals", "20", "--check-prediction", "1",
                              "--iterations", "1", "--warmup", "0", "--quiet"])
    out = capsys.readouterr().out
    assert "prediction check (1 iterations each, their period):" in out
    assert "searched       predicted" in out and "data parallel  predicted" in out
    assert "than data parallel: " in out
    assert res.iteration_time > 0
