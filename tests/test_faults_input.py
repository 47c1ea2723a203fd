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
from polysql_ray.pipeline.driver import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "polysql_ray", "progress=false", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("override,needle", [
    ("limits.timeout_s=-1", "limits.timeout_s must be a positive number"),
    ("limits.timeout_s=.inf", "limits.timeout_s must be a positive number"),
    ("limits.row_cap=0", "limits.row_cap must be a positive number"),
    ("pipeline.structural_check=prov", "pipeline.structural_check='prov' is not one of"),
    ("+engines.postgres.password=hunter2", "engines.postgres.password must not hold a password"),
    ("engines.duckdb.actors=0", "engines.duckdb.actors must be a whole number >= 1 (got 0)"),
    ("engines.sqlite.actors=-3", "engines.sqlite.actors must be a whole number >= 1 (got -3)"),
    ("pipeline.max_inflight_score=0", "pipeline.max_inflight_score must be auto or a whole number >= 1 (got 0)"),
    ("pipeline.max_inflight_score=many", "pipeline.max_inflight_score must be auto or a whole number >= 1"),
    ("policy.abs_tol=abc", "policy: could not convert string to float"),
    ("+policy.abs_toll=1e-3", "policy: unknown comparison policy field(s): ['abs_toll']"),
    ("+datset=spider", "unknown config key(s) ['datset']: check the spelling"),
])
def test_bad_config_is_one_line(override, needle):
    cfg, _, _ = compose([override])
    with pytest.raises(ConfigError, match=re.escape(needle)):
        validate(cfg)


def test_a_single_dialect_needs_no_brackets():
    from polysql_ray.pipeline.driver import build_grid

    cfg, loader, _ = compose(["dialects=duckdb"])
    assert build_grid(cfg, loader).dialects == ["duckdb"]


def test_limits_validate_themselves():
    with pytest.raises(ValueError, match="limits.max_sql_chars"):
        Limits(max_sql_chars=-5)
    assert Limits().fingerprint() == "t30-r100000-b134217728"  # stored cells keep their keys


def test_secrets_are_redacted_in_written_config():
    _, _, text = compose(["+model.api_key=sk-live-123", "+engines.mysql.admin_password=pw1"])
    assert "sk-live-123" not in text and "pw1" not in text
    loaded = yaml.safe_load(text)
    assert loaded["model"]["api_key"] == "<redacted>"
    assert redact({"password_env": "X", "password_file": "/p", "token": None}) == \
        {"password_env": "X", "password_file": "/p", "token": None}


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
