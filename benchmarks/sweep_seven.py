"""The Spider published sweep on all seven dialects (issue 12 "must show").

Starts the two warehouse stand-ins as loopback processes (fakesnow for ``snowflake``, bqemulator
for ``bigquery``; their venvs come from ``.ci/run``), runs ``+sweep=spider_published`` on
sqlite, duckdb, postgres, mysql, clickhouse, snowflake and bigquery into one results_dir, then
prints:

* the EX table per model and dialect (the ``gold`` row is the gold-portability ceiling),
* the replicas built and verified (every replica a run uses carries a verified certificate: a
  copy whose certificate does not verify is an error of the run, listed at its end),
* the error-type breakdown per dialect (``jobs.stats views=[taxonomy]``).

    python benchmarks/sweep_seven.py [results_dir] [extra overrides ...]

Needs the PostgreSQL and MariaDB servers (``.ci/run`` starts them) and the Spider data under
``paths.shared``. Snowflake and BigQuery figures are stand-in figures (README "Warehouse
dialects" says what the stand-ins do not prove).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.standins import bqemulator_server, fakesnow_server  # noqa: E402

DIALECTS = "[sqlite,duckdb,postgres,mysql,clickhouse,snowflake,bigquery]"


def main(argv: list[str]) -> int:
    out = argv[0] if argv else tempfile.mkdtemp(prefix="polysql-seven-")
    os.environ.setdefault("POLYSQL_SF_PW", "fakesnow-accepts-any")  # the stand-in's, never a secret
    with fakesnow_server() as (sf_host, sf_port), bqemulator_server() as (bq_host, bq_port):
        overrides = [
            "+sweep=spider_published", f"dialects={DIALECTS}", f"results_dir={out}",
            f"engines.snowflake.host={sf_host}", f"engines.snowflake.port={sf_port}",
            "engines.snowflake.protocol=http", "engines.snowflake.account=fakesnow",
            "engines.snowflake.user=fake", "engines.snowflake.admin_user=fake",
            "engines.snowflake.password_env=POLYSQL_SF_PW", "engines.snowflake.admin_password_env=POLYSQL_SF_PW",
            "engines.bigquery.project=polysql", f"engines.bigquery.api_endpoint=http://{bq_host}:{bq_port}",
            "engines.bigquery.anonymous=true", *argv[1:]]
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", "polysql_ray", *overrides], cwd=REPO)
        print(f"sweep: exit {rc}, wall {time.perf_counter() - t0:.1f} s, results in {out}")
    if rc != 0:
        return rc
    replicas = [p for p in Path(out).glob("runs/*/manifest.json")]
    print(f"run manifests: {len(replicas)}")
    return subprocess.call([sys.executable, "-m", "jobs.stats", f"results_dir={out}",
                            "views=[gold-ceiling,taxonomy]"], cwd=REPO)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
