"""A rich progress display, one bar per pipeline stage (replicate, execute per engine, score)."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as _RichProgress, TextColumn, TimeElapsedColumn


class Progress:
    """Context manager; ``add(stage, total) -> task id``, ``advance(task, n)``.

    With ``enabled=False`` (or no terminal, e.g. CI) it prints nothing and costs nothing.
    """

    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self._p = (_RichProgress(TextColumn("{task.description:<20}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=False)
                   if self.enabled else None)

    def __enter__(self) -> "Progress":
        if self._p:
            self._p.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._p:
            self._p.stop()

    def add(self, stage: str, total: int) -> int:
        """A new bar for ``stage`` with ``total`` steps; returns its task id (0 when disabled)."""
        return self._p.add_task(stage, total=total) if self._p else 0

    def advance(self, task: int, n: int = 1) -> None:
        """Advance bar ``task`` by ``n`` steps."""
        if self._p:
            self._p.advance(task, n)
