"""The hostile-SQL suite on ClickHouse, Snowflake and BigQuery: typed statuses per engine x attack.

    PYTHONPATH=. python benchmarks/sandbox_table.py [--engines clickhouse,snowflake,bigquery] [--out FILE.md]

For every case of ``tests/hostile_cases.py`` (``WAREHOUSE_COMMON`` + each engine's own list) it
prints two statuses per engine:

* **engine**: what the polysql_ray engine returns (client-side guard and denylist, server-side
  sandbox, client-side watchdog), as the tests assert it;
* **alone**: what the database behind it does with the same statement sent *without* the
  client-side checks (no statement guard, no denylist, no watchdog beyond a deadline of
  ``timeout_s + GRACE_S`` s), on a separate replica, so it shows what the stand-in (or chdb's
  ``readonly=1`` session) enforces by itself. ``RAN`` = it executed and returned rows,
  ``WROTE`` = the replica's content fingerprint changed (later cases run on the changed copy), ``NO-TIMEOUT`` = it was still running at the deadline (abandoned; a stand-in keeps
  running it until it ends), ``FILE`` = a file appeared under /tmp, ``HANG`` = the checksum
  query failed afterwards (the stand-in stopped answering, or the attack dropped the table); the
  stand-in and its replica are then started afresh for the next case.

Then it lists, per stand-in, the attack classes it does not enforce alone. Needs the Spider data
and the stand-in venvs (built on first use; see ``tests/standins.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from hostile_cases import CASES, LIMITS, STANDIN_EXPECT, case_id  # noqa: E402

from polysql_ray.engines.base import ExecStatus as S  # noqa: E402
from polysql_ray.engines.watchdog import DeadlineExceeded, call_with_deadline  # noqa: E402
from tests.warehouse_targets import CHECKSUM_SQL, GRACE_S, warehouse  # noqa: E402

ENGINES = ("clickhouse", "snowflake", "bigquery")
STANDIN = {"clickhouse": "chdb readonly=1", "snowflake": "fakesnow", "bigquery": "bqemulator"}
EVIL = Path("/tmp/polysql_evil")


def raw_runner(target):
    """``run(sql) -> status`` sending ``sql`` straight to the database behind ``target``'s engine."""
    eng, loc = target.engine, target.replica.location
    if target.name == "clickhouse":
        from polysql_ray.engines import clickhouse as ch

        def run(sql):
            con = eng._reader(LIMITS)
            con.query(f"USE {ch.quote(ch.load_replica(loc))}")
            try:
                con.query(sql, "Arrow")
                return S.OK
            except Exception as e:
                return ch.classify_error(str(e))
        return run
    if target.name == "snowflake":
        import snowflake.connector.errors as sfe

        from polysql_ray.engines import snowflake as sf

        def run(sql):
            con = sf.connect(eng.settings, timeout_s=LIMITS.timeout_s)
            try:  # one connection per statement, closed after it
                cur = con.cursor()
                cur.execute(f'USE SCHEMA "{eng.settings.database}"."{loc}"')
                cur.execute(sql)
                cur.fetchmany(LIMITS.row_cap + 1)
                return S.OK
            except sfe.Error as e:
                return sf.classify_error(e.errno, e.sqlstate, str(e))
            finally:
                con.close()
        return run

    from google.cloud import bigquery

    from polysql_ray.engines import bigquery as bq

    def run(sql):
        client = eng.client
        try:
            job = client.query(sql, job_config=bigquery.QueryJobConfig(
                default_dataset=f"{client.project}.{loc}", use_query_cache=False))
            job.result(max_results=LIMITS.row_cap + 1)
            return S.OK
        except Exception as e:
            return bq.classify_error(e)
    return run


def alone(target, run, sql) -> str:
    EVIL.unlink(missing_ok=True)
    before = target.writer.fingerprint(target.replica.location)
    try:
        status = call_with_deadline(lambda: run(sql), LIMITS.timeout_s + GRACE_S)
    except DeadlineExceeded:
        return "NO-TIMEOUT"
    except Exception as e:  # the stand-in itself failed
        return f"error:{type(e).__name__}"
    if target.writer.fingerprint(target.replica.location) != before:
        return "WROTE"
    if EVIL.exists():
        return "FILE"
    return "RAN" if status is S.OK else status.value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    results: dict[tuple[str, str], tuple[str, str]] = {}
    order: list[tuple[str, str]] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name in engines:
            with warehouse(name, Path(tmp) / name) as t, contextlib.ExitStack() as scratch:
                a = scratch.enter_context(warehouse(name, Path(tmp) / f"{name}-alone", dataset="hostile_alone"))
                run = raw_runner(a)
                for case in CASES[name]:
                    key = (case.cls, case.name)
                    if key not in order:
                        order.append(key)
                    r = t.execute(case.sql, LIMITS)
                    mark = "" if r.status in STANDIN_EXPECT.get((name, case.name), case.expect) else " (UNEXPECTED)"
                    out = alone(a, run, case.sql)
                    if not a.execute(CHECKSUM_SQL, LIMITS).ok:  # the stand-in stopped answering
                        out = "HANG"
                        scratch.close()
                        a = scratch.enter_context(warehouse(name, Path(tmp) / f"{name}-alone-{case.name}",
                                                            dataset="hostile_alone"))
                        run = raw_runner(a)
                    results[(name, case_id(case))] = (r.status.value + mark, out)
                    print(f"{name:10s} {case_id(case):60s} {r.status.value:10s} alone={out}", file=sys.stderr,
                          flush=True)
    lines = ["| attack class | case | " + " | ".join(f"{e} | {STANDIN[e]} alone" for e in engines) + " |",
             "|---|---|" + "---|---|" * len(engines)]
    for cls, nm in order:
        cells = []
        for e in engines:
            eng, al = results.get((e, f"{cls}-{nm}"), ("—", "—"))
            cells += [eng, al]
        lines.append(f"| {cls} | {nm} | " + " | ".join(cells) + " |")
    lines.append("")
    for e in engines:
        weak = sorted({cls for (cls, nm) in order
                       if results.get((e, f"{cls}-{nm}"), ("", ""))[1] in ("RAN", "WROTE", "NO-TIMEOUT", "FILE", "HANG")
                       and cls not in ("malformed_text",)})
        unexpected = [k for k, v in results.items() if k[0] == e and "UNEXPECTED" in v[0]]
        lines.append(f"- {e}: {sum(k[0] == e for k in results)} cases, {len(unexpected)} unexpected engine "
                     f"statuses; {STANDIN[e]} alone lets through classes: {', '.join(weak) or 'none'}")
    lines.append(f"\n({time.time() - t0:.0f} s)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
