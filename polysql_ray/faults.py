"""Named fault points: moments in the code where a test observes it, or holds it, by name.

A test that must act at a precise moment of a run (kill a server once replication is done and
before the first execution, start it again once an execution has met the outage, kill an actor
while it is inside a batch, remove a node once a first part file is stored) orders itself on
these points instead of on sleeps or wall-clock timing, so a loaded machine cannot reorder it.

Disabled (one ``None`` check) unless a folder is given: the engine setting ``_fault_points``
for an execution actor (:class:`polysql_ray.pipeline.actors.ExecutionActor`), or the
environment variable :data:`ENV` for code in the driver's process. At a point named ``name``
the code

1. appends its pid as one line to ``<folder>/<name>.reached`` (the test waits for this file);
2. then, while ``<folder>/<name>.hold`` exists, waits (the test removes it to let the code go
   on), at most :data:`HOLD_MAX_S` seconds, after which it goes on and the test's own checks
   fail instead of the run hanging.

Points in the code: ``execute`` (an execution actor, before each statement), ``unavailable``
(an execution actor, a statement met an unavailable server and is about to be retried),
``part_written`` (the driver, after a batch of score rows reached the results store).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

#: Environment variable naming the fault-point folder of the driver's process.
ENV = "POLYSQL_FAULT_POINTS"
#: Longest hold at one point, seconds (a test that forgets to release does not hang forever).
HOLD_MAX_S = 900.0


class FaultPoints:
    """The fault points of one component; ``folder=None`` reads :data:`ENV` at each point
    (unset: disabled)."""

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        self.folder = None if folder is None else Path(folder)

    def _folder(self) -> Path | None:
        if self.folder is not None:
            return self.folder
        env = os.environ.get(ENV)
        return Path(env) if env else None

    def reach(self, name: str) -> None:
        """Say that point ``name`` is reached, then wait while it is held (module docstring)."""
        folder = self._folder()
        if folder is None:
            return
        with open(folder / f"{name}.reached", "a") as f:
            f.write(f"{os.getpid()}\n")
        hold, deadline = folder / f"{name}.hold", time.monotonic() + HOLD_MAX_S
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
