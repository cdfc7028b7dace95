"""MPIExecutor: runs this rank's share of a TaskGraph, moving data between ranks with MPI.

Control replication: every rank plans the same graph (checked by comparing fingerprints at
start-up) and runs only the nodes its RankScheduler gives it. Temporaries (taskrt.liveness)
are allocated when a node using them starts here and released after this rank's last user
(a send is done once packed, a receive once unpacked). Copies between ranks are
non-blocking sends/receives into preallocated contiguous buffers, tagged by their sequence
number among the copies of the same (source rank, destination rank) pair; receives are
posted before anything runs. All-reduces sum the partials of this rank's devices, then run
as non-blocking MPI all-reduces of gradient buckets on cached sub-communicators of the ranks
involved (taskrt/executor/collectives.py). The progress loop runs each instruction of the
RankScheduler with its handler (_on_run, _on_send, _on_post_recv, _on_unpack, _on_start) and
follows pure policies (taskrt/executor/policies.py): it polls MPI between tasks while
anything is in flight (BusyPoll, Settings.poll_busy_s), and never spins against other
processes: a rank that runs out of work yields its core for Settings.spin_s (none when the
node's ranks, with the other processes' runnable threads, outnumber its cores:
policies.choose_idle_schedule, decided once per job and node, node_idle_schedule; awaited
statistics and buckets often come within microseconds, and time.sleep sleeps 50 us at
least), then sleeps with a short, growing back-off (IdleBackOff, up to poll_max_s: 200 us
when each rank of the node can have its own core beside the other processes, else 1 ms). Batchable tasks that are ready
together (the optimizer's updates once a bucket's all-reduce is done) run as one batch per
device (taskrt.launch, IndexLaunch.batch), and idle points (steps.idle: parallel_ops' empty
parts) do nothing, except in a traced run(): with record_trace, every run() is traced
until `tracing` is set False (apps/training.py traces only the last iteration, so that the
run's other iterations are timed as untraced ones).

Failures: an exception on any rank prints the rank, the node and the error and aborts every
rank. The watchdog (taskrt/executor/watchdog.py, on by default) guards each iteration and
each collective read: one that outlasts 10x the slowest iteration so far (at least a floor)
prints the rank and what it awaits (messages from which ranks, all-reduces) and aborts.
"""
from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from collections import deque
from typing import Callable

import torch

from ..discovery import local_rank_and_size
from ..errors import ExecutionError, PlanError
from .collectives import Collectives, completed, rank_group
from .instances import TORCH_DTYPES, InstanceStore
from .scheduler import (COLLECT, POST_RECV, RECV, RUN, SEND, START, UNPACK, RankScheduler)
from .steps import (BatchMember, batchable, idle as is_idle, local_copy_step, nothing, reduce_step,
                    run_batches, task_step, view_of)
from .policies import (YIELD, BusyPoll, IdleBackOff, IdleSchedule, choose_idle_schedule,
                       default_poll_max_s, read_others, ready_batch)
from .watchdog import Watchdog
from ..settings import Settings
from ..taskgraph import ALLREDUCE, COPY, TASK
from ..trace import SCHEDULE, LoadMeter, Stamps, TraceEvent, traced_run

def _mpi():
    from mpi4py import MPI
    return MPI


def _bytes(t: torch.Tensor):
    """A contiguous tensor as an MPI byte buffer, without a copy (GPU tensors only with
    CUDA-aware MPI, through the CUDA array interface)."""
    b = (t if t.dim() else t.reshape(1)).view(torch.uint8)
    return [b.numpy() if b.device.type == "cpu" else b, _mpi().BYTE]


def _host_buffer(shape, dtype, device: str) -> torch.Tensor:
    pin = device.startswith("cuda") and torch.cuda.is_available()
    return torch.empty(shape, dtype=dtype, pin_memory=pin)


def node_ranks_and_cores(comm) -> tuple[int, int]:
    """(ranks on this node, cores this process may use). A collective call (every rank
    builds its executor together)."""
    _, ranks_here = local_rank_and_size(comm)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    return ranks_here, cores


def node_poll_max_s(comm) -> float:
    """policies.default_poll_max_s for this node's ranks and cores (a collective call)."""
    return default_poll_max_s(*node_ranks_and_cores(comm))


def node_idle_schedule(comm, settings: Settings) -> IdleSchedule:
    """This node's policies.IdleSchedule, one for the job (a collective call): the node's
    first rank reads the other processes' runnable threads (policies.read_others, leaving
    out every rank of the node and its launcher) while the others wait, and sends the
    reading to them, so that the node's ranks agree."""
    MPI = _mpi()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        ranks_here = node.Get_size()
        pids = node.gather((os.getpid(), os.getppid()), root=0)
        if node.Get_rank() == 0:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
                else (os.cpu_count() or 1)
            reading = (cores,) + read_others({p for pair in pids for p in pair}, ranks_here)
        else:
            reading = None
        cores, others, source = node.bcast(reading, root=0)
    finally:
        node.Free()
    return choose_idle_schedule(ranks_here, cores, others, source, settings.spin_s,
                                settings.poll_max_s)


def cuda_aware_mpi() -> bool:
    """Whether the MPI library can send from and receive into GPU memory."""
    MPI = _mpi()
    query = getattr(MPI, "Query_cuda_support", None)
    try:
        return bool(query()) if query is not None else False
    except Exception:
        return False


class MPIExecutor:
    def __init__(self, graph, comm=None, record_trace: bool = False,
                 abort_on_error: bool | None = None, keep="all",
                 settings: Settings | dict | None = None):
        self.settings = settings = Settings.resolve(settings)
        MPI = _mpi()
        self.MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.graph = graph
        machine = graph.machine
        if machine.num_ranks != self.comm.Get_size():
            raise PlanError(f"MPIExecutor: the graph's machine has {machine.num_ranks} ranks "
                            f"but MPI runs {self.comm.Get_size()}. Build the Machine with "
                            "taskrt.discover_machine() under the same mpirun.")
        self._check_same_graph()
        self.watchdog = Watchdog(self.rank, self._abort_job, settings)
        self._awaited: tuple[list, object] = ([], lambda: [])   # (receives, collectives)
        # Longest sleep between polls when nothing is runnable: short enough for MPI's
        # progress (some MPIs progress non-blocking collectives only inside MPI calls), long
        # enough that waiting ranks leave the cores to computing ones.
        # (always computed: node_idle_schedule is a collective call, which every rank makes)
        # One reading of the node's run queue for the job (its ranks must agree), recorded
        # in traces (trace_load) and the apps' --json.
        self.schedule = node_idle_schedule(self.comm, settings)
        self.poll_max_s, self.spin_s = self.schedule.poll_max_s, self.schedule.spin_s
        self.abort_on_error = (self.comm.Get_size() > 1) if abort_on_error is None \
            else abort_on_error
        self.record_trace = record_trace
        self.tracing = record_trace   # whether the next run() is traced (needs record_trace)
        self._stamps = Stamps()               # the last traced iteration's (self.trace)
        self.trace_load: dict | None = None      # LoadMeter.stop() of the traced iteration
        self.sent: list[tuple[int, int, int]] = []   # (node id, destination rank, bytes)
        self.wait_s = 0.0        # last run(): seconds with nothing runnable (awaiting messages)
        self.batched = 0         # last run(): tasks that ran in batches of two or more
        self.sched = RankScheduler(graph, self.rank)
        owned = machine.devices_of_rank(self.rank)
        self.store = InstanceStore(graph, owned, keep, settings)
        self.cuda_devices = sorted({self.store.torch_device[d] for d in owned
                                    if self.store.torch_device[d].startswith("cuda")})
        self.device_buffers = bool(self.cuda_devices) and cuda_aware_mpi()
        self._build_tags()
        self._build_nodes()
        self._build_groups()

    # -- set-up ------------------------------------------------------------------------------
    def _check_same_graph(self) -> None:
        mine = self.graph.fingerprint()
        prints = self.comm.allgather(mine)
        if len(set(prints)) != 1:
            bad = [r for r, p in enumerate(prints) if p != prints[0]]
            raise PlanError(f"rank {self.rank}: ranks built different task graphs (ranks {bad} "
                            "differ from rank 0). Every rank must build the same model, "
                            "strategy and machine (same seed, same arguments).")

    def _build_tags(self) -> None:
        ub = self.comm.Get_attr(self.MPI.TAG_UB)
        counters: dict[tuple[int, int], int] = {}
        self.tags: dict[int, int] = {}
        devs = self.graph.machine.devices
        for n in self.graph.nodes:
            if n.kind is COPY:
                pair = (devs[n.src].rank, devs[n.dst].rank)
                if pair[0] != pair[1]:
                    k = counters.get(pair, 0)
                    counters[pair] = k + 1
                    if k > ub:
                        raise PlanError(f"MPIExecutor: more than {ub} copies between ranks "
                                        f"{pair}, beyond MPI's tag bound.")
                    self.tags[n.id] = k

    def _build_nodes(self) -> None:
        store, g = self.store, self.graph
        devs = g.machine.devices
        self.steps = {}
        self.send_bufs, self.recv_bufs, self.unpack_to = {}, {}, {}
        # Batchable tasks (the optimizer's updates) that are ready together run as one
        # batch per device (taskrt.launch, IndexLaunch.batch); a traced run() runs each alone.
        self.batch_members: dict[int, BatchMember] = {}
        self.batch_keys: dict[int, object] = {}
        # A traced run() times every node alone: idle points run, nothing is batched.
        self._traced_steps: dict[int, Callable] = {}    # swapped in by _steps_for
        self._steps_traced, self._batch_keys_off = False, {}
        contexts: dict = {}
        for i, role in sorted(self.sched.roles.items()):
            n = g.nodes[i]
            if role == RUN:
                if n.kind is TASK:
                    self.steps[i] = task_step(n, store, contexts)
                    if is_idle(n):
                        self._traced_steps[i] = self.steps[i]
                        self.steps[i] = nothing     # an empty part (as LocalExecutor)
                    elif batchable(n):
                        self.batch_members[i] = BatchMember(n, store, contexts)
                        self.batch_keys[i] = self.batch_members[i].key
                elif n.kind is COPY:
                    self.steps[i] = local_copy_step(n, store)
                else:
                    self.steps[i] = reduce_step(n, store)
            elif role == SEND:
                src = view_of(store, n.reduction and n.from_partial, n.region.name, n.src,
                              n.rect)
                buf = self._comm_buffer(n.rect.shape, TORCH_DTYPES[n.region.dtype],
                                        store.torch_device[n.src])
                self.send_bufs[i] = (src, buf, devs[n.dst].rank)
            elif role == RECV:
                # Received into a message buffer, unpacked into the destination (which may
                # be a temporary, allocated only when it is unpacked).
                dst = store.staging_view(i) if n.reduction else \
                    view_of(store, False, n.region.name, n.dst, n.rect)
                self.recv_bufs[i] = self._comm_buffer(n.rect.shape, TORCH_DTYPES[n.region.dtype],
                                                      store.torch_device[n.dst])
                self.unpack_to[i] = dst

    def _comm_buffer(self, shape, dtype, device: str) -> torch.Tensor:
        """A contiguous message buffer: on the GPU with CUDA-aware MPI, else pinned host."""
        if self.device_buffers and device.startswith("cuda"):
            return torch.empty(shape, dtype=dtype, device=device)
        return _host_buffer(shape, dtype, device)

    def _build_groups(self) -> None:
        """One sub-communicator per set of ranks sharing an all-reduce (collective call)."""
        MPI = self.MPI
        groups = sorted({rank_group(n, self.graph.machine)
                         for n in self.graph.nodes if n.kind is ALLREDUCE})
        self.group_comms = {}
        for grp in groups:
            if len(grp) < 2:
                continue
            color = 0 if self.rank in grp else MPI.UNDEFINED
            sub = self.comm.Split(color, self.rank)
            if self.rank in grp:
                self.group_comms[grp] = sub
        self.collectives = Collectives(
            self.graph, self.rank, self.store, self.group_comms,
            [i for i, role in self.sched.roles.items() if role == COLLECT], _host_buffer, MPI,
            self.settings.bucket_bytes)
        self._handlers = {RUN: self._on_run, SEND: self._on_send, POST_RECV: self._on_post_recv,
                          UNPACK: self._on_unpack, START: self._on_start}

    # -- data in and out ---------------------------------------------------------------------
    def write(self, region, value: torch.Tensor) -> None:
        """Store a full tensor into this rank's initial holders (every rank calls it)."""
        name = region if isinstance(region, str) else region.name
        reg = self.graph.regions[name]
        for rect, devices in self.graph.initial_valid.get(name, []):
            for d in devices:
                if d in self.store.owned:
                    self.store.instance(name, d, rect).copy_(value[rect.slices_within(reg.rect)])

    def read(self, region) -> torch.Tensor:
        """The region's full value after the graph ran, on every rank (a collective call)."""
        name = region if isinstance(region, str) else region.name
        reg = self.graph.regions[name]
        self.store.check_readable(name)      # on every rank alike: no rank enters Bcast alone
        devs = self.graph.machine.devices
        pieces = [(r, h[0], False, False) for r, h in self.graph.final_valid.get(name, [])]
        pieces += [(r, d, True, p) for r, d, p in self.graph.final_pending.get(name, [])]
        roots = sorted({devs[dev].rank for _, dev, _, _ in pieces} - {self.rank})
        with self.watchdog.watch(f"reading '{name}'", lambda: "  broadcasts of its parts "
                                 f"from ranks {roots or [self.rank]}"):
            return self._read(name, reg, pieces)

    def _read(self, name, reg, pieces) -> torch.Tensor:
        devs = self.graph.machine.devices
        out = None
        for rect, dev, partial, in_partial in pieces:
            root = devs[dev].rank
            if dev in self.store.owned:
                src = (self.store.partial if in_partial else self.store.instance)(name, dev, rect)
                buf = src.detach().cpu().contiguous().clone()
            else:
                buf = torch.empty(rect.shape, dtype=TORCH_DTYPES[reg.dtype])
            self.comm.Bcast(_bytes(buf), root=root)
            if out is None:
                out = torch.zeros(reg.shape, dtype=buf.dtype)
            sl = rect.slices_within(reg.rect)
            if partial:
                out[sl] += buf
            else:
                out[sl] = buf
        if out is None:
            raise PlanError(f"read '{name}': no part of it holds data after the graph.")
        return out

    # -- running -----------------------------------------------------------------------------
    def run(self) -> None:
        """Run this rank's nodes once; returns when they are all done."""
        try:
            with self.watchdog.watch("an iteration", self._waiting_report, iteration=True):
                self._run()
        except BaseException as exc:
            if not self.abort_on_error:
                raise
            self._abort(exc)

    def _abort(self, exc: BaseException) -> None:
        msg = f"[rank {self.rank}] {type(exc).__name__}: {exc}"
        print(msg, file=sys.stderr, flush=True)
        if not isinstance(exc, ExecutionError):
            traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        # mpirun forwards the ranks' output through pipes and stops forwarding when a rank
        # aborts: without a moment to drain, the message above was lost in ~1 of 10 runs.
        time.sleep(0.5)
        try:
            self.comm.Abort(1)
        finally:
            # MPICH's Abort can return before the process manager ends this rank (seen in ~1
            # of 8 runs): the rank then went on to its next iteration and printed results.
            os._exit(1)

    def _abort_job(self) -> None:
        """The watchdog's way out: end every rank of the job (never returns)."""
        try:
            time.sleep(0.5)              # let mpirun forward the report (see _abort)
            self.comm.Abort(1)
        finally:
            os._exit(1)

    def _run(self) -> None:
        """The progress loop: run the ready instructions (one handler per instruction kind),
        poll MPI between them when busy (BusyPoll) and when out of work (IdleBackOff)."""
        sched = self.sched
        sched.reset()
        self.store.start_iteration()
        todo = self._todo = deque(sched.start())
        self._recv_reqs, self._recv_ids = [], []
        self._send_reqs, self._gpu_sends = [], []     # gpu: (event, node) being packed
        self._awaited = (self._recv_ids, self.collectives.waiting)  # the watchdog's report
        self.sent = []
        self.wait_s = 0.0
        self.batched = 0
        settings = self.settings
        clock = time.perf_counter
        t0 = clock()
        busy = BusyPoll(settings.poll_busy_s, t0)
        idle = IdleBackOff(self.spin_s, self.poll_max_s, t0)
        traced = traced_run(self)
        self._steps_for(traced)
        stamps = Stamps(self.graph.nodes, t0) if traced else None
        stamp = stamps.raw.append if traced else None
        meter = LoadMeter().start() if traced else None   # the OS's load, traced
        handlers = self._handlers
        colls, recv_reqs = self.collectives, self._recv_reqs
        while not sched.finished:
            ran = bool(todo)
            while todo:
                ins = todo.popleft()
                start = clock()
                handlers[ins.op](ins.node)
                now = clock()
                if stamp is not None and ins.op != POST_RECV:     # one event per node
                    stamp((ins.node, start, now))
                if busy.due(now, colls.busy or bool(recv_reqs)):
                    self._poll()
            if ran:
                idle.event(now)
            if sched.finished:
                break
            if self._poll() or todo:
                idle.event(clock())
                continue
            now = clock()
            action, seconds = idle.idle(now)
            if action == YIELD:
                os.sched_yield()
            else:
                time.sleep(seconds)
            self.wait_s += clock() - now
        if self._send_reqs:
            self.MPI.Request.Waitall(self._send_reqs)
        for dev in self.cuda_devices:
            torch.cuda.synchronize(dev)
        if stamps is not None:
            self._stamps = stamps
            # the stamps' origin on this host's monotonic clock (perf_counter), so that
            # ranks on one host are put on one clock exactly (strategy/rankclocks.py)
            self.trace_load = dict(meter.stop(), clock_origin_s=t0,
                                   host=socket.gethostname(),
                                   **{SCHEDULE: self.schedule.to_dict()})

    def _steps_for(self, traced: bool) -> None:
        """The steps and batches of a traced run() (every node alone) or an untraced one."""
        if traced == self._steps_traced:
            return
        self._steps_traced = traced
        for i, step in self._traced_steps.items():
            self._traced_steps[i], self.steps[i] = self.steps[i], step
        self.batch_keys, self._batch_keys_off = self._batch_keys_off, self.batch_keys

    @property
    def trace(self) -> list[TraceEvent]:
        """The last traced iteration's events (one per node this rank ran, in the order
        they ran; empty without record_trace)."""
        return self._stamps.events()

    def _poll(self) -> bool:
        """Advance packing, messages and collectives; whether anything happened."""
        progressed = False
        gpu_sends, todo, sched = self._gpu_sends, self._todo, self.sched
        for k in range(len(gpu_sends) - 1, -1, -1):
            ev, i = gpu_sends[k]
            if ev.query():
                del gpu_sends[k]
                progressed = True
                self._send_reqs.append(self._isend(i))
        recv_reqs, recv_ids = self._recv_reqs, self._recv_ids
        if recv_reqs:
            g = self.graph
            idx = completed(self.MPI, recv_reqs, lambda k: "message from rank "
                            f"{g.machine.devices[g.nodes[recv_ids[k]].src].rank} for "
                            f"{g.nodes[recv_ids[k]].describe()}")
            if idx:
                for k in sorted(idx, reverse=True):
                    todo.extend(sched.message_arrived(recv_ids[k]))
                    del recv_reqs[k], recv_ids[k]
                progressed = True
        if self.collectives.busy:
            for j in self.collectives.poll():
                todo.extend(sched.node_done(j))
                progressed = True
        return progressed

    # -- one handler per instruction: carry it out, queue what became ready --------------------
    def _on_run(self, i: int) -> None:
        if i in self.batch_keys:
            return self._on_run_batch(i)
        used = self.store.node_temps.get(i)
        if used:
            self.store.begin(used)
        self.steps[i]()
        if used:
            self.store.end(used)
        self._todo.extend(self.sched.node_done(i))

    def _on_run_batch(self, i: int) -> None:
        """Batchable node i and the ready ones with its key, as one batch per device."""
        batch = ready_batch(i, self._todo, self.batch_keys)
        if len(batch) > 1:
            self.batched += len(batch)
        store, temps = self.store, self.store.node_temps
        for j in batch:
            if j in temps:
                store.begin(temps[j])
        run_batches([self.batch_members[j] for j in batch])
        for j in batch:
            if j in temps:
                store.end(temps[j])
            self._todo.extend(self.sched.node_done(j))

    def _on_send(self, i: int) -> None:
        src, buf, _ = self.send_bufs[i]
        used = self.store.node_temps.get(i)
        if used:
            self.store.begin(used)
        src = src.t
        if src.device.type == "cpu":
            buf.copy_(src)
            self._send_reqs.append(self._isend(i))
        else:
            # Pack on the device's stream; send once the copy has finished, so the host
            # keeps scheduling while the GPU works.
            buf.copy_(src, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(src.device))
            self._gpu_sends.append((ev, i))
        # Packed (on a GPU: queued on the stream, which orders any reuse of the memory after
        # it), so the source may be released.
        if used:
            self.store.end(used)
        self._todo.extend(self.sched.node_done(i))

    def _on_post_recv(self, i: int) -> None:
        n = self.graph.nodes[i]
        src_rank = self.graph.machine.devices[n.src].rank
        self._recv_reqs.append(self.comm.Irecv(_bytes(self.recv_bufs[i]), source=src_rank,
                                               tag=self.tags[i]))
        self._recv_ids.append(i)

    def _on_unpack(self, i: int) -> None:
        used = self.store.node_temps.get(i)
        if used:
            self.store.begin(used)
        dst = self.unpack_to[i].t
        dst.copy_(self.recv_bufs[i], non_blocking=dst.device.type != "cpu")
        if used:
            self.store.end(used)
        self._todo.extend(self.sched.node_done(i))

    def _on_start(self, i: int) -> None:
        used = self.store.node_temps.get(i)
        if used:
            self.store.begin(used)           # released when the collective finishes
        for j in self.collectives.start(i):
            self._todo.extend(self.sched.node_done(j))
        self._todo.extend(self.sched.collective_started(i))

    def _isend(self, i: int):
        """Send copy i's packed buffer (its packing has finished)."""
        _, buf, dst = self.send_bufs[i]
        self.sent.append((i, dst, buf.numel() * buf.element_size()))
        return self.comm.Isend(_bytes(buf), dest=dst, tag=self.tags[i])

    def _waiting_report(self) -> str:
        """What this rank's iteration awaits (called from the watchdog's thread)."""
        g = self.graph
        devs = g.machine.devices
        recv_ids, colls = self._awaited
        recv_ids, coll_ids = list(recv_ids), list(colls())
        lines = [f"rank {self.rank} is waiting for:"]
        for i in recv_ids[:20]:
            n = g.nodes[i]
            lines.append(f"  message from rank {devs[n.src].rank} (tag {self.tags[i]}): "
                         f"{n.describe()}")
        for i in coll_ids[:20]:
            lines.append(f"  all-reduce among ranks {list(rank_group(g.nodes[i], g.machine))}: "
                         f"{g.nodes[i].describe()}")
        blocked = [i for i in self.sched.pending() if i not in recv_ids and i not in coll_ids]
        for i in blocked[:10]:
            lines.append(f"  not started: {g.nodes[i].describe()}")
        return "\n".join(lines)
