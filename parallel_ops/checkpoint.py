"""checkpoint: the full training state in one file, loadable under any strategy and rank count.

A checkpoint holds every weight and buffer, every optimizer state region
(`<weight>@<state>`), the step counts, the RNG states of every rank, and descriptions of the
model, strategy and machine it was saved from. Tensors are whole (gathered through
Trainer.read), so loading writes them into whatever parts the new trainer's strategy has:
a run continued under another strategy or number of ranks equals the uninterrupted run.

Format (docs/checkpoints.md): magic, header length, SHA-256 of the header, a msgpack header
listing every tensor with its offset and SHA-256, then the raw little-endian tensor bytes.
No pickle. Files are written to a temporary name, flushed to disk and renamed, and the
directory's `latest` pointer is replaced the same way, so a crash never leaves a corrupt
"latest"; a truncated or corrupted file fails its checksums with a CheckpointError and
`resume` falls back to the previous checkpoint.

    checkpoint.maybe_save(trainer, "ckpt", every=100)     # after trainer.step(...)
    start = checkpoint.resume(trainer, "ckpt")            # after compile; None if fresh

Under MPI every function here is a collective call: all ranks call it; rank 0 does the I/O.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import random
import re
import struct
import sys
from dataclasses import dataclass
from typing import Callable

import msgpack
import numpy as np
import torch

from .errors import CheckpointError

MAGIC = b"SOAPCKPT"
VERSION = 1
_PREFIX = struct.Struct("<8sQ32s")          # magic, header length, sha256(header)
_NAME = re.compile(r"^step-(\d+)\.ckpt$")
LATEST = "latest"


# -- the file format -------------------------------------------------------------------------
def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _raw(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_file(path: str, header: dict, tensors: dict[str, torch.Tensor],
               progress: Callable[[int, int], None] | None = None) -> None:
    """Write header + tensors atomically: a temporary file, fsync, rename, fsync the dir.
    `progress(bytes written, total bytes)` is called after each tensor."""
    entries, blobs, offset = [], [], 0
    for name, t in tensors.items():
        b = _raw(t)
        entries.append({"name": name, "dtype": _dtype_name(t), "shape": list(t.shape),
                        "offset": offset, "nbytes": len(b),
                        "sha256": hashlib.sha256(b).hexdigest()})
        blobs.append(b)
        offset += len(b)
    header = dict(header, tensors=entries, data_bytes=offset)
    head = msgpack.packb(header, use_bin_type=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(_PREFIX.pack(MAGIC, len(head), hashlib.sha256(head).digest()))
            f.write(head)
            done = 0
            for b in blobs:
                f.write(b)
                done += len(b)
                if progress is not None:
                    progress(done, offset)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class Checkpoint:
    """A verified checkpoint file: its header and its tensors."""
    path: str
    header: dict
    tensors: dict[str, torch.Tensor]

    @property
    def step(self) -> int:
        return int(self.header["model"]["step_count"])


def _read_header(f, path: str, size: int) -> dict:
    """The verified header of an open checkpoint file (positioned at its start)."""
    prefix = f.read(_PREFIX.size)
    if prefix[:len(MAGIC)] != MAGIC[:len(prefix)] or not prefix:
        raise CheckpointError(f"checkpoint '{path}': not a soapflow checkpoint (it "
                              f"starts with {prefix[:8]!r}, not {MAGIC!r}).")
    if len(prefix) < _PREFIX.size:
        raise CheckpointError(f"checkpoint '{path}': truncated ({size} bytes, shorter "
                              "than its fixed prefix).")
    magic, hlen, hsum = _PREFIX.unpack(prefix)
    head = f.read(hlen)
    if len(head) < hlen:
        raise CheckpointError(f"checkpoint '{path}': truncated inside the header "
                              f"({size} bytes).")
    if hashlib.sha256(head).digest() != hsum:
        raise CheckpointError(f"checkpoint '{path}': header checksum mismatch (the "
                              "file is corrupted).")
    header = msgpack.unpackb(head, raw=False, strict_map_key=False)
    if header.get("version") != VERSION:
        raise CheckpointError(f"checkpoint '{path}': format version "
                              f"{header.get('version')}; this code reads {VERSION}.")
    expected = _PREFIX.size + hlen + header["data_bytes"]
    if size != expected:
        raise CheckpointError(f"checkpoint '{path}': {size} bytes, expected {expected} "
                              "(truncated or appended to).")
    return header


def _opened(path: str, read):
    """read(file, size) on `path`, with the file's problems as CheckpointErrors."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            return read(f, size)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint '{path}' does not exist.") from None
    except (ValueError, KeyError, TypeError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"checkpoint '{path}': unreadable header ({e}).") from None


def read_header(path: str) -> dict:
    """The verified header of a checkpoint without reading its tensors (what it was saved
    from: model, strategy, machine, step and `extra`)."""
    return _opened(path, lambda f, size: _read_header(f, path, size))


def read_file(path: str) -> Checkpoint:
    """Read and verify a checkpoint (sizes and SHA-256 of the header and every tensor)."""
    def read(f, size):
        header = _read_header(f, path, size)
        tensors = {}
        for e in header["tensors"]:
            data = bytearray(f.read(e["nbytes"]))
            if hashlib.sha256(data).hexdigest() != e["sha256"]:
                raise CheckpointError(f"checkpoint '{path}': tensor '{e['name']}' fails "
                                      "its checksum (the file is corrupted).")
            dtype = getattr(torch, e["dtype"])
            t = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
            tensors[e["name"]] = t.reshape(e["shape"])
        return Checkpoint(path, header, tensors)
    return _opened(path, read)


# -- collectives (no-ops in one process) -----------------------------------------------------
def _comm(trainer):
    comm = getattr(trainer.executor, "comm", None)
    return comm if comm is not None and comm.Get_size() > 1 else None


def _rank(comm) -> int:
    return comm.Get_rank() if comm is not None else 0


def _agree(comm, error: str | None) -> None:
    """Raise the same CheckpointError on every rank if rank 0 failed."""
    if comm is not None:
        error = comm.bcast(error, root=0)
    if error is not None:
        raise CheckpointError(error)


# -- what is saved -----------------------------------------------------------------------------
def _rng_state() -> tuple[dict, dict[str, torch.Tensor]]:
    py = random.getstate()
    npst = np.random.get_state(legacy=True)
    meta = {"python": [py[0], list(py[1]), py[2]],
            "numpy": [npst[0], [int(v) for v in npst[1]], int(npst[2]), int(npst[3]),
                      float(npst[4])]}
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for k, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{k}"] = s
    return meta, tensors


def _set_rng_state(meta: dict, tensors: dict[str, torch.Tensor]) -> None:
    v, state, gauss = meta["python"]
    random.setstate((v, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"].clone())
    cuda = sorted(k for k in tensors if k.startswith("cuda"))
    if cuda and torch.cuda.is_available():
        for k in cuda[:torch.cuda.device_count()]:
            torch.cuda.set_rng_state(tensors[k].clone(), int(k[4:]))


def _describe(trainer) -> dict:
    model, opt = trainer.model, trainer.optimizer
    ops = [{"name": o.name, "type": o.type,
            "params": {k: repr(v) for k, v in o.params.items()},
            "inputs": [t.name for t in o.inputs], "outputs": [t.name for t in o.outputs]}
           for o in model.ops]
    strategy = {name: {"degrees": [list(d) for d in cfg.degrees], "devices": list(cfg.devices),
                       "text": str(cfg)} for name, cfg in trainer.configs.items()}
    devices = [[d.rank, d.kind, d.index] for d in trainer.machine.devices]
    optimizer = None
    if opt is not None:
        hyper = {k: v for k, v in vars(opt).items()
                 if k not in ("step_count", "state_names") and isinstance(
                     v, (int, float, bool, str, tuple, list, type(None)))}
        optimizer = {"type": type(opt).__name__, "step_count": trainer.optimizer_steps,
                     "state_names": list(opt.state_names), "hyper": hyper}
    return {
        "model": {"name": model.name, "seed": model.seed, "dtype": model.dtype,
                  "step_count": trainer.step_count, "ops": ops,
                  "weights": {w.name: {"shape": list(w.shape), "dtype": w.dtype,
                                       "trainable": bool(w.requires_grad)}
                              for w in model.weights}},
        "strategy": strategy,
        "machine": {"devices": devices, "ranks": trainer.machine.num_ranks},
        "optimizer": optimizer,
    }


def state_tensors(trainer) -> dict[str, torch.Tensor]:
    """Every weight and optimizer state region, whole (a collective call under MPI)."""
    out = {}
    for w in trainer.model.weights:
        if w.name in trainer.graph.regions:
            out[w.name] = trainer.read(w.name)
    for regions in trainer.lowered.state_regions.values():
        for r in regions:
            out[r.name] = trainer.read(r.name)
    return out


# -- save / load ---------------------------------------------------------------------------------
def save(trainer, path: str, extra: dict | None = None,
         progress: Callable[[int, int], None] | None = None) -> str:
    """Write the training state of `trainer` to `path` (atomically). Collective under MPI:
    every rank calls it; parts are gathered and rank 0 writes. `extra` is any msgpack-able
    dict stored with it (e.g. the data position), returned by load; `progress` as in
    write_file (rank 0)."""
    comm = _comm(trainer)
    tensors = state_tensors(trainer)
    meta, rng = _rng_state()
    packed = msgpack.packb([meta, {k: _raw(v) for k, v in rng.items()}], use_bin_type=True)
    every = comm.gather(packed, root=0) if comm is not None else [packed]
    error = None
    if _rank(comm) == 0:
        try:
            header = _describe(trainer)
            header.update(format="soapflow-checkpoint", version=VERSION,
                          created=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                          extra=extra or {}, rng=[])
            for r, blob in enumerate(every):
                m, raw = msgpack.unpackb(blob, raw=False)
                header["rng"].append(m)
                for k, b in raw.items():
                    tensors[f"rng/rank{r}/{k}"] = torch.frombuffer(bytearray(b), dtype=torch.uint8)
            write_file(path, header, tensors, progress)
        except (OSError, TypeError, ValueError) as e:
            error = f"checkpoint '{path}': could not be written ({type(e).__name__}: {e})."
    _agree(comm, error)
    return path


def _broadcast(comm, ckpt: Checkpoint | None) -> Checkpoint:
    """Rank 0's verified checkpoint on every rank (header by msgpack, tensors by Bcast)."""
    if comm is None:
        return ckpt
    head = comm.bcast(msgpack.packb(ckpt.header, use_bin_type=True) if ckpt else None, root=0)
    header = msgpack.unpackb(head, raw=False, strict_map_key=False)
    tensors = {}
    for e in header["tensors"]:
        t = ckpt.tensors[e["name"]].contiguous() if ckpt else torch.empty(
            e["shape"], dtype=getattr(torch, e["dtype"]))
        if t.numel():
            comm.Bcast([t.reshape(-1).view(torch.uint8).numpy(), _mpi_byte()], root=0)
        tensors[e["name"]] = t
    return Checkpoint(ckpt.path if ckpt else "", header, tensors)


def _mpi_byte():
    from mpi4py import MPI
    return MPI.BYTE


def _read_everywhere(comm, path: str) -> Checkpoint:
    ckpt, error = None, None
    if _rank(comm) == 0:
        try:
            ckpt = read_file(path)
        except CheckpointError as e:
            error = str(e)
    _agree(comm, error)
    return _broadcast(comm, ckpt)


def check_fits(trainer, ckpt: Checkpoint) -> None:
    """Raise CheckpointError listing every weight or optimizer state that does not fit."""
    h, model = ckpt.header, trainer.model
    saved = h["model"]["weights"]
    problems = []
    for w in model.weights:
        s = saved.get(w.name)
        if s is None:
            problems.append(f"weight '{w.name}' {w.shape} is not in the checkpoint")
        elif tuple(s["shape"]) != tuple(w.shape) or s["dtype"] != w.dtype:
            problems.append(f"weight '{w.name}': checkpoint has {tuple(s['shape'])} "
                            f"{s['dtype']}, the model {w.shape} {w.dtype}")
    ours = {w.name for w in model.weights}
    extra = sorted(set(saved) - ours)
    if extra:
        problems.append(f"the checkpoint has weights the model lacks: {extra[:8]}")
    opt, saved_opt = trainer.optimizer, h.get("optimizer")
    if opt is not None and trainer.lowered.state_regions:
        if saved_opt is None:
            problems.append(f"the trainer uses {type(opt).__name__} but the checkpoint has no "
                            "optimizer state")
        elif saved_opt["type"] != type(opt).__name__ or \
                list(saved_opt["state_names"]) != list(opt.state_names):
            problems.append(f"optimizer {type(opt).__name__}{list(opt.state_names)} differs "
                            f"from the checkpoint's {saved_opt['type']}"
                            f"{saved_opt['state_names']}")
    if problems:
        raise CheckpointError(f"checkpoint '{ckpt.path}' (model '{h['model']['name']}') does "
                              f"not fit model '{model.name}': " + "; ".join(problems) +
                              ". Build the same model (and optimizer) that was saved.")


def load(trainer, path: str, restore_rng: bool = True) -> dict:
    """Load `path` into `trainer` (any strategy, any number of ranks/devices): weights,
    optimizer state and step counts, the model seed (dropout masks use it) and, if asked,
    the RNG states (rank r gets the saved rank r's, or rank 0's). Returns the header
    (with 'extra'). Collective under MPI."""
    comm = _comm(trainer)
    ckpt = _read_everywhere(comm, path)
    apply(trainer, ckpt, restore_rng, _rank(comm))
    return ckpt.header


def apply(trainer, ckpt: Checkpoint, restore_rng: bool = True, rank: int = 0) -> None:
    """Write a verified checkpoint's state into `trainer` (every rank, same values)."""
    check_fits(trainer, ckpt)
    h, graph = ckpt.header, trainer.graph
    with torch.no_grad():
        for w in trainer.model.weights:
            if w.name in graph.initial_valid:
                trainer.executor.write(w.name, ckpt.tensors[w.name].to(getattr(torch, w.dtype)))
        for regions in trainer.lowered.state_regions.values():
            for r in regions:
                if r.name in graph.initial_valid:
                    trainer.executor.write(r.name, ckpt.tensors[r.name].to(
                        getattr(torch, r.dtype)))
    model = trainer.model
    trainer.step_count = model.step_count = int(h["model"]["step_count"])
    model.seed = int(h["model"]["seed"])
    if trainer.optimizer is not None and h.get("optimizer") is not None:
        trainer.optimizer_steps = int(h["optimizer"]["step_count"])
        trainer.optimizer.step_count = trainer.optimizer_steps
    if restore_rng and h.get("rng"):
        r = rank if rank < len(h["rng"]) else 0
        prefix = f"rng/rank{r}/"
        _set_rng_state(h["rng"][r], {k[len(prefix):]: v for k, v in ckpt.tensors.items()
                                     if k.startswith(prefix)})


# -- a directory of checkpoints -------------------------------------------------------------------
def checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"step-{step:08d}.ckpt")


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of the complete checkpoint files in `directory`, newest first."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), os.path.join(directory, f))
             for f in os.listdir(directory) for m in [_NAME.match(f)] if m]
    return sorted(found, reverse=True)


def latest(directory: str) -> str | None:
    """The checkpoint `latest` points to (or the newest file if the pointer is unusable)."""
    pointer = os.path.join(directory, LATEST)
    try:
        with open(pointer) as f:
            name = f.read().strip()
        if _NAME.match(name) and os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    except OSError:
        pass
    found = list_checkpoints(directory)
    return found[0][1] if found else None


def _candidates(directory: str) -> list[str]:
    """The checkpoints `resume` tries, in its order: `latest`, then the others newest first."""
    first = latest(directory)
    rest = [p for _, p in list_checkpoints(directory) if p != first]
    return ([first] if first else []) + rest


def newest_header(directory: str) -> dict | None:
    """The header of the checkpoint `resume` would load first (of those whose header reads),
    or None: what a run needs to know before building its model (its `extra`, such as the
    global batch). Not a collective call: the caller shares it."""
    for path in _candidates(directory) if os.path.isdir(directory) else []:
        try:
            return read_header(path)
        except CheckpointError:
            continue
    return None


def _point_latest(directory: str, path: str) -> None:
    pointer = os.path.join(directory, LATEST)
    tmp = f"{pointer}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(os.path.basename(path) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, pointer)
    _fsync_dir(directory)


def save_to_dir(trainer, directory: str, step: int | None = None, keep: int = 3,
                extra: dict | None = None,
                progress: Callable[[int, int], None] | None = None) -> str:
    """Save as `<directory>/step-<step>.ckpt`, then point `latest` at it and remove all but
    the newest `keep` checkpoints. Collective under MPI."""
    comm = _comm(trainer)
    step = trainer.step_count if step is None else int(step)
    path = checkpoint_path(directory, step)
    error = None
    if _rank(comm) == 0:
        try:
            os.makedirs(directory, exist_ok=True)
            for f in os.listdir(directory):        # leftovers of a crash mid-write
                if ".tmp." in f and (f.startswith("step-") or f.startswith(LATEST)):
                    os.unlink(os.path.join(directory, f))
        except OSError as e:
            error = f"checkpoint directory '{directory}': {e}."
    _agree(comm, error)
    save(trainer, path, extra, progress)
    if _rank(comm) == 0:
        try:
            _point_latest(directory, path)
            for _, old in list_checkpoints(directory)[max(keep, 1):]:
                os.unlink(old)
        except OSError as e:
            error = f"checkpoint directory '{directory}': {e}."
    _agree(comm, error)
    return path


def maybe_save(trainer, directory: str | None, every: int, step: int | None = None,
               keep: int = 3, extra: dict | None = None,
               progress: Callable[[int, int], None] | None = None) -> str | None:
    """For apps' --checkpoint-dir/--checkpoint-every: save when `step` (default: iterations
    run so far) is a positive multiple of `every`. Returns the path written, or None."""
    step = trainer.step_count if step is None else int(step)
    if not directory or not every or every < 0 or step <= 0 or step % every:
        return None
    return save_to_dir(trainer, directory, step, keep, extra, progress)


def resume(trainer, directory: str | None, restore_rng: bool = True, fallback: bool = True,
           out=sys.stderr) -> dict | None:
    """For apps' --resume: load the newest usable checkpoint of `directory` into `trainer`.
    Returns its header ('model' -> 'step_count' is the step reached, 'extra' what was
    saved), or None when the directory has no checkpoint (a fresh start). A corrupted
    newest checkpoint is reported on `out` and the previous one is used (fallback=False:
    raise instead). Collective under MPI."""
    comm = _comm(trainer)
    candidates, error = [], None
    if _rank(comm) == 0 and directory:
        candidates = _candidates(directory)
    if comm is not None:
        candidates = comm.bcast(candidates, root=0)
    if not candidates:
        return None
    errors = []
    for path in candidates if fallback else candidates[:1]:
        ckpt = None
        if _rank(comm) == 0:
            try:
                ckpt = read_file(path)
                error = None
            except CheckpointError as e:
                error = str(e)
        if comm is not None:
            error = comm.bcast(error, root=0)
        if error is not None:
            errors.append(error)
            if _rank(comm) == 0 and out is not None and fallback:
                print(f"resume: {error} Trying the previous checkpoint.", file=out, flush=True)
            continue
        ckpt = _broadcast(comm, ckpt)
        apply(trainer, ckpt, restore_rng, _rank(comm))
        return ckpt.header
    raise CheckpointError(f"resume from '{directory}': no usable checkpoint: " +
                          " | ".join(errors))


__all__ = ["CheckpointError", "Checkpoint", "save", "load", "apply", "read_file",
           "write_file", "state_tensors", "check_fits", "save_to_dir", "maybe_save", "resume",
           "latest", "list_checkpoints", "checkpoint_path", "VERSION", "MAGIC"]
