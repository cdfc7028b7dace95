"""Strategy files: exact round trips (msgpack and the JSON view), every problem reported at
once with a fix, clear errors for corrupt, truncated, empty and foreign files, no pickle."""
import json
import pickle
import re

import msgpack
import pytest

from parallel_ops import Model, ParallelConfig
from strategy import files
from strategy.files import StrategyFileError
from taskrt import Machine

P = ParallelConfig.of


def mlp():
    m = Model("mlp", seed=0)
    x = m.input("x", (8, 6))
    y = m.input("y", (8,), dtype="int64")
    h = m.relu(m.linear(x, 16, name="fc1"), name="act")
    m.softmax_cross_entropy(m.linear(h, 5, name="fc2"), y, name="loss")
    return m


STRATEGY = {"fc1": P([0, 1, 2, 3], n=2, o=2), "act": P([3, 1], a1=2),
            "fc2": P([2, 0], i=2), "loss": P([1], n=1)}


@pytest.mark.parametrize("ext", [".msgpack", ".json", ".strategy"])
def test_round_trip_is_exact(tmp_path, ext):
    m, machine = mlp(), Machine.grid(2, 2)
    path = tmp_path / f"s{ext}"
    files.save(path, STRATEGY, m, machine)
    sf = files.read(path)
    assert sf.configs == STRATEGY
    assert list(sf.configs) == list(STRATEGY)                 # order kept
    assert [c.degrees for c in sf.configs.values()] == [c.degrees for c in STRATEGY.values()]
    assert sf.model == "mlp" and sf.machine == {"devices": 4, "ranks": 2, "kinds": ["cpu"]}
    assert sf.types == {"fc1": "linear", "act": "relu", "fc2": "linear", "loss": "softmax_ce"}
    again = tmp_path / f"again{ext}"
    files.save_file(again, sf)
    assert again.read_bytes() == path.read_bytes()
    assert files.load(path, m, machine) == STRATEGY


def test_json_view_is_for_people(tmp_path):
    path = tmp_path / "s.json"
    files.save(path, STRATEGY, mlp(), Machine.local(4))
    text = path.read_text()
    assert '"fc1": {"type": "linear", "degrees": {"n": 2, "o": 2}, "devices": [0, 1, 2, 3]}' \
        in text.splitlines()[6]
    assert json.loads(text)["version"] == files.VERSION
    # msgpack unless the name says JSON; either loads whatever its name.
    bin_path = tmp_path / "s.bin"
    files.save(bin_path, STRATEGY, mlp(), Machine.local(4))
    assert bin_path.read_bytes()[:1] != b"{"
    (tmp_path / "json_named_bin").write_text(text)
    assert files.read(tmp_path / "json_named_bin").configs == STRATEGY


def test_every_problem_is_reported_at_once(tmp_path):
    m = mlp()
    bad = {"fc1": P([0, 1, 2], n=2, o=2),        # 3 devices for 4 parts
           "fc3": P([0]),                         # unknown operator (did you mean fc1/fc2?)
           "act": P([0, 7], a1=2),                # device out of range
           "fc2": P([0, 1], k=2),                 # unknown dim
           "loss": P([0] * 9, n=9)}               # degree above the batch
    path = tmp_path / "bad.json"
    files.save(path, bad, m, Machine.local(4))
    with pytest.raises(StrategyFileError) as e:
        files.load(path, m, Machine.local(4))
    msg = str(e.value)
    assert str(path) in msg and "5 problems" in msg
    assert "3 devices [0, 1, 2] for 4 parts; give exactly one device per part" in msg
    assert "unknown operator 'fc3'" in msg and "did you mean 'fc" in msg
    assert "devices [7] do not exist (machine has 0..3)" in msg
    assert "unknown dim 'k'; linear has dims" in msg
    assert "degree 9 on 'n' exceeds its extent 8; use at most 8" in msg


def test_file_for_another_model(tmp_path):
    other = Model("lm", seed=0)
    t = other.input("t", (4, 3), dtype="int64")
    other.softmax_cross_entropy(other.linear(other.embedding(t, 10, 4, name="emb"), 10,
                                             name="fc1"), t, name="out")
    path = tmp_path / "lm.msgpack"
    files.save(path, {"emb": P([0]), "fc1": P([0, 1], o=2)}, other, Machine.local(2))
    with pytest.raises(StrategyFileError, match=r"is for model 'lm', this model is 'mlp'") as e:
        files.load(path, mlp(), Machine.local(2))
    assert "unknown operator 'emb'" in str(e.value)


def test_operator_type_mismatch_is_reported(tmp_path):
    path = tmp_path / "s.json"
    files.save(path, {"act": P([0])}, mlp(), Machine.local(1))
    data = json.loads(path.read_text())
    data["operators"]["act"]["type"] = "gelu"
    path.write_text(json.dumps(data))
    with pytest.raises(StrategyFileError, match="'act' is a relu in the model but a gelu"):
        files.load(path, mlp(), Machine.local(1))


@pytest.mark.parametrize("old,new,message", [
    ('"n": 2', '"n": "2"', "operator 'fc1': degree \"2\" on 'n' is a string; write a whole "
                           "number (1 for no split)"),
    ('"n": 2', '"n": true', "operator 'fc1': degree true on 'n' is a boolean"),
    ('"n": 2', '"n": 2.0', "operator 'fc1': degree 2.0 on 'n' is a number"),
    ('"devices": [0, 1]', '"devices": ["0", "1"]', "operator 'fc1': device ids [\"0\", \"1\"] "
                                                  "are not whole numbers"),
    ('"devices": [0, 1]', '"devices": [0, false]', "operator 'fc1': device ids [false]"),
    ('"devices": [0, 1]', '"devices": 2', "operator 'fc1': expected"),
])
def test_hand_edited_values_of_wrong_types_are_refused_by_name(tmp_path, old, new, message):
    """Strings and booleans in a hand-edited file: refused when read, naming the operator
    (a device id "0" used to crash with a TypeError, a degree true was taken as 1)."""
    path = tmp_path / "s.json"
    files.save(path, {"fc1": P([0, 1], n=2)}, mlp(), Machine.local(2))
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(StrategyFileError) as e:
        files.load(path, mlp(), Machine.local(2))
    assert message in str(e.value) and str(path) in str(e.value)


def test_configs_of_wrong_types_are_problems_not_crashes():
    """The same values given in code (not through a file) to the config check."""
    from parallel_ops.config import validate
    from parallel_ops.errors import ConfigError
    fc1 = mlp().op("fc1")
    for cfg, message in [(ParallelConfig((("n", True),), (0,)), "degree True on 'n' must be "
                          "a positive integer"),
                         (ParallelConfig((("n", 2),), ("0", "1")), "device ids ['0', '1'] are "
                          "not whole numbers")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            validate(fc1, cfg, Machine.local(2))


def test_json_of_another_shape_is_called_json(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('[{"format": "soapflow-strategy"}]')
    with pytest.raises(StrategyFileError, match=r"not a strategy file \(its top level is a "
                                                 r"list; a strategy file is an object"):
        files.read(path)
    path.write_text('  "inception"')
    with pytest.raises(StrategyFileError, match=r"its top level is a string"):
        files.read(path)


def test_a_file_for_a_bigger_machine_is_one_problem_not_one_per_operator(tmp_path):
    path = tmp_path / "s.json"
    files.save(path, {n: P(list(range(8)), n=8) for n in ("fc1", "act", "fc2", "loss")},
               mlp(), Machine.local(8))
    with pytest.raises(StrategyFileError) as e:
        files.load(path, mlp(), Machine.local(2))
    msg = str(e.value)
    assert "1 problem:" in msg and msg.count("\n  - ") == 1
    assert "the file was made for 8 devices; this machine has 2 (0..1), so 4 operators " \
           "(fc1, act, fc2, ...) use devices it lacks" in msg


@pytest.mark.parametrize("damage,match", [
    (lambda raw: raw[: len(raw) // 2], "corrupt or truncated"),
    (lambda raw: b"\xc1" + raw, "corrupt or truncated"),
    (lambda raw: b"", "the file is empty"),
    (lambda raw: raw.replace(b"soapflow-strategy", b"something-else!!!"), "not a strategy file"),
    (lambda raw: pickle.dumps({"format": "soapflow-strategy"}), "corrupt or truncated"),
    (lambda raw: msgpack.packb([1, 2, 3]), "not a strategy file"),
])
def test_damaged_msgpack_files_name_the_file(tmp_path, damage, match):
    path = tmp_path / "s.msgpack"
    files.save(path, STRATEGY, mlp(), Machine.local(4))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(StrategyFileError, match=match) as e:
        files.read(path)
    assert str(path) in str(e.value)


def test_damaged_json_and_versions(tmp_path):
    path = tmp_path / "s.json"
    files.save(path, STRATEGY, mlp(), Machine.local(4))
    text = path.read_text()
    path.write_text(text[:-20])
    with pytest.raises(StrategyFileError, match=r"s.json: not a readable JSON strategy file"):
        files.read(path)
    path.write_text(text.replace('"version": 1', '"version": 99'))
    with pytest.raises(StrategyFileError, match="format version 99, this program reads version 1"):
        files.read(path)
    with pytest.raises(StrategyFileError, match="cannot read it"):
        files.read(tmp_path / "missing.json")
