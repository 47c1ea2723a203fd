"""Terminal output with rich: any report view as a rich table."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .views import View


def view_table(v: View) -> Table:
    """A :class:`rich.table.Table` of a view (numbers right-aligned)."""
    t = Table(title=v.title, caption=v.note, show_lines=False)
    for c in v.columns:
        t.add_column(c.header, justify="left" if c.kind == "text" else "right")
    for r in v.rows:
        t.add_row(*(c.format(r) for c in v.columns))
    return t


def print_views(views: list[View], console: Console | None = None) -> None:
    """Print views to the terminal (stdout by default)."""
    console = console or Console()
    for v in views:
        console.print(view_table(v))
