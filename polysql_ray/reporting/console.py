"""Terminal output with rich: any report view as one or more rich tables that fit the width.

A view wider than the console is split column-wise into several tables; each repeats the
view's leading text columns (model, dialect ...) so every part reads on its own, and text
cells are never cut (they fold onto a second line instead).
"""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .views import Column, View

#: Characters a column needs beyond its text (borders and padding).
_PAD = 3


def _width(c: Column, v: View) -> int:
    cells = [len(c.format(r)) for r in v.rows]
    return max([len(c.header), *cells]) + _PAD


def column_groups(v: View, width: int) -> list[tuple[Column, ...]]:
    """The view's columns in groups that fit ``width``; each group starts with the key columns.

    Key columns are the leading text columns. A single column wider than the rest is kept
    alone with the keys (rich folds it).
    """
    cols = list(v.columns)
    n_keys = next((i for i, c in enumerate(cols) if c.kind != "text"), len(cols))
    keys, rest = cols[:n_keys], cols[n_keys:]
    base = sum(_width(c, v) for c in keys) + 1
    groups: list[list[Column]] = []
    cur: list[Column] = []
    used = base
    for c in rest:
        w = _width(c, v)
        if cur and used + w > width:
            groups.append(cur)
            cur, used = [], base
        cur.append(c)
        used += w
    if cur or not groups:
        groups.append(cur)
    return [tuple(keys + g) for g in groups]


def view_tables(v: View, width: int) -> list[Table]:
    """Rich tables of a view that fit ``width`` columns (numbers right-aligned). Every text is
    escaped: a ``[stand-in]`` badge or a ``[sqlite]`` is text, never rich markup."""
    groups = column_groups(v, width)
    out = []
    for i, cols in enumerate(groups):
        title = v.title if len(groups) == 1 else f"{v.title} ({i + 1}/{len(groups)})"
        t = Table(title=escape(title), caption=escape(v.note) if i == len(groups) - 1 else None,
                  show_lines=False)
        for c in cols:
            t.add_column(escape(c.header), justify="left" if c.kind == "text" else "right",
                         overflow="fold")
        for r in v.rows:
            t.add_row(*(escape(c.format(r)) for c in cols))
        out.append(t)
    return out


def view_table(v: View) -> Table:
    """A single :class:`rich.table.Table` of a view, however wide."""
    return view_tables(v, 10**6)[0]


def print_views(views: list[View], console: Console | None = None) -> None:
    """Print views to the terminal (stdout by default), each split to fit the console width."""
    console = console or Console()
    for v in views:
        for t in view_tables(v, console.width):
            console.print(t)
