"""Throughput of the result-set comparison: comparisons/second, bag and list semantics.

Small: 10 rows x 3 columns (int, float, string), typical of Spider/BIRD golds.
Large: 100,000 rows x 5 columns (int, float, string, int, float).
The predicted table is the gold with rows reversed (bag) or identical order (list), with DuckDB-like
types (int32, decimal128, large_string) so canonicalisation does real work. Prints figures only.

Run: .venv/bin/python benchmarks/bench_compare.py
"""
from __future__ import annotations

import decimal
import time

import numpy as np
import pyarrow as pa

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare


def tables(n: int, k: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    gold, pred = {}, {}
    for c in range(k):
        kind = c % 3
        if kind == 0:
            v = rng.integers(0, 1_000_000, n)
            gold[f"c{c}"], pred[f"p{c}"] = pa.array(v), pa.array(v.astype(np.int32))
        elif kind == 1:
            v = np.round(rng.random(n) * 1000, 3)
            gold[f"c{c}"] = pa.array(v)
            pred[f"p{c}"] = pa.array([decimal.Decimal(f"{x:.3f}") for x in v], pa.decimal128(12, 3))
        else:
            v = [f"name{i % 997}" for i in rng.integers(0, 10**6, n)]
            gold[f"c{c}"], pred[f"p{c}"] = pa.array(v), pa.array(v, pa.large_string())
    return pa.table(gold), pa.table(pred)


def bench(label: str, gold: pa.Table, pred: pa.Table, sql: str, min_s: float = 1.0) -> None:
    shape, policy = analyze_gold(sql, "sqlite"), ComparisonPolicy()
    assert compare(gold, pred, shape, policy).match
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_s:
        compare(gold, pred, shape, policy)
        n += 1
    dt = time.perf_counter() - t0
    print(f"{label:34s} {n / dt:10.1f} comparisons/s  ({1000 * dt / n:8.2f} ms each)")


def main() -> None:
    for n, k in ((10, 3), (100_000, 5)):
        gold, pred = tables(n, k)
        order = np.lexsort([gold.column(i).to_numpy(zero_copy_only=False) for i in range(k)][::-1])
        gold_sorted, pred_sorted = gold.take(order), pred.take(order)
        bench(f"bag  {n:>7} rows x {k} cols", gold, pred.take(np.arange(n)[::-1]), "SELECT * FROM t")
        bench(f"list {n:>7} rows x {k} cols", gold_sorted, pred_sorted, "SELECT c0 FROM t ORDER BY c0")


if __name__ == "__main__":
    main()
