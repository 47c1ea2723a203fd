"""Progress of a run: rich bars on a terminal, periodic one-line reports everywhere else.

On a terminal there is one bar per pipeline stage (replicate, execute per engine, score). When
the console is not a terminal (CI logs, ``ray job submit``, ``nohup``) a single line such as::

    progress 42s | replicate 20/20 | exec duckdb 1100/2068 | score 512/4136

is printed every ``interval_s`` seconds (on an advance, or on :meth:`Progress.tick` while the run
waits: a stalled run keeps reporting the counts it is stuck at), plus one final line when the
run ends, so a log shows that the run is alive without drawing bars into it.
"""
from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as _RichProgress, TextColumn, TimeElapsedColumn

#: Default seconds between two progress lines in a non-terminal log.
LINE_INTERVAL_S = 15.0


class Progress:
    """Context manager; ``add(stage, total) -> task id``, ``advance(task, n)``.

    Args:
        enabled: False prints nothing at all (``progress=false``).
        console: where to draw (stderr by default).
        interval_s: seconds between two one-line reports when the console is no terminal
            (0 reports at every advance).
    """

    def __init__(self, enabled: bool = True, console: Console | None = None,
                 interval_s: float = LINE_INTERVAL_S) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.bars = enabled and self.console.is_terminal
        self.interval_s = float(interval_s)
        self._p = (_RichProgress(TextColumn("{task.description:<20}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=False)
                   if self.bars else None)
        self._tasks: list[list] = []  # [stage, done, total] for line mode
        self._t0 = time.monotonic()
        self._last = self._t0
        self.lines = 0  # one-line reports printed (line mode)

    def __enter__(self) -> "Progress":
        if self._p:
            self._p.start()
        self._t0 = self._last = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        if self._p:
            self._p.stop()
        elif self.enabled and self._tasks:
            self._line(final=True)

    def add(self, stage: str, total: int) -> int:
        """A new bar for ``stage`` with ``total`` steps; returns its task id."""
        if self._p:
            return self._p.add_task(stage, total=total)
        self._tasks.append([stage, 0, int(total)])
        return len(self._tasks) - 1

    def grow(self, task: int, n: int) -> None:
        """Add ``n`` steps to the total of bar ``task`` (a streaming run learns its executions
        cell by cell)."""
        if self._p:
            t = self._p.tasks[task] if task < len(self._p.tasks) else None
            self._p.update(task, total=(t.total or 0) + n if t is not None else n)
            return
        if 0 <= task < len(self._tasks):
            self._tasks[task][2] += int(n)

    def advance(self, task: int, n: int = 1) -> None:
        """Advance bar ``task`` by ``n`` steps."""
        if self._p:
            self._p.advance(task, n)
            return
        if not self.enabled or not 0 <= task < len(self._tasks):
            return
        self._tasks[task][1] += n
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            self._line()

    def tick(self) -> None:
        """Print the one-line report when ``interval_s`` has passed since the last one, whether
        or not work advanced (the scheduler calls this at least every few seconds while it
        waits). No-op on a terminal (the bars show elapsed time) or when disabled."""
        if self._p or not self.enabled or not self._tasks:
            return
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            self._line()

    def _line(self, final: bool = False) -> None:
        parts = [f"{s.strip()} {d}/{t}" for s, d, t in self._tasks]
        head = "progress done" if final else "progress"
        self.console.print(f"{head} {time.monotonic() - self._t0:.0f}s | " + " | ".join(parts),
                           highlight=False, markup=False, soft_wrap=True)
        self.lines += 1
