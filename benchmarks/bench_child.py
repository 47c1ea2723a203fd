"""CPU per execution on the sandboxed SQLite child path (issue 24: cheaper executions).

Runs the distinct ``(database, SQL)`` pairs of Spider dev gold and the 21 realistic sets
(:mod:`realistic_sets`, the statements ``bench_realistic.py`` executes, without its probes)
through :class:`~polysql_ray.engines.child.ChildEngine` the way the execution actor does
(:meth:`ExecutionActor.execute_batch`, batches of ``--batch``, each result then pickled as Ray
passes it on), and prints wall, the parent's CPU (the actor's share), the child's CPU
(``/proc/<pid>/stat``) and the status counts, so two checkouts can be compared side by side:

    PYTHONPATH=. python benchmarks/bench_child.py [--limit N] [--batch 64] [--repeats 3]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realistic_sets  # noqa: E402


def statements(shared: Path, work: Path) -> list[tuple[str, str]]:
    dev = json.loads((shared / "data/spider/dev.json").read_text())
    root = shared / "data/spider/database"
    gold = [line.split("\t")[0] for line in (shared / "data/spider/dev_gold.sql").read_text().splitlines()]
    texts = [gold] + [p.read_text().splitlines() for _, p in realistic_sets.build(shared, work)]
    seen, out = set(), []
    for lines in texts:
        for i, ex in enumerate(dev):
            loc = root / ex["db_id"] / f"{ex['db_id']}.sqlite"
            if i >= len(lines) or not loc.exists():
                continue
            key = (str(loc), " ".join(lines[i].split()))
            if key not in seen:
                seen.add(key)
                out.append((str(loc), lines[i]))
    return out


def child_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=os.environ.get("POLYSQL_SHARED", "/work/shared"))
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dump", help="write statuses and result digests here (JSON lines)")
    args = ap.parse_args()
    from polysql_ray.pipeline.actors import ExecutionActor

    reqs = statements(Path(args.shared), Path("/tmp/bench-child-sets"))
    if args.limit:
        reqs = reqs[:args.limit]
    print(f"{len(reqs)} distinct statements; load average {os.getloadavg()[0]:.2f}")
    for rep in range(args.repeats):
        actor = ExecutionActor("sqlite", {}, {})
        actor.execute_batch(reqs[:1])  # start the child
        pid = actor.engine.pid
        c0, p0, w0 = child_cpu(pid), os.times(), time.perf_counter()
        results = []
        for k in range(0, len(reqs), args.batch):
            out = actor.execute_batch(reqs[k:k + args.batch])[:-1]
            for r in out:  # as Ray passes the actor's returns on (ExecutionResult.__reduce__)
                pickle.dumps(r, protocol=5)
            results += out
        wall, p1 = time.perf_counter() - w0, os.times()
        pu, ps = p1.user - p0.user, p1.system - p0.system
        c1 = child_cpu(pid) if actor.engine.pid == pid else (float("nan"), float("nan"))
        cu, cs = c1[0] - c0[0], c1[1] - c0[1]
        parent, child = pu + ps, cu + cs
        counts = collections.Counter(r.status.value for r in results)
        print(f"repeat {rep}: wall {wall:.2f}s  parent CPU {parent:.2f}s  child CPU {child:.2f}s  "
              f"(user/sys parent {pu:.2f}/{ps:.2f} child {cu:.2f}/{cs:.2f})  per statement {1e6 * (parent + child) / len(reqs):.0f} us  load {os.getloadavg()[0]:.2f}  "
              f"{dict(sorted(counts.items()))}")
        if args.dump and rep == 0:
            with open(args.dump, "w") as f:
                for (loc, sql), r in zip(reqs, results):
                    f.write(json.dumps([r.status.value, r.error, None if r.table is None else
                                        [str(r.table.schema), r.table.to_pylist()]], default=repr) + "\n")
        actor.engine.close()


if __name__ == "__main__":
    main()
