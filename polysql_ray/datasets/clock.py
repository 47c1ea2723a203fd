"""Clock-dependent gold SQL, for every dataset: detection and the clock value that keys a score.

Some golds read the current time (``strftime('%Y', 'now')``, SQLite date functions with
``'now'``, ``CURRENT_DATE``, ``now()`` ...), so their expected result changes with the calendar
(Archer has 24 such golds). :func:`mark_clock_dependent` gives such an example

* ``extra["flags"] += ("time_dependent_gold",)``, copied into the stored row's ``flags``;
* ``extra["clock"]``: the current UTC time at the finest granularity the gold reads (the year
  for ``strftime('%Y', 'now')``, the day for ``date('now')``, the second otherwise). The run
  keys the stored score by it (``pipeline.driver.plan_work``), so a score computed under
  another clock value is never reused: a rerun in a new year scores these questions again.

This is the one rule for reuse; the comparison's own ``time_dependent_gold`` flag
(``comparison.shape``) only labels the verdict. Detection uses sqlglot's SQLite tokenizer, not a
parser, so it works on any gold text.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlglot.dialects.sqlite import SQLite
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from polysql_ray.datasets.example import Example

#: Flag name stored in ``flags`` for golds whose result depends on the clock.
TIME_DEPENDENT_GOLD = "time_dependent_gold"

#: Granularity name -> ``strftime`` format of the clock value, coarsest first.
GRANULARITY = {"year": "%Y", "month": "%Y-%m", "day": "%Y-%m-%d", "second": "%Y-%m-%dT%H:%M:%S"}
#: strftime format directives that each granularity covers.
_DIRECTIVES = {"year": set("Y"), "month": set("Ym"), "day": set("Ymdjw")}
_CURRENT = {TokenType.CURRENT_DATE: "day", TokenType.CURRENT_TIME: "second",
            TokenType.CURRENT_TIMESTAMP: "second", TokenType.CURRENT_DATETIME: "second"}
_CLOCK_CALLS = {"now": "second", "curdate": "day", "curtime": "second", "sysdate": "second",
                "unix_timestamp": "second", "utc_date": "day", "utc_timestamp": "second",
                "localtimestamp": "second", "today": "day"}
_DATE_FUNCS = {"date": "day", "julianday": "second", "datetime": "second", "time": "second",
               "unixepoch": "second"}


def _format_granularity(fmt: str) -> str:
    directives = {fmt[i + 1] for i, ch in enumerate(fmt[:-1]) if ch == "%" and fmt[i + 1] != "%"}
    for name, allowed in _DIRECTIVES.items():
        if directives <= allowed:
            return name
    return "second"


def clock_granularity(sql: str) -> str | None:
    """How finely the SQLite ``sql`` reads the clock: ``year``, ``month``, ``day``, ``second``.

    Returns:
        None when the SQL does not read the clock; ``second`` when the text cannot be
        tokenized but mentions ``now`` (erring on the side of never caching).
    """
    try:
        tokens = SQLite().tokenize(sql)
    except TokenError:
        return "second" if "now" in sql.lower() else None
    found: list[str] = []
    for i, t in enumerate(tokens):
        if t.token_type in _CURRENT:
            found.append(_CURRENT[t.token_type])
            continue
        if (t.text.lower() in _CLOCK_CALLS and i + 1 < len(tokens)
                and tokens[i + 1].token_type == TokenType.L_PAREN):  # now(), curdate() ...
            found.append(_CLOCK_CALLS[t.text.lower()])
            continue
        if t.text.lower() != "now" or t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER):
            continue
        # find the function whose argument list holds this 'now'
        depth, j = 0, i - 1
        while j >= 0:
            tt = tokens[j].token_type
            if tt == TokenType.R_PAREN:
                depth += 1
            elif tt == TokenType.L_PAREN:
                if depth == 0:
                    break
                depth -= 1
            j -= 1
        func = tokens[j - 1].text.lower() if j >= 1 else ""
        if func == "strftime" and j + 2 < len(tokens) and tokens[j + 2].token_type == TokenType.COMMA:
            found.append(_format_granularity(tokens[j + 1].text))
        else:
            found.append(_DATE_FUNCS.get(func, "second"))
    if not found:
        return None
    order = list(GRANULARITY)
    return max(found, key=order.index)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def clock_value(granularity: str, now: dt.datetime | None = None) -> str:
    """The current UTC time rendered at ``granularity`` (a key of :data:`GRANULARITY`)."""
    now = now or _utcnow()
    return now.astimezone(dt.timezone.utc).strftime(GRANULARITY[granularity])


def mark_clock_dependent(examples: Sequence[Example], now: dt.datetime | None = None) -> Sequence[Example]:
    """Flag and clock-key every example whose gold reads the clock (module docstring); examples
    already marked (by a loader with a fixed clock) are left as they are. Returns ``examples``."""
    now = now or _utcnow()
    for ex in examples:
        if ex.gold_sql and "clock" not in ex.extra:
            g = clock_granularity(ex.gold_sql)
            if g is not None:
                ex.extra["flags"] = (*ex.extra.get("flags", ()), TIME_DEPENDENT_GOLD)
                ex.extra["clock"] = clock_value(g, now)
                ex.extra["clock_granularity"] = g
    return examples
