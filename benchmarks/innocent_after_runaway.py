"""A runaway on each warehouse stand-in, then 10 innocent predictions: how many were charged.

    PYTHONPATH=. python benchmarks/innocent_after_runaway.py [--engines snowflake,bigquery] [--repeat 1]
        [--without-health]

Per stand-in (fakesnow, bqemulator; private instances on their own ports, see
``tests/standins.py``): the runaway ``RUNAWAY`` (a 12-way cross join of 3.3e9 rows) of ``tests/test_innocent_predictions.py`` at a 1 s limit
(watchdog at ``1 + client_grace_s`` s), then the ten innocent predictions (10 s limit each) of
``tests/test_innocent_predictions.py``. Prints the runaway's status, the ten statuses, how many
were *charged* (a failure status stored as the model's: anything but ``ok``/``unavailable``), how
many answered right, the health probes spent and the wall time. Needs the stand-in venvs.
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from test_innocent_predictions import INNOCENT, INNOCENT_LIMITS, LIMITS, RUNAWAY, source_answer  # noqa: E402

from polysql_ray.engines.base import ExecStatus as S  # noqa: E402
from tests.warehouse_targets import warehouse  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", default="snowflake,bigquery")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--without-health", action="store_true",
                    help="switch the health probe off (the behaviour before it, for comparison)")
    args = ap.parse_args()
    print("| stand-in | round | runaway | innocent statuses | charged | right answers | probes | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.engines.split(","):
        with warehouse(name, Path(tempfile.mkdtemp(prefix=f"polysql-{name}-"))) as t:
            if args.without_health:
                t.engine.probe = lambda: None  # every server "proves" healthy: nothing is gated
            for r in range(args.repeat):
                t0 = time.perf_counter()
                probes0 = t.engine.probes
                runaway = t.execute(RUNAWAY, LIMITS)
                statuses, right = collections.Counter(), 0
                for sql in INNOCENT:
                    res = t.execute(sql, INNOCENT_LIMITS)
                    statuses[res.status.value] += 1
                    right += bool(res.ok and res.table.column(0)[0].as_py() == source_answer(sql))
                charged = sum(n for s, n in statuses.items() if s not in (S.OK.value, S.UNAVAILABLE.value))
                print(f"| {name} | {r + 1} | {runaway.status.value} | {dict(statuses)} | {charged} | {right}/10 "
                      f"| {t.engine.probes - probes0} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
