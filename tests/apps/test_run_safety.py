"""What a run does with bad output paths, bad learning rates, a loss that becomes nan, a
resumed checkpoint of another device count, a strategy that leaves a machine idle, and slow
phases: refused before any work, stopped with a message, said, never silent. Runs in one
process with the small test app tests/apps/tiny_app.py (a user's own file) and RNNLM."""
import io
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tiny_app  # noqa: E402
from apps import progress  # noqa: E402
from apps.common import main, run  # noqa: E402
from test_app_flags import cli, fails  # noqa: E402

TINY = tiny_app.APP
BASE = ["--iterations", "2", "--warmup", "0"]


def refused(capsys, app, argv, *fragments):
    """fails(), and before any work: nothing compiled, no iteration run."""
    built = []
    original = app.build
    try:
        object.__setattr__(app, "build", lambda c: built.append(c) or original(c))
        fails(capsys, app, argv, *fragments)
    finally:
        object.__setattr__(app, "build", original)
    assert not built, "the model was built before the error"


# -- output paths ------------------------------------------------------------------------------

@pytest.mark.parametrize("flag,path,fragment", [
    ("--trace", "missing/t.json", "does not exist. Create it first"),
    ("--export", "missing/s.json", "does not exist. Create it first"),
    ("--export", ".", "is a directory. Give a file name"),
    ("--checkpoint-dir", "a_file", "is a file, not a directory"),
    ("--checkpoint-dir", "a_file/ck", "is a file, so the directory"),
])
def test_output_paths_are_checked_before_any_work(tmp_path, capsys, flag, path, fragment):
    (tmp_path / "a_file").write_text("x")
    full = str(tmp_path / path)
    refused(capsys, TINY, BASE + [flag, full], f"{flag} {full}: ", fragment)


def test_a_write_that_fails_at_the_end_keeps_the_result(tmp_path, capsys, monkeypatch):
    """The directory vanished after the check: the trace and the strategy land in the
    working directory, and the run says so (the trace used to be a traceback, no report)."""
    import apps.startup
    monkeypatch.setattr(apps.startup, "check_outputs", lambda a: None)
    monkeypatch.chdir(tmp_path)
    gone = tmp_path / "gone"
    (tmp_path / "a_file").write_text("x")
    code, out, err = cli(capsys, TINY, BASE + ["--trace", str(gone / "t.json"),
                                               "--export", str(gone / "s.json"),
                                               "--checkpoint-dir", str(tmp_path / "a_file" / "ck")])
    assert code == 0, err
    for name, what in (("t.json", "trace of the last iteration"), ("s.json", "strategy")):
        assert f"warning: {what}: could not write {gone / name} (No such file or directory); " \
               f"written to {tmp_path / name} instead" in err
        assert f"{what} written to {tmp_path / name}" in out
        assert (tmp_path / name).exists()
    assert f"warning: checkpoint: could not write {tmp_path / 'a_file' / 'ck'} (" in err
    assert f"written to {tmp_path / 'ck'} instead" in err
    assert f"checkpoints in {tmp_path / 'ck'} (latest: step 2)" in out
    assert os.path.exists(tmp_path / "ck" / "step-00000002.ckpt")
    assert "Done: Tiny MLP" in out
    assert json.load(open(tmp_path / "t.json"))["otherData"]["soapflow"]["app"] == "tiny"


def test_write_keeping_falls_back_in_order(tmp_path, monkeypatch):
    from parallel_ops.outputs import write_keeping
    monkeypatch.chdir(tmp_path)
    tried = []

    def write(path):
        tried.append(path)
        if len(tried) < 3:
            raise PermissionError(13, "Permission denied")
        open(path, "w").write("kept")
    where, note = write_keeping("/nowhere/x.txt", write)
    assert tried[:2] == ["/nowhere/x.txt", str(tmp_path / "x.txt")]
    assert where == tried[2] and open(where).read() == "kept"
    assert note == f"could not write /nowhere/x.txt (Permission denied); written to {where} " \
                   "instead"
    with pytest.raises(OSError, match="could not write the output anywhere"):
        write_keeping("/nowhere/y.txt", lambda p: open("/nowhere/" + os.path.basename(p), "w"))


# -- learning rate and nan -----------------------------------------------------------------------

@pytest.mark.parametrize("lr", ["nan", "-1", "0", "inf"])
def test_a_learning_rate_that_is_not_a_positive_number_is_refused(capsys, lr):
    refused(capsys, TINY, BASE + ["--lr", lr], f"--lr {float(lr):g}: use a positive, finite "
                                               "learning rate (e.g. 0.1")


def test_a_loss_that_becomes_nan_stops_the_run_with_the_iteration(capsys):
    code, out, err = cli(capsys, TINY, ["--iterations", "6", "--warmup", "0", "--lr", "1e30"])
    assert code == 2 and "Traceback" not in err
    assert "iter 1/6" in out and "iter 3/6" not in out          # it stopped there
    assert "tiny: error: the loss is nan at iteration 2." in err
    assert "this iteration's update made 4 of 4 weights non-finite" in err
    assert "first operator whose output is not finite on this batch: linear 'fc1'" in err
    assert "Lower the learning rate (--lr)" in err and "--continue-on-nan" in err


def test_the_first_operator_with_a_non_finite_output_is_named(capsys):
    code, _, err = cli(capsys, TINY, BASE + ["--poison"])
    assert code == 2
    assert "the loss is nan at iteration 1." in err
    assert "linear 'fc1' (output 'fc1'; non-finite inputs 'x')" in err


def test_continue_on_nan_trains_on_and_says_so(capsys):
    code, out, err = cli(capsys, TINY, ["--iterations", "4", "--warmup", "0", "--lr", "1e30",
                                        "--continue-on-nan", "--json"])
    assert code == 0, err
    assert "warning: the loss is nan at iteration 2; training goes on" in out
    assert "not finite from iteration 2" in out
    res = json.loads(out.splitlines()[-1])
    assert len(res["losses"]) == 4 and res["losses"][-1] is None


# -- resume ------------------------------------------------------------------------------------------

def test_resume_keeps_the_checkpoints_global_batch_and_says_so(tmp_path, capsys):
    """Saved on 2 devices (batch 8), resumed on 1 without --batch-size: batch 8 again (it
    used to become 4 silently), and the losses continue the uninterrupted run's."""
    base = ["--warmup", "0", "--dtype", "float64", "--json", "--quiet"]
    code, out, _ = cli(capsys, TINY, base + ["--iterations", "4", "--devices-per-rank", "2"])
    straight = json.loads(out.splitlines()[-1])
    assert code == 0 and straight["batch_size"] == 8
    ck = str(tmp_path / "ck")
    assert cli(capsys, TINY, base + ["--iterations", "2", "--devices-per-rank", "2",
                                     "--checkpoint-dir", ck])[0] == 0
    code, out, err = cli(capsys, TINY, base + ["--iterations", "4", "--checkpoint-dir", ck,
                                               "--resume"])
    assert code == 0, err
    assert "resume: keeping the checkpoint's global batch 8 (8 per device on 1); " \
           "--batch-size N changes it" in out
    resumed = json.loads(out.splitlines()[-1])
    assert resumed["batch_size"] == 8
    assert resumed["losses"] == pytest.approx(straight["losses"][2:], rel=1e-10)
    code, out, err = cli(capsys, TINY, base + ["--iterations", "6", "--checkpoint-dir", ck,
                                               "--resume", "--batch-size", "4", "--seed", "3"])
    assert code == 0, err
    assert "resume: --batch-size 4 (4 per device on 1) replaces the checkpoint's global " \
           "batch 8" in out
    assert "resume: --seed 3 differs from the checkpoint's seed 0" in out
    assert json.loads(out.splitlines()[-1])["batch_size"] == 4


# -- simulate, progress, checkpoint time, help ------------------------------------------------------

def test_simulating_a_strategy_that_leaves_most_devices_idle_warns(tmp_path, capsys):
    path = str(tmp_path / "four.json")
    assert run(TINY, ["--batch-size", "16", "--iterations", "1", "--quiet",
                      "--devices-per-rank", "4", "--export", path], out=None)
    code, out, _ = cli(capsys, TINY, ["--batch-size", "16", "--simulate", "--machine", "p100",
                                      "--strategy", path])
    assert code == 0
    assert "warning: the strategy uses 4 of the 16 devices; the other 12 stay idle" in out
    code, out, _ = cli(capsys, TINY, ["--batch-size", "16", "--simulate", "--machine", "p100"])
    assert code == 0 and "stay idle" not in out                 # data parallel uses all 16


def test_progress_bars_only_on_a_terminal_and_not_when_quiet():
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    tty = Terminal()
    assert progress.shows_progress(tty, quiet=False)
    assert not progress.shows_progress(tty, quiet=True)
    assert not progress.shows_progress(io.StringIO(), quiet=False)
    assert not progress.shows_progress(None, quiet=False)
    bar = progress.progress_bar(tty, False, "planning", total=3, unit="launch")
    assert list(progress.counted(["a", "b", "c"], bar)) == ["a", "b", "c"]
    assert bar.n == 3
    bar.close()
    assert "planning" in tty.getvalue()
    quiet = progress.progress_bar(tty, True, "planning", total=3)
    assert list(progress.counted([1, 2], quiet)) == [1, 2]
    with progress.elapsed(tty, False, "simulating"):
        pass
    assert "simulating ... 00:00" in tty.getvalue()
    pipe = io.StringIO()
    with progress.elapsed(pipe, False, "simulating"):
        pass
    assert pipe.getvalue() == ""


def test_checkpoint_time_is_reported_apart_from_the_iterations(tmp_path, capsys):
    code, out, _ = cli(capsys, TINY, BASE + ["--checkpoint-dir", str(tmp_path / "ck"),
                                             "--checkpoint-every", "1", "--json"])
    assert code == 0
    assert "checkpoints     2 written in" in out and "(not in the iteration times)" in out
    res = json.loads(out.splitlines()[-1])
    assert res["checkpoints"] == 2 and res["checkpoint_s"] > 0


def test_help_shows_the_preset_sizes(capsys):
    with pytest.raises(SystemExit):
        main(TINY, ["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("p100 (16 GPUs: 4 nodes x 4 P100)", "k80 (64 GPUs: 16 nodes x 4 K80)",
                 "dgx-h100 (8 GPUs: 1 node of 8 H100)", "p100:2 is 8 GPUs",
                 "--continue-on-nan"):
        assert text in out, text
