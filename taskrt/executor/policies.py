"""The MPI executor's decisions that need no MPI: when to poll, how to wait, what to batch, how
long an iteration may take. Pure: time comes in as an argument, actions go out as values, so
tests drive them with made-up clocks (tests/taskrt/test_policies.py); taskrt/executor/mpi.py
only carries them out. One reading of the machine: the defaults below take the other
processes' runnable threads from the load average (others_runnable) unless given them; the
executor itself decides from the node's run queue less its own threads (others_on_run_queue,
whose /proc readers tests replace; choose_idle_schedule: one `IdleSchedule` per job and
node, recorded in traces and --json).

  BusyPoll       while tasks run and messages or collectives are in flight, poll MPI between
                 tasks at most every Settings.poll_busy_s (negative: only when idle);
  IdleBackOff    a rank with nothing runnable first yields its core (sched_yield) for
                 spin_s (choose_idle_schedule: none when the node's ranks, with the other
                 processes' runnable threads, outnumber its cores), then sleeps 20 us,
                 40 us, ... up to poll_max_s;
  ready_batch    a batchable instruction and the ready ones with its batch key;
  WatchdogLimit  an iteration's limit: fixed, or FACTOR x the slowest so far above a floor.
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import asdict, dataclass

from ..settings import Settings
from .scheduler import RUN

YIELD, SLEEP = "yield", "sleep"
FIRST_SLEEP_S = 2e-5
FACTOR = 10          # the watchdog's limit, in slowest iterations so far


def others_runnable(ranks_here: int) -> float:
    """The node's runnable threads besides this job's ranks: its 1-minute load average less
    the ranks (at least 0; 0 where the OS gives no load average). Read once, when an
    executor is built."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0
    return max(0.0, load - ranks_here)


def _own_cores(ranks_here: int, cores: int, others: float | None) -> bool:
    """Whether every rank of this node can have a core of its own: its ranks and the other
    runnable threads (`others`; None: others_runnable() now) are no more than its cores."""
    if others is None:
        others = others_runnable(ranks_here)
    return ranks_here + others <= cores


def default_poll_max_s(ranks_here: int, cores: int, others: float | None = None) -> float:
    """200 us when every rank of this node can have a core of its own (a waiting rank's
    wake-ups then take time from nobody, and each round of a collective's protocol waits
    for the peer's next poll: 1 ms sleeps cost the last bucket of 2-rank data parallelism
    ~5 ms per iteration), else 1 ms (ranks share cores with each other or with other
    processes: wake-ups would take the core from a computing rank)."""
    return _poll_max_s(_own_cores(ranks_here, cores, others))


def _poll_max_s(own: bool) -> float:
    return 2e-4 if own else 1e-3


def _spin_s(own: bool) -> float:
    return 1e-3 if own else 0.0


def default_spin_s(ranks_here: int, cores: int, others: float | None = None) -> float:
    """1 ms when every rank of this node can have a core of its own, else 0: a yielding rank
    stays runnable, so on 4 ranks of 2 cores the waiting ranks took half the cores' time
    from the computing ones (the traced ranks' CPU was 2-4x their tasks' time), a cost
    that depends on how long each rank waits, which no per-node cost can stand for.
    The other processes count too (`others`, default others_runnable()): on 2 ranks of 2
    cores at a load average of 7-10, Inception-v3's data-parallel ranks spent 555 ms of CPU
    on an iteration with 154 ms of work, runnable 98% of its 2.9 s (spinning, then waking
    every 200 us). Sleeping at once leaves a waiting rank idle, as the simulator's host
    thread is (docs/simulator.md, "MPI progress")."""
    return _spin_s(_own_cores(ranks_here, cores, others))


# -- the idle schedule of a job: decided once, from the other processes' runnable threads --
RUNNABLE, LOADAVG = "runnable threads", "load average"     # IdleSchedule.source
SAMPLES, SAMPLE_GAP_S = 10, 0.004   # readings of the run queue, and the time between two
# Cores' worth of other processes' runnable threads beside which every rank of a node still
# has a core of its own (ranks <= cores, ranks + others <= cores + OWN_MARGIN; others: the run
# queue's mean over the samples, this job's threads left out). Measured on 2 ranks of 2
# cores, own-core and shared waiting taking turns (2026-12-06, Transformer and RNNLM --small
# data parallel, 4-5 rounds each): beside a made load of half a core and a whole one (the
# other helpers' runs on top: the readings 1-3), own-core waiting was faster, 0.65-0.88x
# the period (geometric means); beside two and three busy processes (readings 3-5) the two
# were even (0.90-1.00x), and sleeping at once leaves the cores to the other processes.
# Half a core above a whole number: a steady busy process reads near a whole number, so a
# fraction of a core more or less does not flip the choice.
OWN_MARGIN = 1.5


@dataclass(frozen=True)
class IdleSchedule:
    """How a node's waiting ranks wait (IdleBackOff's spin_s and max_s = poll_max_s) and what
    it was decided from: the node's ranks and cores, the other processes' runnable threads
    (`others`; None: not read) and where that came from (`source`: RUNNABLE, the run queue
    less this job's threads, sampled on the node's first rank; LOADAVG, the 1-minute load
    average less the ranks, where the OS gives no run queue), and `given`: the fields
    Settings gave (TASKRT_SPIN_S, TASKRT_POLL_MAX_S) instead of the choice."""
    spin_s: float
    poll_max_s: float
    ranks_here: int
    cores: int
    others: float | None
    source: str
    given: tuple = ()

    def to_dict(self) -> dict:
        return dict(asdict(self), given=list(self.given))


def own_cores_by_run_queue(ranks_here: int, cores: int, others: float) -> bool:
    """Whether every rank of a node can have a core of its own beside `others` cores' worth
    of other processes' runnable threads (the run queue's mean), with OWN_MARGIN to spare."""
    return ranks_here <= cores and ranks_here + others <= cores + OWN_MARGIN


def choose_idle_schedule(ranks_here: int, cores: int, others: float | None, source: str,
                         spin_s: float | None = None,
                         poll_max_s: float | None = None) -> IdleSchedule:
    """The IdleSchedule of a node: own-core waiting (1 ms of yields, sleeps up to 200 us)
    when its ranks can each have a core (RUNNABLE: own_cores_by_run_queue; LOADAVG: the old
    rule, no margin: default_spin_s), else sleeping at once (sleeps up to 1 ms); `spin_s` /
    `poll_max_s` (Settings') replace the choice where given."""
    if source == RUNNABLE:
        own = own_cores_by_run_queue(ranks_here, cores, others or 0.0)
    else:
        own = _own_cores(ranks_here, cores, others or 0.0)
    given = tuple(n for n, v in (("spin_s", spin_s), ("poll_max_s", poll_max_s))
                  if v is not None)
    return IdleSchedule(_spin_s(own) if spin_s is None else spin_s,
                        _poll_max_s(own) if poll_max_s is None else poll_max_s,
                        ranks_here, cores, others, source, given)


def run_queue_length(loadavg_text: str) -> int:
    """The runnable threads of the whole node (running or waiting for a core) from the text
    of /proc/loadavg (its 4th field, RUNNABLE/TOTAL)."""
    return int(loadavg_text.split()[3].split("/")[0])


def thread_runnable(stat_text: str) -> bool:
    """Whether a /proc/PID/task/TID/stat text is of a runnable thread (state R)."""
    return stat_text[stat_text.rindex(")") + 2:][:1] == "R"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _listdir(path: str) -> list[str]:
    return os.listdir(path)


def job_runnable(pids, read=None, listdir=None) -> int:
    """The runnable threads of the processes `pids` (this job's on the node); gone ones: 0.
    (read, listdir: the /proc file's text and a folder's names; default the OS's.)"""
    read, listdir = read or _read, listdir or _listdir
    n = 0
    for pid in pids:
        try:
            tids = listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                n += thread_runnable(read(f"/proc/{pid}/task/{tid}/stat"))
            except (OSError, ValueError):
                continue
    return n


def others_on_run_queue(pids, samples: int = SAMPLES, gap_s: float = SAMPLE_GAP_S,
                        read=None, listdir=None, sleep=None) -> float | None:
    """Cores' worth of other processes' runnable threads: the mean over `samples` readings,
    `gap_s` apart, of the node's run queue (/proc/loadavg) less the runnable threads of the
    processes `pids` (this job's ranks and their launchers; their previous runs and the
    1-minute load average's lag are not counted). None where the OS has no /proc."""
    read, sleep = read or _read, sleep or time.sleep
    seen = []
    for i in range(samples):
        if i:
            sleep(gap_s)
        try:
            total = run_queue_length(read("/proc/loadavg"))
        except (OSError, ValueError, IndexError):
            return None
        seen.append(max(0, total - job_runnable(pids, read, listdir)))
    return sum(seen) / len(seen) if seen else None


def read_others(pids, ranks_here: int) -> tuple[float, str]:
    """(others, source) for choose_idle_schedule: the run queue's less this job's threads
    (RUNNABLE; `pids`: this node's ranks and their launchers), or where the OS has none the
    load average less the node's ranks (LOADAVG)."""
    others = others_on_run_queue(pids)
    if others is not None:
        return others, RUNNABLE
    return others_runnable(ranks_here), LOADAVG


class BusyPoll:
    """Whether to poll MPI after a task (MPI progresses a non-blocking collective, and a
    large message, only inside MPI calls: polling only when idle would leave the gradients'
    all-reduces waiting until backward ends)."""
    __slots__ = ("every_s", "last")

    def __init__(self, every_s: float, now: float):
        self.every_s, self.last = every_s, now

    def due(self, now: float, in_flight: bool) -> bool:
        if in_flight and self.every_s >= 0 and now - self.last >= self.every_s:
            self.last = now
            return True
        return False


class IdleBackOff:
    """What a rank with nothing to run does next: YIELD (the awaited message often comes
    within microseconds, and time.sleep sleeps 50 us at least; sched_yield gives the core to
    any runnable process, so no spinning against a rank that shares it) until `spin_s` has
    passed since the last event, then SLEEP for a doubling time up to `max_s`."""
    __slots__ = ("spin_s", "max_s", "last_event", "sleep_s")

    def __init__(self, spin_s: float, max_s: float, now: float):
        self.spin_s, self.max_s = spin_s, max_s
        self.event(now)

    def event(self, now: float) -> None:
        """Something happened (a task ran, a message came): start over."""
        self.last_event, self.sleep_s = now, FIRST_SLEEP_S

    def idle(self, now: float) -> tuple[str, float]:
        """(YIELD, 0) or (SLEEP, seconds) for a rank that found nothing to do at `now`."""
        if now - self.last_event < self.spin_s:
            return YIELD, 0.0
        s = self.sleep_s
        self.sleep_s = min(s * 2, self.max_s)
        return SLEEP, s


_UNBATCHABLE = object()


def ready_batch(i: int, todo: deque, key_of: dict) -> list[int]:
    """Batchable node i (with key key_of[i]) and the ready RUN instructions in `todo` with
    the same key, taken out of `todo` (ready together, so no edge among them)."""
    key = key_of[i]
    batch, rest = [i], []
    for ins in todo:
        if ins.op == RUN and key_of.get(ins.node, _UNBATCHABLE) == key:
            batch.append(ins.node)
        else:
            rest.append(ins)
    if len(batch) > 1:
        todo.clear()
        todo.extend(rest)
    return batch


class WatchdogLimit:
    """How long a guarded call may wait: Settings.watchdog_s when set (0: never aborts),
    else watchdog_start_s until an iteration has finished, then FACTOR x the slowest
    iteration so far, at least watchdog_floor_s."""

    def __init__(self, settings: Settings):
        self.fixed_s = settings.watchdog_s
        self.floor_s = settings.watchdog_floor_s
        self.start_s = settings.watchdog_start_s
        self.slowest_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.fixed_s != 0

    def iteration_took(self, seconds: float) -> None:
        self.slowest_s = seconds if self.slowest_s is None else max(self.slowest_s, seconds)

    def limit(self) -> tuple[float, str]:
        """(seconds, how they were chosen) for a call starting now."""
        if self.fixed_s is not None:
            return self.fixed_s, "TASKRT_WATCHDOG_S"
        if self.slowest_s is None:
            return self.start_s, "the start-up limit TASKRT_WATCHDOG_START_S: no iteration " \
                                 "has finished yet"
        derived = FACTOR * self.slowest_s
        if derived < self.floor_s:
            return self.floor_s, f"the floor TASKRT_WATCHDOG_FLOOR_S; {FACTOR}x the " \
                                 f"slowest iteration so far ({self.slowest_s:.3g} s) is less"
        return derived, f"{FACTOR}x the slowest iteration so far ({self.slowest_s:.3g} s)"
