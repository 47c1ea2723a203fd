"""Resource attacks: statements that try to outrun the time limit or the memory ceiling.

Not a test module. ``test_resource_limits.py`` runs every case through the engine as the
execution actor runs it (in its child process, :mod:`polysql_ray.engines.child`) and asserts a
typed status in ``expect``, that the next prediction on the same engine still scores, and that
nothing died; ``benchmarks/resource_limits.py`` times them (wall, peak RSS) against the limit.
The hostile suite (``hostile_cases.py``) may import :data:`RESOURCE_CASES` into its table.

Each attack is one the outside review measured far past a 5 s limit (issue 23): DuckDB
``repeat('x', 1e9)`` 135 s, SQLite ``randomblob(1e9)`` 107 s, SQLite/ClickHouse recursive-CTE
bombs 46-84 s, MariaDB ``seq_1_to_1000000000000`` 36 s, a 20-level SQLite CTE bomb 2.6 GB RSS.
A memory bomb may end as ``too_large`` (the engine's heap limit or the actor's memory ceiling)
or ``timeout`` (the hard deadline came first on a loaded machine): both are the statement's own
failure; ``runtime`` from a dead engine is not allowed.
"""
from __future__ import annotations

from dataclasses import dataclass

from polysql_ray.engines.base import ExecStatus as S

T = S.TIMEOUT
BIG = frozenset({S.TOO_LARGE, S.TIMEOUT})


@dataclass(frozen=True)
class ResourceCase:
    """One resource attack.

    Attributes:
        engine: engine name it targets.
        name: short id.
        sql: the prediction.
        expect: statuses that are a correct, contained outcome.
        kind: ``time`` or ``memory``.
    """

    engine: str
    name: str
    sql: str
    expect: frozenset
    kind: str = "time"


def cte_doubling(levels: int, engine: str = "sqlite") -> str:
    """A CTE chain where each level is ``UNION ALL`` of the previous twice: 2**levels branches,
    which SQLite expands at *prepare* time (no progress handler runs then)."""
    one = "SELECT 1" if engine != "clickhouse" else "SELECT 1 AS x"
    ctes = [f"t0(x) AS ({one})"] + [f"t{i}(x) AS (SELECT x FROM t{i - 1} UNION ALL SELECT x FROM t{i - 1})"
                                    for i in range(1, levels + 1)]
    return "WITH " + ", ".join(ctes) + f" SELECT count(*) FROM t{levels}"


RECURSIVE_COUNT = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
#: A recursive CTE that builds ever longer strings: work and memory per row both grow.
RECURSIVE_STRINGS = ("WITH RECURSIVE r(n, s) AS (SELECT 1, 'x' UNION ALL SELECT n + 1, s || s FROM r "
                     "WHERE n < 40) SELECT max(length(s)) FROM r")

RESOURCE_CASES: list[ResourceCase] = [
    # SQLite
    ResourceCase("sqlite", "randomblob_1e9", "SELECT length(randomblob(1e9))", BIG, "memory"),
    ResourceCase("sqlite", "zeroblob_1e9_hex", "SELECT length(hex(zeroblob(1e9)))", BIG, "memory"),
    # SQLite up to 3.40 (Debian 12's) returns NULL for a printf() longer than SQLITE_LIMIT_LENGTH
    # (limits.max_bytes) instead of raising SQLITE_TOOBIG: refused by the engine itself, contained
    ResourceCase("sqlite", "printf_width", "SELECT length(printf('%.*c', 1000000000, 'x'))", BIG | {S.OK},
                 "memory"),
    ResourceCase("sqlite", "recursive_count", RECURSIVE_COUNT, frozenset({T})),
    ResourceCase("sqlite", "recursive_strings", RECURSIVE_STRINGS, BIG, "memory"),
    ResourceCase("sqlite", "cte_bomb_20", cte_doubling(20), BIG, "memory"),
    ResourceCase("sqlite", "cte_bomb_24", cte_doubling(24), BIG, "memory"),
    # DuckDB
    ResourceCase("duckdb", "repeat_1e9", "SELECT length(repeat('x', 1000000000))", BIG, "memory"),
    ResourceCase("duckdb", "repeat_1e9_value", "SELECT repeat('x', 1000000000)", BIG, "memory"),
    ResourceCase("duckdb", "range_cross", "SELECT count(*) FROM range(1000000000) a, range(1000000000) b",
                 frozenset({T})),
    ResourceCase("duckdb", "recursive_count", RECURSIVE_COUNT, BIG),
    ResourceCase("duckdb", "string_agg_huge", "SELECT length(string_agg(repeat('x', 1000), '')) FROM range(10000000)",
                 BIG, "memory"),
    # ClickHouse (chdb)
    # ClickHouse may stop it itself at max_recursive_cte_evaluation_depth (error 306: runtime)
    ResourceCase("clickhouse", "recursive_count", RECURSIVE_COUNT, BIG | {S.RUNTIME}),
    ResourceCase("clickhouse", "numbers_cross", "SELECT count() FROM numbers(1e12) AS a, numbers(1e12) AS b",
                 frozenset({T})),
    # ClickHouse refuses more than 1e6 repeats itself (error 131: runtime)
    ResourceCase("clickhouse", "repeat_1e9", "SELECT length(repeat('x', 1000000000))", BIG | {S.RUNTIME}, "memory"),
    ResourceCase("clickhouse", "group_array_huge", "SELECT length(groupArray(number)) FROM numbers(10000000000)",
                 BIG, "memory"),
    # MariaDB (sequence engine)
    # count(*)/sum(seq) over a sequence are answered without a scan (OK, and right)
    ResourceCase("mysql", "seq_1e12_rows", "SELECT seq FROM seq_1_to_1000000000000", BIG),
    ResourceCase("mysql", "seq_1e12_filter", "SELECT count(*) FROM seq_1_to_1000000000000 WHERE seq % 7 = 3",
                 frozenset({T})),
    ResourceCase("mysql", "seq_1e12_sorted", "SELECT seq FROM seq_1_to_1000000000000 ORDER BY seq % 7 LIMIT 1",
                 frozenset({T})),
    ResourceCase("mysql", "seq_cross", "SELECT count(*) FROM seq_1_to_1000000 a, seq_1_to_1000000 b",
                 frozenset({T})),
    # PostgreSQL
    ResourceCase("postgres", "generate_series_1e12", "SELECT count(*) FROM generate_series(1, 1000000000000)",
                 frozenset({T})),
    ResourceCase("postgres", "repeat_1e9", "SELECT length(repeat('x', 1000000000))", BIG | {S.RUNTIME}, "memory"),
]


def cases_for(engine: str) -> list[ResourceCase]:
    """The resource attacks on ``engine``."""
    return [c for c in RESOURCE_CASES if c.engine == engine]
