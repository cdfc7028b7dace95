"""How a search chain (strategy/search.py) applies its moves to its SimulationSession and takes
them back: one operator, a pair or a group changed at once (change_all where the session has
it, else in turn), a change timed before its memory peak (change_timed, complete), the undo
of a rejected or failed move (_back_to), and a chain started by changing the last chain's
session to its start instead of a build (_reach). The CPU time of changes and builds is
counted here for that choice (search.py's module doc, "Session builds").
"""
from __future__ import annotations

import time

from parallel_ops.errors import ConfigError
from parallel_ops.lowering import resolve_configs
from parallel_ops.recompute import set_recompute
from taskrt.errors import PlanError

from .delta import SimulationSession


class SessionChanges:
    """Search's methods that change its session (a mixin: they use the search's state)."""

    def _reach(self, strategy) -> SimulationSession | None:
        """The last chain's session changed, operator by operator, to `strategy` (every
        operator it does not name data parallel), when that costs less CPU time than a
        session build by the measured means; else None (search.py's module doc, "Session
        builds")."""
        todo = self._reach_todo(strategy)
        if todo is None or not self._cheaper_by_changes(len(todo)):
            return None
        session, self.last_session = self.last_session, None
        try:
            for name, cfg in todo:
                self._change(session, name, cfg)
        except (ConfigError, PlanError):
            return None
        self.reached += 1
        return session

    def _can_reach(self, strategy, budget) -> bool:
        """Whether _reach would start a chain at `strategy` without a build, its changes
        ending within `budget` by their mean CPU time so far (a restart from the best when
        no build fits in what is left of the budget)."""
        todo = self._reach_todo(strategy)
        return todo is not None and self._cheaper_by_changes(len(todo)) and \
            len(todo) * self.change_cpu / self.change_count < budget.left()

    def _reach_todo(self, strategy) -> list | None:
        """The changes [(op name, config)] that take the last chain's session to `strategy`,
        or None where _reach never changes a session (none kept, recomputation, no delta, no
        change timed yet, a strategy that does not resolve)."""
        session = self.last_session
        if session is None or self.units is not None or not self.delta \
                or not self.change_count:
            return None
        try:
            target = resolve_configs(self.model, strategy, self.machine_model.taskrt_machine())
        except ConfigError:
            return None
        return [(name, cfg) for name, cfg in target.items() if session.configs[name] != cfg]

    def _cheaper_by_changes(self, n: int) -> bool:
        """Whether n changes cost less CPU time than a session build, by the means so far."""
        return n * self.change_cpu / self.change_count < self.build_cpu / self.build_count

    def _change(self, session, name: str, cfg, *more):
        """session.change (change_all with the (name, cfg) in `more`), its CPU time counted."""
        t = time.process_time()
        result = session.change_all([(name, cfg), *more]) if more else session.change(name, cfg)
        self.change_cpu += time.process_time() - t
        self.change_count += 1 + len(more)
        return result

    def _change_timed(self, session, changes) -> float:
        """session.change_timed(changes), its CPU time counted as the changes'."""
        t = time.process_time()
        span = session.change_timed(changes)
        self.change_cpu += time.process_time() - t
        self.change_count += len(changes)
        return span

    def _complete(self, session):
        """session.complete(), its CPU time counted with the change's."""
        t = time.process_time()
        result = session.complete()
        self.change_cpu += time.process_time() - t
        return result

    def _change_pair(self, session, move: tuple):
        """Two operators changed (a pair move): at once where the session can, else in turn."""
        _, a, cfg_a, b, cfg_b, old_a = move
        if hasattr(session, "change_all"):
            return self._change(session, a, cfg_a, (b, cfg_b))
        self._change(session, a, cfg_a)
        try:
            return self._change(session, b, cfg_b)
        except (ConfigError, PlanError):
            self._change(session, a, old_a)
            raise

    def _change_group(self, session, move: tuple):
        """Several operators changed (an exchange move): at once where the session can, else
        in turn, those made before a failing one changed back."""
        _, changes, olds = move
        if hasattr(session, "change_all"):
            return self._change(session, *changes[0], *changes[1:])
        for k, (name, cfg) in enumerate(changes):
            try:
                result = self._change(session, name, cfg)
            except (ConfigError, PlanError):
                for (done, _), was in zip(changes[:k], olds[:k]):
                    self._change(session, done, was)
                raise
        return result

    def _back_to(self, before: tuple, move: tuple, session=None):
        """Take back a rejected or failed move (`session`: the one it made, None when it
        failed); returns the session of before."""
        old, state = before
        if move[0] == "recompute":
            self.state = state
            if self.units is not None:
                set_recompute(self.model, self.units.segments(state))
        elif session is not None and self.delta:
            session.undo()            # a failed change() leaves the session as it was
            if not hasattr(session, "change_all"):        # one level of undo: re-done
                if move[0] == "pair":
                    self._change(session, move[1], move[5])
                elif move[0] == "group":
                    for (name, _), was in zip(move[1][:-1], move[2][:-1]):
                        self._change(session, name, was)
        elif not self.delta:
            old = self._session(old.configs)
        return old
