"""The test side of :mod:`polysql_ray.faults`: hold a named point, wait until the code reached
it, release it (not a conftest: imported by the tests that order events on these points)."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

#: Generous bound on waiting for a point (the code signals it; load only makes it later).
WAIT_MAX_S = 600.0


class Points:
    """A fault-point folder; pass :attr:`folder` to the code (``_fault_points`` engine
    setting, or the ``POLYSQL_FAULT_POINTS`` environment variable)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def hold(self, name: str) -> None:
        """Code reaching ``name`` waits there until :meth:`release`."""
        (self.folder / f"{name}.hold").touch()

    def release(self, name: str) -> None:
        (self.folder / f"{name}.hold").unlink(missing_ok=True)

    def pids(self, name: str) -> list[int]:
        """The pids that reached ``name``, in order (one per time reached)."""
        try:
            return [int(x) for x in (self.folder / f"{name}.reached").read_text().split()]
        except FileNotFoundError:
            return []

    def wait(self, name: str, times: int = 1, alive: Callable[[], bool] = lambda: True) -> list[int]:
        """Wait until ``name`` was reached ``times`` times (or ``alive()`` turns false); returns
        :meth:`pids`. Raises AssertionError naming the point after :data:`WAIT_MAX_S`."""
        deadline = time.monotonic() + WAIT_MAX_S
        while len(self.pids(name)) < times and alive():
            if time.monotonic() > deadline:
                raise AssertionError(f"fault point {name!r} not reached {times} time(s) in {WAIT_MAX_S:.0f} s")
            time.sleep(0.01)
        return self.pids(name)
