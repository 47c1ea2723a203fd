"""The results store on an object store: moto's S3 server on loopback as the stand-in.

moto (``.venv-moto``, started per module by :func:`tests.standins.moto_server`) speaks the S3
protocol over HTTP, in memory. The store reaches it through ``pyarrow.fs.S3FileSystem``, with
the endpoint and credentials in the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` ...)
exactly as a user on real S3 would set them. What moto does not prove (README "Results store"):
S3's consistency model under concurrency, IAM, real latency and throughput, GCS.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from polysql_ray.store.parquet import BufferedWriter, ResultsStore, StoreError, score_key
from polysql_ray.store.schema import SCORE_SCHEMA
from tests.standins import moto_server
from tests.store_helpers import second_writer_order

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "polysql-test"
PLANNED = 6 * 34  # quickstart: 3 models x 2 dialects x 34 questions


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server with one bucket; the AWS_* environment points every client at it.
    Yields the S3FileSystem (for looking at the raw objects)."""
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    with moto_server() as (host, port):
        env["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"
        mp = pytest.MonkeyPatch()
        for k, v in env.items():
            mp.setenv(k, v)
        try:
            fs = pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", access_key="test",
                                   secret_key="test", region="us-east-1", allow_bucket_creation=True)
            fs.create_dir(BUCKET)
            yield fs
        finally:
            mp.undo()


def _rows(cell: str, ids, verdict: str = "pass", when: dt.datetime | None = None, run: str = "r1") -> pa.Table:
    now = when or dt.datetime.now(dt.timezone.utc)
    rows = [{f.name: None for f in SCORE_SCHEMA} | {
        "key": score_key(cell, str(i)), "cell_key": cell, "run_id": run, "model": "m", "dataset": "d",
        "dialect": "sqlite", "instruction_level": "-", "question_id": str(i), "correct": verdict == "pass",
        "verdict": verdict, "reason": "match" if verdict == "pass" else "values", "scored_at": now}
        for i in ids]
    return pa.Table.from_pylist(rows, schema=SCORE_SCHEMA)


def _objects(fs, prefix: str, suffix: str = ".parquet") -> list[str]:
    sel = pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True)
    return sorted(i.path for i in fs.get_file_info(sel) if i.type == pafs.FileType.File and i.path.endswith(suffix))


def _raw_rows(fs, paths: list[str]) -> tuple[int, int]:
    """(rows, distinct keys) over the raw objects, as a reader that does not dedup sees them."""
    keys = [k for p in paths for k in pq.read_table(p, filesystem=fs, columns=["key"]).column("key").to_pylist()]
    return len(keys), len(set(keys))


def test_parts_commit_whole_under_deterministic_names(s3):
    store = ResultsStore(f"s3://{BUCKET}/unit")
    assert store.uri == f"s3://{BUCKET}/unit" and store.root == store.uri
    first = store.append(_rows("cellA", range(10)))
    again = store.append(_rows("cellA", range(10)))  # a retried write of the same batch
    assert first == again and len(first) == 1 and first[0].startswith(f"{BUCKET}/unit/scores/d/m/sqlite-L-")
    store.append(_rows("cellA", range(10, 15), "fail"))
    store.append(_rows("cellB", range(4), "unavailable"))
    assert len(_objects(s3, "unit/scores")) == 2 and len(_objects(s3, "unit/unavailable")) == 1
    assert store.existing_keys() == {score_key("cellA", str(i)) for i in range(15)}
    table = store.read(columns=["question_id", "verdict"], cell_keys=["cellA"])
    assert table.column_names == ["question_id", "verdict"] and table.num_rows == 15
    assert sorted(table.to_pylist(), key=lambda r: int(r["question_id"]))[12] == {"question_id": "12", "verdict": "fail"}
    assert store.read(unavailable=True).num_rows == 19


def test_lease_refuses_a_second_writer_and_lapses_when_its_driver_is_gone(s3):
    opts = {"lease_s": 60, "lease_settle_s": 0.1}
    first, second = ResultsStore(f"s3://{BUCKET}/lease", opts), ResultsStore(f"s3://{BUCKET}/lease", opts)
    with first.lock("run-1"):
        lease = first.read_lease()
        assert lease["run_id"] == "run-1" and lease["pid"] == os.getpid()
        with pytest.raises(StoreError, match="being written by run run-1"):
            with second.lock("run-2", wait=False):
                pass
    assert first.read_lease() is None  # released on exit
    # a driver killed while holding the lease: its object stays, with an expiry in the past
    dead = {"run_id": "run-dead", "host": "gone", "pid": 1, "token": "t", "expires": 1.0}
    with s3.open_output_stream(f"{BUCKET}/lease/.lock") as out:
        out.write(json.dumps(dead).encode())
    with second.lock("run-2", wait=False):
        assert second.read_lease()["run_id"] == "run-2"


def test_a_second_writer_waits_for_the_lease_to_be_released(s3, capsys):
    opts = {"lease_s": 10, "lease_settle_s": 0.1}
    first, second = ResultsStore(f"s3://{BUCKET}/wait", opts), ResultsStore(f"s3://{BUCKET}/wait", opts)
    assert second_writer_order(first, second, capsys) == ["first done", "second"]
    assert first.read_lease() is None


def test_compaction_and_a_crash_in_the_middle_of_it(s3):
    store = ResultsStore(f"s3://{BUCKET}/crash")
    old = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    with store.lock("r"):
        with BufferedWriter(store, flush_rows=1) as w:
            for b in range(4):
                w.add(_rows("cellA", range(5 * b, 5 * b + 5), run=f"r{b}"))
        w.add(_rows("cellA", range(3), "fail", when=old, run="r0-old"))  # superseded rows
        w.flush()
        assert len(store.files()) == 5
        expected = store.read().to_pylist()
        assert len(expected) == 20 and {r["verdict"] for r in expected} == {"pass"}
        assert store.compact() == 5
    parts = store.files()
    assert len(parts) == 1 and "-c" in parts[0].rsplit("/", 1)[-1]
    assert _raw_rows(s3, parts) == (20, 20) and store.read().to_pylist() == expected

    # a crash after the merged object was committed, before the replaced parts were deleted:
    # journal + merged object + the old parts, as the next lock finds them
    store.append(_rows("cellA", range(20, 25), run="r9"))
    parts = [str(p) for p in store.files()]
    merged_rows = store._concat(parts)
    merged = parts[0].rsplit("/", 1)[0] + "/part-r9-cmerged.parquet"
    with s3.open_output_stream(merged) as out:
        pq.write_table(merged_rows, out)
    with s3.open_output_stream(f"{BUCKET}/crash/scores/.compact-crashed.json") as out:
        out.write(json.dumps({"merged": merged, "replaces": parts}).encode())
    # a crash before the merged object was committed: its journal names an object that never appeared
    with s3.open_output_stream(f"{BUCKET}/crash/scores/.compact-early.json") as out:
        out.write(json.dumps({"merged": merged + ".never", "replaces": parts}).encode())
    assert _raw_rows(s3, _objects(s3, "crash/scores")) == (50, 25)  # what a raw reader could see
    assert store.read().num_rows == 25                               # the store's reader never does
    with store.lock("next"):                                          # finishes the compaction
        pass
    assert [str(p) for p in store.files()] == [merged] and _raw_rows(s3, [merged]) == (25, 25)
    assert _objects(s3, "crash/scores", ".json") == []


def test_a_damaged_object_is_quarantined_and_its_keys_rescored(s3, capsys):
    store = ResultsStore(f"s3://{BUCKET}/damaged")
    store.append(_rows("cellA", range(6)))
    bad = store.append(_rows("cellB", range(6)))[0]
    data = s3.open_input_stream(bad).read()
    with s3.open_output_stream(bad) as out:  # what a non-atomic writer could leave: half a file
        out.write(data[: len(data) // 2])
    assert store.existing_keys() == {score_key("cellA", str(i)) for i in range(6)}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged part file s3://" in err[0] and "rescored" in err[0]
    assert _objects(s3, "damaged/quarantine") == [bad.replace("/damaged/", "/damaged/quarantine/", 1)]


def test_unreachable_bucket_is_one_store_error(s3):
    with pytest.raises(StoreError, match="cannot write to results_dir s3://no-such-bucket-here/x"):
        ResultsStore("s3://no-such-bucket-here/x")


def test_generations_store_on_s3_appends_and_looks_up(s3):
    from polysql_ray.generation.base import GenStatus, Prediction
    from polysql_ray.store.generations import GenerationsStore, generation_key

    store = GenerationsStore(f"s3://{BUCKET}/gens")
    preds = [Prediction(f"q{i}", f"SELECT {i}", prompt_sha256=f"sha{i}") for i in range(4)]
    path = store.append("tiny", "fp1", "quickstart", "sqlite", "11", preds)
    assert path.startswith(f"{BUCKET}/gens/generations/tiny/part-") and store.files("tiny") == [path]
    failed = [Prediction("q9", "", status=GenStatus.ERROR, error="server down", prompt_sha256="sha9")]
    store.append("tiny", "fp1", "quickstart", "sqlite", "11", failed)
    found = store.lookup("tiny", [generation_key("fp1", f"sha{i}") for i in (0, 3, 9)])
    assert {k: p.pred_sql for k, p in found.items()} == {generation_key("fp1", "sha0"): "SELECT 0",
                                                         generation_key("fp1", "sha3"): "SELECT 3"}
    assert store.count("tiny") == 5  # the error row stays for the audit, and is retried


def test_endpoint_from_the_environment_or_from_config(s3, monkeypatch):
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    by_env = ResultsStore(f"s3://{BUCKET}/opts", {"s3": {"region": "us-east-1"}})
    by_env.append(_rows("cellA", range(3)))
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    by_config = ResultsStore(f"s3://{BUCKET}/opts", {"s3": {"endpoint_override": endpoint, "region": "us-east-1"}})
    assert by_config.existing_keys() == {score_key("cellA", str(i)) for i in range(3)}


def test_leaderboard_job_reads_s3_as_it_reads_a_local_store(s3, tmp_path):
    from polysql_ray.statistics.synthetic import random_store

    local = tmp_path / "local"
    random_store(local, n_questions=40)
    remote = ResultsStore(f"s3://{BUCKET}/board")
    for f in sorted((local / "scores").rglob("*.parquet")):  # the same objects, byte for byte
        remote.write_bytes(f"scores/{f.relative_to(local / 'scores').as_posix()}", f.read_bytes())
    outs = []
    for where, name in ((remote.uri, "from_s3"), (str(local), "from_local")):
        job = _job("jobs.leaderboard", f"results_dir={where}", f"out={tmp_path / name}", "figures=false")
        assert job.returncode == 0, job.stderr
        outs.append(json.loads((tmp_path / name / "leaderboard.json").read_text()))
    assert (tmp_path / "from_s3" / "leaderboard.csv").read_text() == (tmp_path / "from_local" / "leaderboard.csv").read_text()
    assert outs[0]["store_sha256"] == outs[1]["store_sha256"] and outs[0]["tables"] == outs[1]["tables"]


def _job(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_quickstart_sweep_on_s3_matches_a_local_store(s3, ray_session, tmp_path, monkeypatch):
    """The whole sweep with results_dir=s3://...: every row once, a rerun scores nothing, the
    EX table and the stats job read back from S3, the compaction job leaves the same rows."""
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run
    from polysql_ray.pipeline.summary import ex_table

    monkeypatch.setenv("POLYSQL_LOCAL_DIR", str(tmp_path / "node-local"))
    uri = f"s3://{BUCKET}/sweep"
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={uri}", "progress=false"])
    assert cfg["replication"]["dir"] == str(tmp_path / "node-local" / "s3" / BUCKET / "sweep" / "replicas")
    stats, table = run(cfg, loader, text)
    assert stats.items_total == PLANNED and stats.items_scored == PLANNED

    store = ResultsStore(uri)
    parts = _objects(s3, "sweep/scores")
    assert len(parts) == 6 and _raw_rows(s3, parts) == (PLANNED, PLANNED)  # each row stored exactly once
    assert _objects(s3, "sweep/runs", "manifest.json") == [f"{BUCKET}/sweep/runs/{stats.run_id}/manifest.json"]
    assert s3.get_file_info(f"{BUCKET}/sweep/.lock").type == pafs.FileType.NotFound  # lease released

    # the same sweep into a local store: the same verdicts, key by key
    local_cfg, _, _ = compose(["+sweep=quickstart", f"results_dir={tmp_path / 'local'}", "progress=false"])
    local_stats, local_table = run(local_cfg, loader, text)
    cols = ["key", "model", "dialect", "question_id", "verdict", "reason", "basis", "pred_status"]
    s3_rows = store.read(columns=cols).to_pylist()
    assert s3_rows == ResultsStore(tmp_path / "local").read(columns=cols).to_pylist()
    assert table.to_pylist() == local_table.to_pylist()
    gold_sqlite = [r for r in table.to_pylist() if r["model"] == "gold" and r["dialect"] == "sqlite"]
    assert [(r["n"], r["correct"]) for r in gold_sqlite] == [(34, 34)]

    # rerun through the command line: nothing new, nothing appended, the EX table CSV on S3
    rerun = _job("polysql_ray", "+sweep=quickstart", f"results_dir={uri}", "progress=false")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"predictions {PLANNED}: scored 0, already stored {PLANNED}" in rerun.stdout
    assert _objects(s3, "sweep/scores") == parts
    csv_rows = pacsv.read_csv(pa.py_buffer(store.read_bytes("ex_table.csv"))).to_pylist()
    assert [(r["model"], r["dialect"], r["n"], r["correct"]) for r in csv_rows] == \
        [(r["model"], r["dialect"], r["n"], r["correct"]) for r in table.to_pylist()]

    # the end-of-run EX table and the statistics job read the store back from S3
    assert ex_table(uri).to_pylist() == table.to_pylist()
    out = _job("jobs.stats", f"results_dir={uri}", "views=[leaderboard]", f"json={tmp_path / 'st.json'}")
    assert out.returncode == 0, out.stderr
    st = json.loads((tmp_path / "st.json").read_text())
    local = _job("jobs.stats", f"results_dir={tmp_path / 'local'}", "views=[leaderboard]",
                 f"json={tmp_path / 'local.json'}")
    assert local.returncode == 0, local.stderr
    lt = json.loads((tmp_path / "local.json").read_text())
    # every statistics table, number for number; the engines' provenance names the runs it came
    # from, which are two different runs here
    def runless(tables):
        return {name: [{k: v for k, v in row.items() if not (k.endswith("_run") or k == "runs")}
                       for row in rows] if name == "provenance" else rows for name, rows in tables.items()}

    assert runless(st["tables"]) == runless(lt["tables"]) and st["tables"]
    assert len(st["store_sha256"]) == 64

    # a crashed writer's leftovers: a retried batch written twice (newer copy), then the job.
    rows = pq.read_table(parts[0], filesystem=s3).slice(0, 10)  # ten rows of that part's cell
    later = rows.set_column(rows.schema.get_field_index("scored_at"), "scored_at",
                            pa.array([dt.datetime.now(dt.timezone.utc)] * 10, pa.timestamp("us", tz="UTC")))
    dup = f"{parts[0].rsplit('/', 1)[0]}/part-zz-retried.parquet"
    # written by hand: without the copied footer checksum, which no longer matches (that part
    # would be damaged and quarantined, tests/test_faults_store.py)
    later = later.replace_schema_metadata(
        {k: v for k, v in (later.schema.metadata or {}).items() if k != b"polysql.sha256"})
    with s3.open_output_stream(dup) as o:
        pq.write_table(later, o)
    assert _raw_rows(s3, _objects(s3, "sweep/scores"))[0] == PLANNED + 10
    before = store.read(columns=cols).to_pylist()
    assert before == s3_rows
    job = _job("jobs.compact", f"results_dir={uri}")
    assert job.returncode == 0, job.stderr
    assert "part files 7 -> 6" in job.stdout and f"rows {PLANNED + 10} -> {PLANNED}" in job.stdout
    assert _raw_rows(s3, _objects(s3, "sweep/scores")) == (PLANNED, PLANNED)
    assert ResultsStore(uri).read(columns=cols).to_pylist() == s3_rows
    bad = _job("jobs.compact", f"results_dir=s3://{BUCKET}/nothing-here")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no score files" in bad.stderr
