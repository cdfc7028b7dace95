"""The MPI executor's pure policies (taskrt/executor/policies.py), driven with made-up clocks
and to-do lists, without MPI: busy polling, the idle back-off, batching, the poll limit by
cores. The watchdog's limit is tests/taskrt/test_watchdog.py; the driver carrying them out
under mpirun is tests/test_mpi.py."""
from collections import deque

from taskrt.executor import mpi, policies
from taskrt.executor.policies import (FIRST_SLEEP_S, SLEEP, YIELD, BusyPoll, IdleBackOff,
                                      default_poll_max_s, default_spin_s, ready_batch)
from taskrt.executor.scheduler import RUN, SEND, Instruction


def test_busy_poll_only_while_in_flight_and_not_too_often():
    p = BusyPoll(1e-3, now=0.0)
    assert not p.due(5e-3, in_flight=False)          # nothing in flight: never
    assert p.due(5e-3, in_flight=True)
    assert not p.due(5.5e-3, in_flight=True)         # within 1 ms of the last poll
    assert p.due(6e-3, in_flight=True)
    never = BusyPoll(-1.0, now=0.0)                  # negative: poll only when idle
    assert not never.due(100.0, in_flight=True)


def test_idle_back_off_yields_then_sleeps_doubling_up_to_the_limit():
    b = IdleBackOff(spin_s=1e-3, max_s=1e-4, now=0.0)
    assert b.idle(5e-4) == (YIELD, 0.0)              # just idle: yield the core
    sleeps = [b.idle(2e-3) for _ in range(5)]
    assert [a for a, _ in sleeps] == [SLEEP] * 5
    assert [s for _, s in sleeps] == [FIRST_SLEEP_S, 4e-5, 8e-5, 1e-4, 1e-4]
    b.event(3.0)                                     # something happened: start over
    assert b.idle(3.0) == (YIELD, 0.0)
    assert b.idle(3.01) == (SLEEP, FIRST_SLEEP_S)
    no_spin = IdleBackOff(spin_s=0.0, max_s=1e-3, now=0.0)
    assert no_spin.idle(0.0)[0] == SLEEP


def test_ready_batch_takes_same_key_runs_and_keeps_the_rest_in_order():
    keys = {1: "sgd", 2: "sgd", 3: "adam", 5: "sgd"}
    todo = deque([Instruction(RUN, 2), Instruction(RUN, 3), Instruction(SEND, 5),
                  Instruction(RUN, 4), Instruction(RUN, 5)])
    assert ready_batch(1, todo, keys) == [1, 2, 5]
    assert list(todo) == [Instruction(RUN, 3), Instruction(SEND, 5), Instruction(RUN, 4)]
    alone = deque([Instruction(RUN, 4)])
    assert ready_batch(3, alone, keys) == [3] and list(alone) == [Instruction(RUN, 4)]


def test_poll_limit_is_shorter_when_each_rank_has_a_core(monkeypatch):
    assert default_poll_max_s(ranks_here=2, cores=2, others=0.0) == 2e-4
    assert default_poll_max_s(ranks_here=4, cores=2, others=0.0) == 1e-3   # leave cores to computing ranks
    assert default_poll_max_s(ranks_here=2, cores=2, others=3.5) == 1e-3   # other processes too
    monkeypatch.setattr(mpi, "local_rank_and_size", lambda comm: (0, 3))
    monkeypatch.setattr(mpi.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert mpi.node_poll_max_s(None) == 1e-3


def test_waiting_ranks_do_not_spin_when_they_outnumber_the_cores(monkeypatch):
    assert default_spin_s(ranks_here=2, cores=2, others=0.0) == 1e-3
    assert default_spin_s(ranks_here=4, cores=2, others=0.0) == 0.0  # sleep at once: stay off the run queue
    monkeypatch.setattr(mpi, "local_rank_and_size", lambda comm: (0, 4))
    monkeypatch.setattr(mpi.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    spin = default_spin_s(*mpi.node_ranks_and_cores(None))
    assert IdleBackOff(spin, 1e-3, now=0.0).idle(0.0)[0] == SLEEP


def test_waiting_ranks_do_not_spin_on_a_node_loaded_by_other_processes(monkeypatch):
    # 2 ranks on 2 cores spin only while nothing else wants the cores (issue 21: on a load
    # average of 7-10 spinning, then waking every 200 us, kept a waiting rank runnable and
    # tripled its CPU beside its work)
    assert default_spin_s(ranks_here=2, cores=2, others=0.4) == 0.0
    assert default_spin_s(ranks_here=2, cores=4, others=1.5) == 1e-3
    monkeypatch.setattr(policies.os, "getloadavg", lambda: (9.0, 8.0, 7.0))
    assert policies.others_runnable(2) == 7.0
    assert default_spin_s(2, 2) == 0.0 and default_poll_max_s(2, 2) == 1e-3
    monkeypatch.setattr(policies.os, "getloadavg", lambda: (1.6, 1.0, 1.0))   # our ranks only
    assert policies.others_runnable(2) == 0.0
    assert default_spin_s(2, 2) == 1e-3 and default_poll_max_s(2, 2) == 2e-4


# -- the job's idle schedule: decided once, from the run queue less the job's own threads ----
def _proc(loadavg: str, threads: dict):
    """Fake /proc readers: the text of /proc/loadavg and {pid: [thread states]}."""
    def read(path):
        if path == "/proc/loadavg":
            return loadavg
        _, _, pid, _, tid, _ = path.split("/")
        return f"{tid} (python3 x) {threads[int(pid)][int(tid)]} 1 2 3"

    def listdir(path):
        pid = int(path.split("/")[2])
        if pid not in threads:
            raise FileNotFoundError(path)
        return [str(i) for i in range(len(threads[pid]))]
    return read, listdir


def test_others_are_the_run_queue_less_the_jobs_runnable_threads():
    # 5 runnable on the node: our 2 ranks (one with a runnable helper thread) and 2 others;
    # our launcher sleeps; a pid that is gone counts nothing
    read, listdir = _proc("2.31 1.90 1.20 5/120 4242", {10: "RS", 11: "RR", 9: "S"})
    assert policies.job_runnable([10, 11, 9, 12], read, listdir) == 3
    sleeps = []
    assert policies.others_on_run_queue([10, 11, 9], samples=4, gap_s=0.01, read=read,
                                        listdir=listdir, sleep=sleeps.append) == 2.0
    assert sleeps == [0.01] * 3
    only_us = _proc("2.31 1.90 1.20 2/120 4242", {10: "R", 11: "R"})
    assert policies.others_on_run_queue([10, 11], 3, 0.0, *only_us, sleep=lambda s: None) == 0
    assert policies.thread_runnable("7 (a) b) R 1") and not policies.thread_runnable("7 (a) S 1")

    def no_proc(path):
        raise FileNotFoundError(path)
    assert policies.others_on_run_queue([1], 3, 0.0, no_proc, no_proc, lambda s: None) is None


def test_idle_schedule_keeps_own_cores_beside_a_core_of_other_load():
    own = policies.choose_idle_schedule(2, 2, 0.0, policies.RUNNABLE)
    assert (own.spin_s, own.poll_max_s) == (1e-3, 2e-4)
    for others in (0.3, 0.5, policies.OWN_MARGIN):     # a fraction of a core does not flip it
        assert policies.choose_idle_schedule(2, 2, others, policies.RUNNABLE).spin_s == 1e-3
    crowded = policies.choose_idle_schedule(2, 2, policies.OWN_MARGIN + 0.1, policies.RUNNABLE)
    assert (crowded.spin_s, crowded.poll_max_s) == (0.0, 1e-3)
    four = policies.choose_idle_schedule(4, 2, 0.0, policies.RUNNABLE)   # ranks outnumber cores
    assert (four.spin_s, four.poll_max_s) == (0.0, 1e-3)
    # the load average (no run queue) keeps its rule: no margin
    assert policies.choose_idle_schedule(2, 2, 0.4, policies.LOADAVG).spin_s == 0.0
    given = policies.choose_idle_schedule(2, 2, 0.0, policies.RUNNABLE, spin_s=0.0)
    assert (given.spin_s, given.poll_max_s, given.given) == (0.0, 2e-4, ("spin_s",))
    assert given.to_dict() == {"spin_s": 0.0, "poll_max_s": 2e-4, "ranks_here": 2, "cores": 2,
                               "others": 0.0, "source": policies.RUNNABLE, "given": ["spin_s"]}


def test_read_others_falls_back_to_the_load_average_without_a_run_queue(monkeypatch):
    monkeypatch.setattr(policies, "others_on_run_queue", lambda pids: None)
    monkeypatch.setattr(policies.os, "getloadavg", lambda: (3.5, 3.0, 2.0))
    assert policies.read_others([1, 2], 2) == (1.5, policies.LOADAVG)
    monkeypatch.setattr(policies, "others_on_run_queue", lambda pids: 0.25)
    assert policies.read_others([1, 2], 2) == (0.25, policies.RUNNABLE)
