"""Doorbells: a rank asleep while it awaits a message is woken when the message is sent.

A rank with nothing to run sleeps between MPI polls (policies.IdleBackOff: 20 us doubling to
poll_max_s, 1 ms when a node's ranks outnumber its cores), so a message that arrives during a
sleep waited half a sleep on average before its unpack started: on 4 ranks of 2 cores every
hop of a chain of messages cost about half a millisecond (docs/simulator.md, "Waiting ranks
that sleep"). The MPI library here completes a message between ranks of one host from the
receiver's side alone (a 4 MB Isend completed 0.7 ms after its Irecv while the sender slept
in time.sleep), so the receiver only has to be awake to take it.

Each rank binds a datagram socket in Linux's abstract namespace (no file, gone with the
process), named by a token rank 0 draws and broadcasts (so two jobs on one host never ring
each other's bells). After each send to a rank of the same host, and after starting an
all-reduce, the sender rings its peers: one datagram each, never blocking (a full queue
already means "wake up"). A sleeping rank waits in select() on its socket for at most its
back-off time, so a ring ends the sleep at once and a missed one costs what polling always
cost. Where the namespace or the socket is not available (not Linux, a sandbox), every ring
and wait falls back to the plain sleep.
"""
from __future__ import annotations

import os
import secrets
import select
import socket
import time


class Doorbell:
    """This rank's bell and its peers' on the same host (a collective constructor)."""

    def __init__(self, comm, enabled: bool = True):
        rank = comm.Get_rank()
        token = comm.bcast(secrets.token_hex(8) if rank == 0 else None, root=0)
        hosts = comm.allgather(socket.gethostname())
        self.sock = None
        if enabled and hasattr(socket, "AF_UNIX"):
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.bind(_address(token, rank))
                sock.setblocking(False)
                self.sock = sock
            except OSError:
                self.sock = None
        bound = comm.allgather(self.sock is not None)   # (and every bell bound before rings)
        self.peers = {r: _address(token, r) for r, host in enumerate(hosts)
                      if r != rank and host == hosts[rank] and bound[r]}
        self.rings = 0           # datagrams sent (a run's count: tests, traces)

    @property
    def active(self) -> bool:
        return self.sock is not None

    def ring(self, rank: int) -> None:
        """Wake `rank` if it shares this host and sleeps (nothing when it does not)."""
        addr = self.peers.get(rank)
        if addr is not None and self.sock is not None:
            try:
                self.sock.sendto(b"\0", addr)
                self.rings += 1
            except OSError:         # its queue is full (it will wake), or it has exited
                pass

    def ring_all(self, ranks) -> None:
        for r in ranks:
            self.ring(r)

    def sleep(self, seconds: float) -> bool:
        """Sleep at most `seconds`, less if rung; whether it was rung (the rings that came
        while awake end the next sleep at once: they are drained here)."""
        if self.sock is None:
            time.sleep(seconds)
            return False
        ready, _, _ = select.select([self.sock], [], [], seconds)
        if not ready:
            return False
        try:
            while True:
                self.sock.recv(16)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass
        return True

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _address(token: str, rank: int) -> bytes:
    """An abstract-namespace address (leading NUL: no file on disk, Linux only)."""
    return f"\0soapflow-{token}-{os.getuid()}-{rank}".encode()
