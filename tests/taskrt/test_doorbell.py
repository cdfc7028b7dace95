"""Doorbells between ranks of one host (taskrt/executor/doorbell.py), two in one process: a
ring ends the peer's sleep, a ring while awake ends the next one, only peers are rung, and a
disabled bell sleeps plainly."""
import socket

from taskrt.executor.doorbell import Doorbell


class _Comm:
    """Rank `rank` of a job of `size` ranks on this host whose rank 0 drew `token`."""

    def __init__(self, rank, size, token="t0k3n", hosts=None):
        self.rank, self.size, self.token = rank, size, token
        self.hosts = hosts or [socket.gethostname()] * size

    def Get_rank(self):
        return self.rank

    def bcast(self, value, root=0):
        return self.token

    def allgather(self, value):
        if isinstance(value, bool):
            return [True] * self.size
        return list(self.hosts)


def _pair(token="t0k3n", hosts=None):
    return Doorbell(_Comm(0, 2, token, hosts)), Doorbell(_Comm(1, 2, token, hosts))


def test_a_ring_ends_the_peers_sleep():
    a, b = _pair()
    try:
        assert a.active and b.active and list(a.peers) == [1] and list(b.peers) == [0]
        a.ring(1)
        assert b.sleep(10.0)          # returns at once when rung (10 s if never)
        assert a.rings == 1
        assert not b.sleep(0.001)     # the ring was drained: the next sleep is plain
        assert not a.sleep(0.001)     # nobody rang rank 0
    finally:
        a.close(), b.close()


def test_rings_while_awake_end_the_next_sleep_once():
    a, b = _pair("other")
    try:
        for _ in range(5):
            a.ring(1)
        assert b.sleep(10.0)
        assert not b.sleep(0.001)
    finally:
        a.close(), b.close()


def test_ranks_of_other_hosts_and_itself_are_not_rung():
    a, b = _pair("hosts", hosts=["h1", "h2"])
    try:
        assert a.peers == {} and b.peers == {}
        a.ring(1), a.ring(0)
        assert a.rings == 0 and not b.sleep(0.001)
    finally:
        a.close(), b.close()


def test_a_disabled_bell_sleeps_and_rings_nobody():
    a = Doorbell(_Comm(0, 2, "off"), enabled=False)
    b = Doorbell(_Comm(1, 2, "off"))
    try:
        assert not a.active                       # b bound, but a rings nothing
        a.ring(1)
        assert a.rings == 0 and not b.sleep(0.001) and not a.sleep(0.001)
    finally:
        a.close(), b.close()
