"""Bad input: one clear line naming what to fix, no traceback, nothing half-written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from polysql_ray.config import compose, redact, validate
from polysql_ray.engines.base import Limits
from polysql_ray.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "polysql_ray", "progress=false", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("override,needle", [
    ("limits.timeout_s=-1", "limits.timeout_s must be a positive number"),
    ("limits.timeout_s=.inf", "limits.timeout_s must be a positive number"),
    ("limits.row_cap=0", "limits.row_cap must be a positive number"),
    # below an engine process's own footprint every statement, gold included, was too_large (exit 0)
    ("limits.memory_mb=1", "limits.memory_mb must be at least 256 (MiB; got 1)"),
    ("pipeline.structural_check=prov", "pipeline.structural_check='prov' is not one of"),
    ("+engines.postgres.password=hunter2", "engines.postgres.password must not hold a password"),
    ("engines.duckdb.actors=0", "engines.duckdb.actors must be auto or a whole number >= 1 (got 0)"),
    ("engines.sqlite.actors=-3", "engines.sqlite.actors must be auto or a whole number >= 1 (got -3)"),
    ("pipeline.max_inflight_score=-1", "pipeline.max_inflight_score must be auto or a whole number >= 0 "
                                       "(0: the driver scores every batch itself; got -1)"),
    ("pipeline.max_inflight_score=many", "pipeline.max_inflight_score must be auto or a whole number >= 0"),
    ("policy.abs_tol=abc", "policy: could not convert string to float"),
    ("+policy.abs_toll=1e-3", "policy: unknown comparison policy field(s): ['abs_toll']"),
    ("+datset=spider", "unknown config key(s) ['datset']: check the spelling"),
    ("+limits.timout_s=5", "unknown limits key(s) ['timout_s']: check the spelling (known: timeout_s, row_cap"),
    ("pipeline.flush_rows=lots", "pipeline.flush_rows must be a whole number >= 1 (got 'lots')"),
    ("pipeline.flush_rows=0", "pipeline.flush_rows must be a whole number >= 1 (got 0)"),
    ("pipeline.flush_s=-1", "pipeline.flush_s must be a number >= 0 (got -1)"),
    ("pipeline.exec_batch_size=2.5", "pipeline.exec_batch_size must be a whole number >= 1 (got 2.5)"),
    ("pipeline.score_num_cpus=-1", "pipeline.score_num_cpus must be a number > 0 (got -1)"),
    ("progress=maybe", "progress must be true or false (got 'maybe')"),
    ("engines.postgres.port=abc", "engines.postgres.port must be a whole number >= 1 (got 'abc')"),
    ("engines.duckdb.threads=0", "engines.duckdb.threads must be a whole number >= 1 (got 0)"),
    ("ray.num_cpus=0", "ray.num_cpus must be a whole number or null >= 1 (got 0)"),
    ("replication.types=x", "replication.types must be one of ['declared', 'storage'] (got 'x')"),
    ("store.lease_s=-5", "store.lease_s must be a number > 0 (got -5)"),
    ("ray.system_config.num_workers_soft_limit=x", "ray.system_config.num_workers_soft_limit must be a number"),
    ("results_dir=' '", "results_dir must be a non-empty text"),
    ("model=openai_endpoint model.concurrency=x", "model.concurrency must be a whole number >= 1 (got 'x')"),
    ("model=openai_endpoint model.retry.max_retries=lots", "model.retry.max_retries must be a whole number >= 0"),
    ("model=openai_endpoint model.retry.timeout_s=-1", "model.retry.timeout_s must be a number > 0 (got -1)"),
    ("model=tiny_hf model.sampling.temperature=hot", "model.sampling.temperature must be a number >= 0"),
    ("model=replay model.predictions=p model.allow_partial=maybe", "model.allow_partial must be true or false"),
])
def test_bad_config_is_one_line(override, needle):
    cfg, _, _ = compose(override.split(" ") if override.startswith("model=") else [override])
    with pytest.raises(ConfigError, match=re.escape(needle)):
        validate(cfg)


def test_every_shipped_config_validates():
    """The defaults and every shipped group entry pass the type and range checks."""
    for group in ("model", "dataset"):
        for f in sorted((REPO / "conf" / group).glob("*.yaml")):
            validate(compose([f"{group}={f.stem}"])[0])
    for f in sorted((REPO / "conf" / "sweep").glob("*.yaml")):
        validate(compose([f"+sweep={f.stem}"])[0])


def test_a_single_dialect_needs_no_brackets():
    from polysql_ray.pipeline.driver import build_grid

    cfg, loader, _ = compose(["dialects=duckdb"])
    assert build_grid(cfg, loader).dialects == ["duckdb"]


def test_limits_validate_themselves():
    with pytest.raises(ValueError, match="limits.max_sql_chars"):
        Limits(max_sql_chars=-5)
    assert Limits().fingerprint() == "t30-r100000-b134217728"  # stored cells keep their keys


@pytest.mark.parametrize("key,secret", [
    ("password", True), ("admin_password", True), ("db_pass", True), ("pwd", True), ("passphrase", True),
    ("api_key", True), ("apiKey", True), ("secret_key", True), ("store.s3.secret_key", True),
    ("access_key", True), ("private_key", True), ("ssh_key", True), ("key", True), ("accesskey", True),
    ("token", True), ("hf_token", True), ("sessionToken", True), ("client_secret", True),
    ("credentials", True), ("authorization", True),
    # where a secret lives, not the secret
    ("password_env", False), ("api_key_env", False), ("admin_password_file", False), ("key_file", False),
    ("token_path", False),
    # data keys and counts that merely contain the words
    ("primary_key", False), ("foreign_key", False), ("sort_key", False), ("cell_key", False),
    ("order_keys", False), ("key_columns", False), ("access_key_id", False), ("keys", False),
    ("max_tokens", False), ("prompt_tokens", False), ("tokenizer", False), ("name", False),
])
def test_the_one_redaction_rule(key, secret):
    from polysql_ray.redaction import is_secret_key

    assert is_secret_key(key) is secret


def test_one_redaction_function_everywhere():
    from polysql_ray import config, redaction
    from polysql_ray.pipeline import manifest

    assert manifest.redact is config.redact is redaction.redact
    cfg = {"model": {"base_url": "http://alice:URLPASS@h:8000/v1?api_key=QUERYKEY", "api_key_env": "K",
                     "sampling": {"max_tokens": 5}},
           "store": {"s3": {"secret_key": "S3SECRET", "access_key_id": "AKIA1"}},
           "dataset": {"primary_key": "id", "key_columns": ["a"]},
           "engines": {"postgres": {"password_env": "PGPW"}}, "note": "Bearer sk-abcdefghijk"}
    out = redact(cfg)
    text = str(out)
    for secret in ("URLPASS", "alice", "QUERYKEY", "S3SECRET", "sk-abcdefghijk"):
        assert secret not in text
    assert out["model"]["api_key_env"] == "K" and out["model"]["sampling"]["max_tokens"] == 5
    assert out["dataset"] == {"primary_key": "id", "key_columns": ["a"]}
    assert out["store"]["s3"]["access_key_id"] == "AKIA1"
    assert out["engines"]["postgres"]["password_env"] == "PGPW"
    assert out["model"]["base_url"].startswith("http://<redacted>@h:8000/v1")


def test_redact_text_masks_conninfo_and_urls_but_not_engine_messages():
    from polysql_ray.redaction import redact_text

    assert redact_text("host=h password=pw1 user=u") == "host=h password=<redacted> user=u"
    assert redact_text("cannot reach mysql://root:pw2@127.0.0.1:3306/db") == \
        "cannot reach mysql://<redacted>@127.0.0.1:3306/db"
    msg = 'duplicate key value violates unique constraint "pk" DETAIL: Key (id)=(5) already exists.'
    assert redact_text(msg) == msg
    # a usage line's placeholders are no secrets; a real value beside them still is
    usage = "usage: python -m jobs.suites build|replicate [key=value ...] token=<token>"
    assert redact_text(usage) == usage
    assert redact_text("api_key=sk-9 key=value") == "api_key=<redacted> key=value"


def test_job_usage_line_is_printed_as_written():
    """`python -m jobs.suites bogus` printed its usage as `key=<redacted>`."""
    import subprocess, sys
    out = subprocess.run([sys.executable, "-m", "jobs.suites", "bogus"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "jobs.suites: error: usage: python -m jobs.suites build|replicate [key=value ...]"


def test_secrets_are_redacted_in_written_config():
    _, _, text = compose(["+model.api_key=sk-live-123", "+engines.mysql.admin_password=pw1"])
    assert "sk-live-123" not in text and "pw1" not in text
    loaded = yaml.safe_load(text)
    assert loaded["model"]["api_key"] == "<redacted>"
    assert redact({"password_env": "X", "password_file": "/p", "token": None}) == \
        {"password_env": "X", "password_file": "/p", "token": None}


@pytest.mark.parametrize("name", ["..", ".", "../outside", "a/b", "x\\y", "", "nul\x00"])
def test_dataset_and_model_names_never_leave_their_folder(name, tmp_path):
    from polysql_ray.datasets.base import DatasetConfig, DatasetError
    from polysql_ray.pipeline.driver import build_grid

    with pytest.raises(DatasetError, match="cannot name a folder|has no 'name'"):
        DatasetConfig.from_mapping({"name": name, "layout": "quickstart"})
    if name:
        cfg, loader, _ = compose(["model=replay", f"model.predictions={tmp_path / 'p.sql'}"])
        cfg["model"]["name"] = name
        with pytest.raises(ConfigError, match="cannot name a folder"):
            build_grid(cfg, loader)


def test_store_folder_names_are_encoded_too():
    from polysql_ray.store.parquet import _safe

    assert _safe("..") == "__" and _safe(".") == "_" and _safe("../x") == ".._x" and _safe("a.b") == "a.b"


def _jsonl_dataset(tmp_path, db_id: str, db_bytes: bytes | None = None, db_path: str | None = None):
    import json

    rec = {"db_id": db_id, "question": "q", "gold_sql": "SELECT 1"}
    if db_path:
        rec["db_path"] = db_path
    (tmp_path / "q.jsonl").write_text(json.dumps(rec) + "\n")
    if db_bytes is not None:
        d = tmp_path / "database" / db_id
        d.mkdir(parents=True)
        (d / f"{db_id}.sqlite").write_bytes(db_bytes)
    return {"name": "t", "layout": "jsonl", "root": str(tmp_path), "file": "q.jsonl"}


@pytest.mark.parametrize("db_id", ["../../x", "..", "a/b", "/etc"])
def test_a_path_like_db_id_is_refused_with_one_line(tmp_path, db_id):
    from polysql_ray.datasets.base import DatasetError
    from polysql_ray.datasets.registry import load_dataset

    with pytest.raises(DatasetError, match=r"line 1: db_id=.*cannot name a folder"):
        load_dataset(_jsonl_dataset(tmp_path, db_id))


@pytest.mark.parametrize("content,needle", [
    (b"", "it is empty (0 bytes)"),
    (b"PK\x03\x04 a zip file, not a database", "it is not a sqlite database"),
])
def test_a_source_that_is_no_database_is_one_line_not_a_gold_error(tmp_path, content, needle):
    from polysql_ray.datasets.base import DatasetError
    from polysql_ray.datasets.registry import load_dataset

    with pytest.raises(DatasetError) as err:
        load_dataset(_jsonl_dataset(tmp_path, "shop", content))
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and "db_id 'shop'" in msg and "shop.sqlite" in msg


def test_a_sound_source_and_a_missing_one_load_as_before(tmp_path):
    import sqlite3

    from polysql_ray.datasets.registry import load_dataset

    sqlite3.connect(tmp_path / "ok.sqlite").execute("CREATE TABLE t(a)").connection.commit()
    ex = load_dataset(_jsonl_dataset(tmp_path, "ok", db_path="ok.sqlite"))
    assert ex[0].gold_error is None
    other = tmp_path / "m"
    other.mkdir()
    missing = load_dataset(_jsonl_dataset(other, "gone"))
    assert "is missing" in missing[0].gold_error


def test_unreadable_source_is_one_line(tmp_path, monkeypatch):
    import builtins

    from polysql_ray.datasets.base import DatasetError
    from polysql_ray.datasets.registry import load_dataset

    cfg = _jsonl_dataset(tmp_path, "shop", b"SQLite format 3\x00" + b"\0" * 100)
    real_open = builtins.open

    def deny(path, *a, **k):  # root reads any file: the permission error is injected
        if str(path).endswith("shop.sqlite"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", deny)
    with pytest.raises(DatasetError, match=r"it cannot be read \(Permission denied\)"):
        load_dataset(cfg)


def test_an_over_long_prediction_is_stored_cut_with_its_length():
    from polysql_ray.store.parquet import storable_sql

    sql = "SELECT " + "1+" * 5000 + "1"
    out = storable_sql(sql, 100)
    assert len(out) < 200 and out.startswith(sql[:100]) and f"{len(sql)} characters in all" in out
    assert storable_sql("SELECT 1", 100) == "SELECT 1"


@pytest.mark.slow
def test_cli_bad_inputs_print_one_line(tmp_path):
    binary = tmp_path / "preds.sql"
    binary.write_bytes(bytes(range(256)) * 8)
    cases = [
        (["limits.timeout_s=-1"], "limits.timeout_s must be a positive number"),
        (["pipeline.structural_check=prov"], "pipeline.structural_check"),
        (["model=replay", f"model.predictions={binary}"], "is not utf-8 text"),
        (["+engines.postgres.password=hunter2"], "engines.postgres.password must not hold a password"),
    ]
    for args, needle in cases:
        out = _cli(*args, f"results_dir={tmp_path / 'r'}", cwd=tmp_path)
        assert out.returncode == 2, out.stderr[-2000:]
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("polysql_ray: error:")]
        assert len(errors) == 1 and needle in errors[0], out.stderr[-2000:]
        assert "Traceback" not in out.stderr
    assert not list((tmp_path / "r").rglob("config.yaml"))  # nothing written for a refused config


@pytest.mark.slow
def test_cli_unwritable_results_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = _cli(f"results_dir={blocker}/sub", cwd=tmp_path)
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("polysql_ray: error:")]
    assert len(errors) == 1 and "results_dir" in errors[0] and "Traceback" not in out.stderr


def test_or_chain_of_20000_terms_is_unknown_to_the_structural_check_not_a_crash():
    from polysql_ray.pipeline.structural import _prove_batch

    chain = "SELECT count(*) FROM singer WHERE " + " OR ".join(f"Age = {i}" for i in range(20000))
    out = _prove_batch._function([("SELECT count(*) FROM singer", "sqlite", chain, "sqlite", None)])
    assert len(out) == 1 and out[0].startswith("unknown")


@pytest.mark.slow
def test_lone_surrogate_in_a_prediction_costs_only_that_prediction(ray_session, tmp_path, capsys):
    import json

    from polysql_ray.pipeline.driver import run

    lines = (REPO / "polysql_ray/quickstart/data/rewritten.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["pred_sql"] += " \ud800"
    lines[0] = json.dumps(first)  # JSON escapes the lone surrogate as \ud800
    pfile = tmp_path / "preds.jsonl"
    pfile.write_text("\n".join(lines) + "\n")
    stats, _ = run(*compose(["progress=false", "model=replay", f"model.predictions={pfile}",
                             f"results_dir={tmp_path / 'r'}", "dialects=[sqlite]"]))
    assert stats.items_scored == 34
    from polysql_ray.store.parquet import ResultsStore

    row = [r for r in ResultsStore(tmp_path / "r").read().to_pylist() if r["question_id"] == first["question_id"]][0]
    assert row["pred_status"] == "rejected" and "\\ud800" in row["pred_sql"]
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "lone surrogate" in ln]
    assert len(warnings) == 1


SECRETS = ("URLPASS", "alice", "SKLIVE123", "S3SECRET", "AKIAACCESS", "HFTOKEN99")


def _every_stored_text(root: Path):
    """(file, text) for every file under ``root``: Parquet files as the text of all their cells."""
    import pyarrow.parquet as pq

    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        if f.suffix == ".parquet":
            yield f, "\n".join(str(v) for col in pq.read_table(f).columns for v in col.to_pylist())
        else:
            yield f, f.read_bytes().decode("utf-8", "replace")


@pytest.mark.slow
def test_secrets_given_to_a_run_are_absent_from_every_stored_file_and_log_line(tmp_path):
    """A run given a URL with credentials (which the generator's errors repeat), an API key, an
    object-store secret and a token: none of them in any file of the results folder (config,
    manifest, summary, scores and their error texts, generations) nor in its output."""
    r = tmp_path / "r"
    out = _cli("model=openai_endpoint", "model.base_url='http://alice:URLPASS@127.0.0.1:9/v1'",
               "model.retry.max_retries=0", "model.concurrency=2", "+model.api_key=SKLIVE123",
               "+store.s3.secret_key=S3SECRET", "+store.s3.access_key=AKIAACCESS", "+model.hf_token=HFTOKEN99",
               "dataset.limit=6", "dialects=[sqlite]", f"results_dir={r}", cwd=tmp_path)
    assert out.returncode in (0, 3), out.stderr[-3000:]
    texts = dict(_every_stored_text(r))
    assert any(p.name == "manifest.json" for p in texts) and any(p.name == "config.yaml" for p in texts)
    assert any(p.suffix == ".parquet" and "scores" in p.parts for p in texts)
    assert any("cannot reach http://<redacted>@127.0.0.1:9/v1" in t for t in texts.values()), \
        "the generator's error text should be stored, masked"
    for secret in SECRETS:
        assert secret not in out.stdout + out.stderr, secret
        leaks = [str(p) for p, t in texts.items() if secret in t]
        assert not leaks, (secret, leaks)


@pytest.mark.slow
def test_an_over_long_prediction_is_stored_cut_in_a_run(ray_session, tmp_path):
    import json

    from polysql_ray.pipeline.driver import run
    from polysql_ray.store.parquet import ResultsStore

    lines = (REPO / "polysql_ray/quickstart/data/rewritten.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["pred_sql"] = "SELECT 1 " + "-- padding\n" * 20_000  # ~220 KB, the sandbox refuses it
    lines[0] = json.dumps(first)
    pfile = tmp_path / "preds.jsonl"
    pfile.write_text("\n".join(lines) + "\n")
    run(*compose(["progress=false", "model=replay", f"model.predictions={pfile}", "limits.max_sql_chars=1000",
                  f"results_dir={tmp_path / 'r'}", "dialects=[sqlite]"]))
    row = [r for r in ResultsStore(tmp_path / "r").read().to_pylist() if r["question_id"] == first["question_id"]][0]
    assert row["pred_status"] == "rejected" and "limits.max_sql_chars=1000" in row["pred_error"]
    said = re.search(r"truncated: (\d+) characters in all", row["pred_sql"])
    assert len(row["pred_sql"]) < 1100 and said and int(said.group(1)) >= len(first["pred_sql"].strip())


def test_a_full_or_read_only_disk_anywhere_is_one_line():
    import errno

    from polysql_ray.errors import user_error_message

    msg = user_error_message(OSError(errno.ENOSPC, "No space left on device", "/r/quickstart_data/x", None, "/r/y"))
    assert msg == ("No space left on device: /r/quickstart_data/x -> /r/y; free space or make the folder "
                   "writable, then rerun (everything already stored is kept)")
    assert "Read-only file system" in user_error_message(OSError(errno.EROFS, "Read-only file system"))
    assert user_error_message(OSError(errno.EIO, "I/O error")) is None  # not a disk that is full: a traceback


def test_a_misspelt_key_or_missing_option_is_one_line_and_exit_2(tmp_path):
    """Hydra would print 5 lines, suggest ``+key`` (the wrong fix for a typo) and exit 1."""
    import subprocess
    import sys

    from polysql_ray.__main__ import composition_error

    assert composition_error(["dialects=[sqlite]", "limits.timeout_s=5"]) is None
    assert "no config key 'limits.timeout'" in composition_error(["limits.timeout=5"])
    msg = composition_error(["model=nosuch"])
    assert "model/nosuch" in msg and "replay" in msg and "\n" not in msg
    res = subprocess.run([sys.executable, "-m", "polysql_ray", "dialect=[sqlite]", f"results_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=600)
    lines = [x for x in res.stderr.splitlines() if x.startswith("polysql_ray")]
    assert res.returncode == 2 and lines == [
        "polysql_ray: error: no config key 'dialect': check its spelling against the README's parameter "
        "table (a key the project does not define cannot be set)"], res.stderr
    assert not (tmp_path / "scores").exists()


@pytest.mark.parametrize("argv", [["-m", "jobs.suites", "--help"], ["-m", "polysql_ray", "--help"]])
def test_closed_stdout_is_one_line_not_a_traceback(argv):
    """`... | head` closes standard output under a command: one line on stderr, exit 141 (as a
    tool killed by SIGPIPE), no BrokenPipeError traceback. The pipe's read end is closed before
    the command starts, so its first write fails whatever the machine's load."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)
    try:
        out = subprocess.run([sys.executable, *argv], stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 141, (out.returncode, out.stderr)
    assert out.stderr.strip().endswith("standard output closed (broken pipe); stopped, stored scores are kept")


def test_sqlglot_fallback_warning_is_not_printed_per_parse(caplog):
    """A prediction sqlglot cannot read (`SET ROLE ...`) printed "Falling back to parsing as a
    'Command'" four times (guard, structural check, shape); the guard's refusal is what the
    user needs, and it is still one typed status."""
    import logging

    import polysql_ray  # noqa: F401 - the import sets the level in every process
    from polysql_ray.engines.guard import check_statement

    with caplog.at_level(logging.WARNING):
        verdict = check_statement("SET ROLE postgres", "postgres")
    assert verdict.action == "reject", verdict
    assert logging.getLogger("sqlglot").getEffectiveLevel() == logging.ERROR
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]


@pytest.mark.slow
def test_an_over_long_copy_of_the_gold_is_rejected_never_proven(ray_session, tmp_path):
    """The gold itself padded past ``limits.max_sql_chars`` with a comment: the sandbox refuses
    it unparsed, so no structural proof may pass it first, in a sweep (``structural_check=prove``
    before every engine) or in ``score_sql`` (red team, 2026-12-04: it passed ``proven``)."""
    import json
    import sqlite3

    from polysql_ray.comparison import score_sql
    from polysql_ray.engines.base import Limits
    from polysql_ray.pipeline.driver import run
    from polysql_ray.store.parquet import ResultsStore

    questions = [json.loads(x) for x in (REPO / "polysql_ray/quickstart/data/questions.jsonl").read_text().splitlines()
                 if x.strip()]
    pad = "\n-- " + "x" * 2_000
    rows = [{"question_id": q["question_id"], "pred_sql": q["gold_sql"] + (pad if i < 5 else "")}
            for i, q in enumerate(questions)]
    pfile = tmp_path / "preds.jsonl"
    pfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run(*compose(["progress=false", "model=replay", f"model.predictions={pfile}", "limits.max_sql_chars=1000",
                  "pipeline.structural_check=prove", f"results_dir={tmp_path / 'r'}", "dialects=[sqlite,duckdb]"]))
    stored = ResultsStore(tmp_path / "r").read().to_pylist()
    long_ids = {r["question_id"] for r in rows[:5]}
    padded = [r for r in stored if r["question_id"] in long_ids]
    assert len(padded) == 10 and all(r["pred_status"] == "rejected" and r["verdict"] == "fail" for r in padded)
    assert not [r for r in padded if r["structural"] == "equivalent"]
    # the unpadded golds are proven (the check ran), so the padded ones were left out of it
    assert any(r["structural"] == "equivalent" for r in stored if r["question_id"] not in long_ids)
    q = questions[0]
    db = tmp_path / f"{q['db_id']}.sqlite"
    with sqlite3.connect(db) as con:
        con.executescript((REPO / "polysql_ray/quickstart/data" / f"{q['db_id']}.sql").read_text())
    res = score_sql(q["gold_sql"], rows[0]["pred_sql"], database=str(db), limits=Limits(max_sql_chars=1000))
    assert res.verdict == "fail" and res.reason == "pred_rejected" and res.basis != "proven", res
