"""Checkpoints in one process: resuming under another strategy and device count continues
exactly like the uninterrupted run; corruption, truncation and crashes mid-write are caught
and the previous checkpoint stays usable; the format is what docs/checkpoints.md says."""
import hashlib
import io
import os
import random
import struct
import sys

import msgpack
import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ckpt_model import batches, build, compile_, optimizer  # noqa: E402
from parallel_ops import SGD, checkpoint  # noqa: E402
from parallel_ops.checkpoint import CheckpointError  # noqa: E402
from taskrt import Machine  # noqa: E402

DATA = batches()


def state(trainer):
    return checkpoint.state_tensors(trainer)


@pytest.fixture(scope="module")
def uninterrupted():
    """Losses per step and the final state of 4 uninterrupted steps (strategy A, 2 devices)."""
    t = compile_(Machine.local(2), "A")
    return [t.step(b) for b in DATA], state(t)


def _assert_state(got, want, exact=False):
    assert set(got) == set(want)
    for k, w in want.items():
        if exact:
            assert torch.equal(got[k], w), k
        else:
            assert torch.allclose(got[k], w, rtol=1e-10, atol=1e-13), \
                f"{k}: {(got[k] - w).abs().max().item():.3e}"


@pytest.mark.parametrize("strategy,devices", [("A", 2), ("D", 3), ("C", 3)])
def test_resume_under_another_strategy_equals_uninterrupted(tmp_path, uninterrupted, strategy,
                                                            devices):
    losses, final = uninterrupted
    first = compile_(Machine.local(2), "A")
    assert [first.step(b) for b in DATA[:2]] == losses[:2]
    path = checkpoint.save_to_dir(first, str(tmp_path))
    assert os.path.basename(path) == "step-00000002.ckpt"
    second = compile_(Machine.local(devices), strategy, seed=123)  # other init, other seed
    header = checkpoint.resume(second, str(tmp_path))
    assert header["model"]["step_count"] == 2 and second.optimizer.step_count == 2
    rest = [second.step(b) for b in DATA[2:]]
    exact = strategy == "A"
    if exact:                       # same strategy and devices: bit-identical
        assert rest == losses[2:]
    else:
        assert rest == pytest.approx(losses[2:], rel=1e-12)
    _assert_state(state(second), final, exact)


def test_optimizer_state_and_buffers_are_in_the_file(tmp_path):
    t = compile_(Machine.local(2), "A")
    for b in DATA[:2]:
        t.step(b)
    ckpt = checkpoint.read_file(checkpoint.save(t, str(tmp_path / "c.ckpt")))
    names = set(ckpt.tensors)
    assert {"conv.weight", "bn.running_mean", "bn.running_var", "fc.bias"} <= names
    assert {"conv.weight@exp_avg", "conv.weight@exp_avg_sq", "fc.weight@exp_avg"} <= names
    assert torch.equal(ckpt.tensors["bn.running_var"], t.read("bn.running_var"))
    assert torch.equal(ckpt.tensors["fc.weight@exp_avg_sq"], t.read("fc.weight@exp_avg_sq"))
    h = ckpt.header
    assert h["optimizer"]["type"] == "Adam" and h["optimizer"]["step_count"] == 2
    assert h["model"]["step_count"] == 2 and h["model"]["seed"] == 0
    assert h["strategy"]["fc"]["text"] == "[o=2]@0-1"
    assert h["machine"]["ranks"] == 1 and len(h["machine"]["devices"]) == 2
    assert [o["name"] for o in h["model"]["ops"]][:2] == ["conv", "bn"]


def test_file_format_is_as_documented(tmp_path):
    t = build().compile(Machine.local(1), {}, optimizer())
    t.step(DATA[0])
    path = checkpoint.save(t, str(tmp_path / "c.ckpt"), extra={"epoch": 3, "note": "hi"})
    raw = open(path, "rb").read()
    magic, hlen, hsum = struct.unpack("<8sQ32s", raw[:48])
    assert magic == b"SOAPCKPT"
    head = raw[48:48 + hlen]
    assert hashlib.sha256(head).digest() == hsum
    header = msgpack.unpackb(head, raw=False)
    assert header["format"] == "soapflow-checkpoint" and header["version"] == 1
    assert header["extra"] == {"epoch": 3, "note": "hi"}
    data = raw[48 + hlen:]
    assert len(data) == header["data_bytes"]
    e = next(e for e in header["tensors"] if e["name"] == "fc.weight")
    blob = data[e["offset"]:e["offset"] + e["nbytes"]]
    assert hashlib.sha256(blob).hexdigest() == e["sha256"]
    w = torch.frombuffer(bytearray(blob), dtype=torch.float64).reshape(e["shape"])
    assert torch.equal(w, t.read("fc.weight"))


def _flip_byte(path, offset_from_end):
    with open(path, "r+b") as f:
        f.seek(-offset_from_end, io.SEEK_END)
        b = f.read(1)
        f.seek(-offset_from_end, io.SEEK_END)
        f.write(bytes([b[0] ^ 0x10]))


def _save_steps(directory, steps, every=1):
    t = compile_(Machine.local(2), "A")
    for b in DATA[:steps]:
        t.step(b)
        checkpoint.maybe_save(t, str(directory), every)
    return t


@pytest.mark.parametrize("damage,message", [
    ("flip_data", "tensor '.*' fails its checksum"),
    ("flip_header", "header checksum mismatch"),
    ("truncate", "truncated"),
    ("garbage", "not a soapflow checkpoint"),
])
def test_corruption_is_detected_and_the_previous_checkpoint_used(tmp_path, uninterrupted,
                                                                 damage, message):
    losses, final = uninterrupted
    _save_steps(tmp_path, 2)
    newest = checkpoint.latest(str(tmp_path))
    assert newest.endswith("step-00000002.ckpt")
    size = os.path.getsize(newest)
    if damage == "flip_data":
        _flip_byte(newest, 20)
    elif damage == "flip_header":
        _flip_byte(newest, size - 60)
    elif damage == "truncate":
        os.truncate(newest, size // 2)
    else:
        open(newest, "wb").write(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=message):
        checkpoint.read_file(newest)
    t = compile_(Machine.local(3), "C")
    with pytest.raises(CheckpointError, match=message):
        checkpoint.resume(t, str(tmp_path), fallback=False)
    out = io.StringIO()
    header = checkpoint.resume(t, str(tmp_path), out=out)
    assert header["model"]["step_count"] == 1
    assert "step-00000002.ckpt" in out.getvalue() and "previous checkpoint" in out.getvalue()
    assert [t.step(b) for b in DATA[1:]] == pytest.approx(losses[1:], rel=1e-12)
    _assert_state(state(t), final)


def test_no_usable_checkpoint_is_an_error_and_an_empty_dir_a_fresh_start(tmp_path):
    t = compile_(Machine.local(2), "A")
    assert checkpoint.resume(t, str(tmp_path / "none")) is None
    _save_steps(tmp_path, 1)
    os.truncate(checkpoint.latest(str(tmp_path)), 100)
    with pytest.raises(CheckpointError, match="no usable checkpoint.*truncated"):
        checkpoint.resume(t, str(tmp_path), out=None)


def test_a_crash_mid_write_leaves_latest_intact(tmp_path, monkeypatch, uninterrupted):
    losses, _ = uninterrupted
    t = _save_steps(tmp_path, 2)
    t.step(DATA[2])
    real_fsync = os.fsync

    def crash(fd):                  # the disk fails while the new checkpoint is written
        raise OSError("simulated crash")
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(CheckpointError, match="could not be written.*simulated crash"):
        checkpoint.maybe_save(t, str(tmp_path), 1)
    monkeypatch.setattr(os, "fsync", real_fsync)
    # A process killed mid-write leaves only a temporary file behind.
    with open(os.path.join(tmp_path, "step-00000003.ckpt.tmp.999"), "wb") as f:
        f.write(b"SOAPCKPT partial")
    assert checkpoint.latest(str(tmp_path)).endswith("step-00000002.ckpt")
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".ckpt")) == \
        ["step-00000001.ckpt", "step-00000002.ckpt"]
    r = compile_(Machine.local(2), "B")
    assert checkpoint.resume(r, str(tmp_path))["model"]["step_count"] == 2
    assert [r.step(b) for b in DATA[2:]] == pytest.approx(losses[2:], rel=1e-12)
    checkpoint.maybe_save(r, str(tmp_path), 1)          # cleans the leftover
    assert not any(".tmp." in f for f in os.listdir(tmp_path))


def test_maybe_save_cadence_and_keep(tmp_path):
    t = build().compile(Machine.local(1), {}, optimizer())
    written = []
    for b in DATA:
        t.step(b)
        written.append(checkpoint.maybe_save(t, str(tmp_path), every=2, keep=1))
    assert [w is not None for w in written] == [False, True, False, True]
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-00000004.ckpt"]
    assert open(tmp_path / "latest").read().strip() == "step-00000004.ckpt"
    assert checkpoint.maybe_save(t, None, 2) is None and checkpoint.maybe_save(t, "x", 0) is None


def test_a_different_model_or_optimizer_is_refused(tmp_path):
    t = build().compile(Machine.local(1), {}, optimizer())
    t.step(DATA[0])
    path = checkpoint.save(t, str(tmp_path / "c.ckpt"))
    from parallel_ops import Model
    other = Model("ckptnet", dtype="float64")
    x = other.input("x", (6, 2, 4, 4))
    y = other.input("y", (6,), dtype="int64")
    h = other.flat(other.conv2d(x, 3, 3, padding=1, name="conv"), name="flat")
    other.softmax_cross_entropy(other.linear(h, 5, name="fc"), y, name="loss")
    with pytest.raises(CheckpointError, match=r"weight 'conv.weight': checkpoint has "
                       r"\(4, 2, 3, 3\) float64, the model \(3, 2, 3, 3\).*"
                       r"weight 'fc.weight'.*lacks: \['bn.bias'"):
        checkpoint.load(other.compile(Machine.local(1), {}, optimizer()), path)
    with pytest.raises(CheckpointError, match=r"optimizer SGD\['momentum_buffer'\] differs "
                       r"from the checkpoint's Adam"):
        checkpoint.load(build().compile(Machine.local(1), {}, SGD(lr=0.1, momentum=0.9)), path)


def test_rng_states_are_restored(tmp_path):
    t = build().compile(Machine.local(1), {}, optimizer())
    torch.manual_seed(5)
    random.seed(6)
    np.random.seed(7)
    path = checkpoint.save(t, str(tmp_path / "c.ckpt"))
    after = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    checkpoint.load(build().compile(Machine.local(1), {}, optimizer()), path)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(after[0], again[0]) and after[1:] == again[1:]
    torch.manual_seed(1)
    checkpoint.load(build().compile(Machine.local(1), {}, optimizer()), path, restore_rng=False)
    assert not torch.equal(torch.rand(3), after[0])
