"""Issue 20 item 8: several comparison policies in one run (``policies=[default,testsuite,bird]``)
score every item under each policy from the same executions, store each verdict (the policy's
name in the row, its fingerprint in the key), and the EX table shows each; adding a policy to a
results folder scores only that policy; BIRD's rule is the named policy ``bird``."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare
from polysql_ray.comparison.policy import load_policies
from polysql_ray.config import CONF_DIR, compose
from polysql_ray.errors import ConfigError
from polysql_ray.pipeline.driver import run

THREE = "policies=[default,testsuite,bird]"


def _run(out, *over):
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false", *over])
    return run(cfg, loader, text)


def _verdicts(out):
    con = duckdb.connect()
    rows = con.execute(f"SELECT policy, model, dialect, question_id, verdict, reason, flags "
                       f"FROM read_parquet('{out}/scores/**/*.parquet', union_by_name=true)").fetchall()
    return {r[:4]: r[4:] for r in rows}


def test_three_policies_from_one_set_of_executions(ray_session, tmp_path):
    stats, table = _run(tmp_path / "three", THREE)
    assert stats.items_scored == 3 * 204 and stats.exec_repeated == 0
    assert sorted(set(table.column("policy").to_pylist())) == ["bird", "default", "testsuite"]
    assert table.num_rows == 3 * 6  # one EX row per (cell, policy)
    import json

    manifest = json.loads((tmp_path / "three" / "runs" / stats.run_id / "manifest.json").read_text())
    assert sorted(manifest["policies"]) == ["bird", "default", "testsuite"]
    assert manifest["policies"]["testsuite"]["rules"]["distinct"] == "strip_all"
    three = _verdicts(tmp_path / "three")
    assert len(three) == 3 * 204
    # each policy alone, in its own folder: the same verdicts item by item ...
    unique = {}
    for name in ("default", "testsuite", "bird"):
        s, _ = _run(tmp_path / name, f"policy={name}")
        unique[name] = sum(s.exec_unique.values())
        alone = _verdicts(tmp_path / name)
        assert {k: v for k, v in three.items() if k[0] == name} == alone, name
    # ... and the one run executed each text once: bird runs the default's SQL, testsuite
    # only its DISTINCT-stripped texts on top (quickstart has 4 of them)
    total = sum(stats.exec_unique.values())
    assert unique["bird"] == unique["default"]
    assert unique["default"] < total < unique["default"] + unique["testsuite"]
    # the texts testsuite adds are its DISTINCT-stripped ones: at most one per DISTINCT-bearing
    # SQL line of the quickstart (gold and both models) on each of the two engines
    data = Path(__file__).parents[1] / "polysql_ray/quickstart/data"
    bearing = sum(line.lower().count("distinct") > 0 for f in ("questions", "rewritten", "flawed")
                  for line in (data / f"{f}.jsonl").read_text().splitlines())
    assert 0 < total - unique["default"] <= 2 * bearing
    # the policies do judge differently (else the test could not fail)
    differ = {k[1:] for k in three if k[0] == "default" and three[k] != three[("bird", *k[1:])]}
    assert differ


def test_adding_a_policy_scores_only_that_policy(ray_session, tmp_path):
    s1, _ = _run(tmp_path, "policies=[default]")
    assert s1.items_scored == 204
    s2, table = _run(tmp_path, "policies=[default,bird]")
    # result sets are not stored: the added policy's items execute again, the stored ones not at all
    assert (s2.items_scored, s2.items_skipped) == (204, 204)
    assert sorted(set(table.column("policy").to_pylist())) == ["bird", "default"]
    s3, _ = _run(tmp_path, "policies=[default,bird]")
    assert (s3.items_scored, s3.items_skipped, sum(s3.exec_unique.values())) == (0, 408, 0)
    # the leaderboard under a policy the store does not hold is one line, not an empty snapshot
    from jobs.leaderboard import main as leaderboard

    assert leaderboard([f"results_dir={tmp_path}", f"out={tmp_path / 'lb'}", "policy=bird", "figures=false"]) == 0
    with pytest.raises(ConfigError, match="policy=nonexist: .*its policies: bird, default"):
        leaderboard([f"results_dir={tmp_path}", f"out={tmp_path / 'lb2'}", "policy=nonexist", "figures=false"])
    assert not (tmp_path / "lb2").exists()


def test_policies_config_errors_are_one_line(tmp_path):
    for over, msg in (("policies=[default,nosuch]", "no policy 'nosuch'"),
                      ("policies=[default,default]", "listed twice"),
                      ("policies=[{name: mine, abs_tol: -1}]", "tolerances")):
        cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={tmp_path}", over])
        with pytest.raises(ConfigError, match=msg):
            run(cfg, loader, text)
    cfg, _, _ = compose(["policies=[default,{name: mine}]"])
    with pytest.raises(ValueError, match="same rules"):
        load_policies(cfg, CONF_DIR / "policy")


def test_named_policies_load_with_their_defaults_and_overrides():
    cfg, _, _ = compose(["policies=[default,testsuite,bird,strict]", "policy.abs_tol=1e-4"])
    pols = {p.name: p for p in load_policies(cfg, CONF_DIR / "policy")}
    assert pols["default"].abs_tol == 1e-4  # the composed group, with its override
    assert pols["testsuite"].distinct == "strip_all" and pols["testsuite"].abs_tol == 0.0
    assert pols["strict"].columns == "positional" and pols["strict"].abs_tol == 1e-5  # from default.yaml
    # the single-policy path composes the same file
    cfg, _, _ = compose(["policy=bird"])
    (only,) = load_policies(cfg, CONF_DIR / "policy")
    assert only == pols["bird"]


def test_bird_rule_is_set_equality_on_positional_tuples():
    bird = {p.name: p for p in load_policies({"policies": ["bird"]}, CONF_DIR / "policy")}["bird"]
    shape = analyze_gold("SELECT a, b FROM t ORDER BY a", "sqlite")
    gold = pa.table({"a": [1, 2, 2], "b": ["x", "y", "y"]})

    def ok(pred):
        return compare(gold, pred, shape, bird).match
    assert ok(pa.table({"a": [2, 1], "b": ["y", "x"]}))            # order and duplicates ignored
    assert ok(pa.table({"a": [2.0, 1.0], "b": ["y", "x"]}))        # 2 == 2.0 as in Python
    assert not ok(pa.table({"b": ["x", "y"], "a": [1, 2]}))        # tuples are positional
    assert not ok(pa.table({"a": [1, 2], "b": ["x", "y"], "c": [0, 0]}))  # no extra column
    assert not ok(pa.table({"a": [1, 2], "b": ["x", "z"]}))
    assert not compare(pa.table({"x": [0.1 + 0.2]}), pa.table({"x": [0.3]}), shape, bird).match  # exact
    assert compare(pa.table({"x": pa.array([], pa.int64())}), pa.table({"y": pa.array([], pa.string()),
                   "z": pa.array([], pa.string())}), shape, bird).match  # set() == set()
    assert not compare(pa.table({"a": [1, 2]}), pa.table({"a": [2, 1]}), shape, ComparisonPolicy()).match
