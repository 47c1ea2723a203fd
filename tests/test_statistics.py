"""Statistics over small synthetic results stores (real SCORE_SCHEMA) vs hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, chi2, kendalltau
from statsmodels.stats.inter_rater import cohens_kappa

from polysql_ray.statistics import (
    StatsConfig,
    classify_row,
    cohen_kappa_2x2,
    compute_statistics,
    ex_table,
    judge_error_class,
    load_scores,
    mcnemar_test,
    pairwise_dialects,
    parse_judge_label,
    proportion_ci,
    rank_instability,
)
from polysql_ray.statistics.synthetic import score_row, write_store


def wilson_by_hand(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(7, 10), (0, 5), (5, 5), (831, 1000)])
def test_wilson_ci_matches_hand_formula(k, n):
    lo, hi = proportion_ci(k, n)
    hlo, hhi = wilson_by_hand(k, n)
    assert lo == pytest.approx(max(0.0, hlo), abs=1e-12)
    assert hi == pytest.approx(min(1.0, hhi), abs=1e-12)
    assert lo <= k / n <= hi


def test_ci_edge_cases_and_bootstrap():
    assert all(math.isnan(x) for x in proportion_ci(0, 0))
    with pytest.raises(ValueError):
        proportion_ci(3, 2)
    with pytest.raises(ValueError):
        proportion_ci(1, 2, method="nope")
    b1 = proportion_ci(60, 100, method="bootstrap")
    assert b1 == proportion_ci(60, 100, method="bootstrap")  # seeded
    w = proportion_ci(60, 100)
    assert b1[0] == pytest.approx(w[0], abs=0.02) and b1[1] == pytest.approx(w[1], abs=0.02)


def test_kappa_hand_example_and_statsmodels():
    # n=50, p_o=0.7, p_a=0.5, p_b=0.6, p_e=0.5 -> kappa=0.4
    assert cohen_kappa_2x2(20, 5, 10, 15) == pytest.approx(0.4)
    rng = np.random.default_rng(1)
    for _ in range(20):
        t = rng.integers(0, 40, size=4)
        if t.sum() == 0:
            continue
        ours = cohen_kappa_2x2(*map(int, t))
        ref = cohens_kappa(np.array([[t[0], t[1]], [t[2], t[3]]], dtype=float)).kappa
        if math.isnan(ours):
            continue
        assert ours == pytest.approx(ref)
    assert math.isnan(cohen_kappa_2x2(10, 0, 0, 0))  # both always right: undefined


@pytest.mark.parametrize("b,c", [(3, 9), (0, 5), (10, 10), (1, 20), (0, 0), (12, 12)])
def test_mcnemar_exact_matches_binomtest(b, c):
    stat, p, exact = mcnemar_test(b, c)
    assert exact
    ref = binomtest(min(b, c), b + c, 0.5).pvalue if b + c else 1.0
    assert p == pytest.approx(ref)


def test_mcnemar_chi2_above_threshold():
    stat, p, exact = mcnemar_test(30, 12)
    assert not exact
    assert stat == pytest.approx((abs(30 - 12) - 1) ** 2 / 42)
    assert p == pytest.approx(chi2.sf(stat, 1))


def _hand_store(tmp_path):
    """One model, two dialects, 10 questions; q9 is a gold error everywhere.

    sqlite:   q0-q6 pass, q7 values, q8 timeout
    postgres: q0-q3 pass, q4 syntax, q5 schema, q6 timeout, q7 pass, q8 row_count
    """
    rows = []
    sq = ["pass"] * 7 + ["values", "timeout", "gold_error"]
    pg = ["pass"] * 4 + ["syntax", "schema", "timeout", "pass", "row_count", "gold_error"]
    for q in range(10):
        rows.append(score_row("m1", "spider", "sqlite", "basic", f"q{q}", sq[q], scored_at_s=10))
        rows.append(score_row("m1", "spider", "postgres", "basic", f"q{q}", pg[q], scored_at_s=10))
    write_store(tmp_path, rows, "m1/part-0")
    return tmp_path


def test_ex_counts_gold_errors_and_timeouts(tmp_path):
    con, load = load_scores(_hand_store(tmp_path))
    rows = {r["dialect"]: r for r in ex_table(con)}
    sq, pg = rows["sqlite"], rows["postgres"]
    assert (sq["n_total"], sq["gold_errors"], sq["n"], sq["correct"], sq["timeouts"]) == (10, 1, 9, 7, 1)
    assert sq["ex"] == pytest.approx(7 / 9)
    assert sq["ex_no_timeout"] == pytest.approx(7 / 8)
    assert (sq["ex_lo"], sq["ex_hi"]) == pytest.approx(wilson_by_hand(7, 9))
    assert (pg["n"], pg["correct"], pg["timeouts"]) == (9, 5, 1)
    assert pg["ex"] == pytest.approx(5 / 9)
    assert load.rows_kept == 20 and load.duplicates_dropped == 0


def test_pairing_kappa_mcnemar_on_store(tmp_path):
    con, _ = load_scores(_hand_store(tmp_path))
    (pair,) = pairwise_dialects(con, ("model",))
    # postgres < sqlite by name: A = postgres, B = sqlite. q9 (gold error) is not paired.
    assert (pair["dialect_a"], pair["dialect_b"], pair["n_pairs"]) == ("postgres", "sqlite", 9)
    # both: q0-3 -> 4; A only: q7 -> 1; B only: q4,q5,q6 -> 3; neither: q8 -> 1
    assert (pair["both"], pair["a_only"], pair["b_only"], pair["neither"]) == (4, 1, 3, 1)
    assert pair["kappa"] == pytest.approx(cohen_kappa_2x2(4, 1, 3, 1))
    po, pa, pb = 5 / 9, 5 / 9, 7 / 9
    pe = pa * pb + (1 - pa) * (1 - pb)
    assert pair["kappa"] == pytest.approx((po - pe) / (1 - pe))
    assert pair["exact"] and pair["p_value"] == pytest.approx(binomtest(1, 4, 0.5).pvalue)


def test_pairs_need_both_dialects_without_gold_error(tmp_path):
    rows = [score_row("m", "d", "sqlite", "l", "q1", "pass"),
            score_row("m", "d", "duckdb", "l", "q1", "pass"),
            score_row("m", "d", "sqlite", "l", "q2", "pass"),
            score_row("m", "d", "duckdb", "l", "q2", "gold_error"),  # excluded on one side
            score_row("m", "d", "sqlite", "l", "q3", "values"),  # no duckdb row: unpaired
            score_row("m", "d", "sqlite", "l", "q4", "unavailable"),  # excluded reason
            score_row("m", "d", "duckdb", "l", "q4", "pass")]
    write_store(tmp_path, rows)
    con, _ = load_scores(tmp_path)
    (pair,) = pairwise_dialects(con, ())
    assert pair["n_pairs"] == 1 and pair["both"] == 1
    ex = {r["dialect"]: r for r in ex_table(con, ("dialect",))}
    assert (ex["sqlite"]["n"], ex["sqlite"]["unavailable"], ex["sqlite"]["correct"]) == (3, 1, 2)
    assert (ex["duckdb"]["n"], ex["duckdb"]["gold_errors"]) == (2, 1)


def test_duplicate_keys_keep_latest(tmp_path):
    first = [score_row("m", "d", "sqlite", "l", f"q{i}", "values", scored_at_s=100) for i in range(4)]
    write_store(tmp_path, first, "run1/part-0")
    # later rescoring of q0 and q1 (pass) and an older stale copy of q2 (pass) that must lose
    write_store(tmp_path, [score_row("m", "d", "sqlite", "l", "q0", "pass", scored_at_s=200),
                           score_row("m", "d", "sqlite", "l", "q1", "pass", scored_at_s=200),
                           score_row("m", "d", "sqlite", "l", "q2", "pass", scored_at_s=50)],
                "run2/part-0")
    con, load = load_scores(tmp_path)
    assert (load.files, load.rows_read, load.rows_kept, load.duplicates_dropped) == (2, 7, 4, 3)
    (row,) = ex_table(con)
    assert (row["n"], row["correct"]) == (4, 2)


def test_policy_version_filter_and_dedup_across_policies(tmp_path):
    write_store(tmp_path, [score_row("m", "d", "sqlite", "l", "q0", "values", 10, "policy-1"),
                           score_row("m", "d", "sqlite", "l", "q0", "pass", 20, "policy-2")])
    con, load = load_scores(tmp_path)
    assert load.policy_versions == ("policy-2",) and ex_table(con)[0]["correct"] == 1
    con, load = load_scores(tmp_path, policy_version="policy-1")
    assert load.policy_versions == ("policy-1",) and ex_table(con)[0]["correct"] == 0


def test_missing_store_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_scores(tmp_path)


def test_kendall_tau_rank_instability_vs_scipy_and_hand():
    ex = {"sqlite": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6},
          "postgres": {"a": 0.7, "b": 0.75, "c": 0.5, "d": 0.4},
          "mysql": {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}}
    rows = [{"model": m, "dialect": d, "ex": v, "n": 100} for d, ms in ex.items() for m, v in ms.items()]
    out = {r["dialect"]: r for r in rank_instability(rows, "sqlite")}
    assert set(out) == {"postgres", "mysql"}
    # postgres swaps a and b only: 5 concordant, 1 discordant pair -> tau = 4/6
    assert out["postgres"]["tau"] == pytest.approx(4 / 6)
    assert out["mysql"]["tau"] == pytest.approx(-1.0)
    ref = kendalltau([0.9, 0.8, 0.7, 0.6], [0.7, 0.75, 0.5, 0.4])
    assert out["postgres"]["tau"] == pytest.approx(ref.statistic)
    assert out["postgres"]["p_value"] == pytest.approx(ref.pvalue)
    assert out["postgres"]["n_models"] == 4


def test_hierarchy_and_drops_on_store(tmp_path):
    rows = []
    for q in range(30):
        rows.append(score_row("m", "d", "sqlite", "l", f"q{q}", "pass"))
        rows.append(score_row("m", "d", "postgres", "l", f"q{q}", "pass" if q else "values"))
        rows.append(score_row("m", "d", "clickhouse", "l", f"q{q}", "pass" if q < 5 else "syntax"))
    write_store(tmp_path, rows)
    st = compute_statistics(tmp_path, StatsConfig(baseline="sqlite"))
    h = st.hierarchy
    assert [r["dialect"] for r in h] == ["sqlite", "postgres", "clickhouse"]
    assert [r["significant"] for r in h] == [False, True, False]
    assert [r["tier"] for r in h] == [1, 1, 2]
    assert h[0]["p_value"] == pytest.approx(1.0)
    drops = {r["dialect"]: r for r in st.drops_model}
    assert drops["clickhouse"]["drop_points"] == pytest.approx(100 * 25 / 30)
    assert drops["postgres"]["drop_relative"] == pytest.approx(1 / 30)
    tax = {(r["dialect"], r["error_class"]): r for r in st.taxonomy_dialect}
    assert tax[("clickhouse", "dialect_syntax_error")]["count"] == 25
    assert tax[("clickhouse", "dialect_syntax_error")]["share"] == pytest.approx(1.0)
    assert tax[("postgres", "wrong_values")]["family"] == "logical"


@pytest.mark.parametrize("verdict,reason,status,label", [
    ("pass", "match", "ok", "correct"),
    ("fail", "pred_syntax", "syntax", "dialect_syntax_error"),
    ("fail", "pred_schema", "schema", "schema_linking_error"),
    ("fail", "pred_runtime", "runtime", "runtime_error"),
    ("fail", "pred_timeout", "timeout", "timeout"),
    ("fail", "pred_too_large", "too_large", "too_large_or_rejected"),
    ("fail", "pred_rejected", "rejected", "too_large_or_rejected"),
    ("fail", "row_count", "ok", "wrong_row_count"),
    ("fail", "column_count", "ok", "wrong_column_count"),
    ("fail", "values:col 2", "ok", "wrong_values"),
    ("fail", "order", "ok", "wrong_order"),
    ("fail", "no_sql", "empty", "no_sql"),
    ("fail", "missing", None, "no_sql"),
    ("gold_error", "gold_syntax", "ok", "gold_error"),
    ("fail", "something_new", "ok", "wrong_other"),
])
def test_rule_taxonomy(verdict, reason, status, label):
    assert classify_row(verdict, reason, status).label == label


@pytest.mark.parametrize("text,label", [
    ("schema_linking_error", "schema_linking_error"),
    ("**Filtering Error**", "filtering_error"),
    ("`AGGREGATION_ERROR`.", "aggregation_error"),
    ("The query uses MySQL backticks in PostgreSQL.\n\nLABEL: dialect_error", "dialect_error"),
    ("### Analysis\nThe WHERE clause is fine, so this is not a filtering error. The join uses "
     "the wrong table.\n\n**Final answer:** Schema-Linking Error", "schema_linking_error"),
    ("This is not a filtering error; it is an aggregation error (COUNT vs SUM).", "aggregation_error"),
    ('{"label": "Invalid Evaluation", "why": "pred is equivalent"}', "invalid_evaluation"),
    ("Category: filtering\nExplanation: the date comparison is off by one.", "filtering_error"),
    ("Both a schema linking error and an aggregation error occur.", "schema_linking_error"),
    ("LABEL: aggregation_error\nLABEL: filtering_error", "filtering_error"),
    ("I cannot tell.", None),
    ("", None),
])
def test_judge_label_parser_on_messy_outputs(text, label):
    assert parse_judge_label(text) == label


def test_judge_hook_builds_prompt_and_parses():
    seen = []

    def judge(prompt: str) -> str:
        seen.append(prompt)
        return "Reasoning... the GROUP BY is wrong.\n\nlabel - no wait.\nLABEL: **aggregation error**"

    row = {"dialect": "postgres", "gold_sql": "SELECT count(*) FROM t",
           "pred_sql": "SELECT sum(x) FROM t", "reason": "values"}
    res = judge_error_class(row, judge)
    assert res.label == "aggregation_error"
    prompt = seen[0]
    assert "SELECT sum(x) FROM t" in prompt and "postgres" in prompt
    order = [prompt.index(lbl) for lbl in ("schema_linking_error", "filtering_error",
                                           "aggregation_error", "dialect_error",
                                           "invalid_evaluation")]
    assert order == sorted(order)
    assert judge_error_class(row, lambda p: "no idea").label == "unparsed"


def test_gold_generator_is_left_out_of_the_statistics_by_default(tmp_path):
    """The gold generator is a pipeline sanity check, not a model: it must not enter pooled
    kappa/McNemar or rankings unless asked for."""
    import datetime as _dt

    import pyarrow as _pa
    import pyarrow.parquet as _pq

    from polysql_ray.statistics.load import load_scores
    from polysql_ray.store.schema import SCORE_SCHEMA

    now = _dt.datetime.now(_dt.timezone.utc)
    rows = []
    for gen, model in (("gold", "gold"), ("replay", "m1")):
        for q in range(10):
            rows.append({f.name: None for f in SCORE_SCHEMA} | {
                "key": f"{model}{q}", "cell_key": model, "model": model, "generator": gen,
                "dataset": "d", "dialect": "sqlite", "instruction_level": "-", "question_id": str(q),
                "correct": True, "verdict": "pass", "reason": "match", "scored_at": now})
    (tmp_path / "scores").mkdir()
    _pq.write_table(_pa.Table.from_pylist(rows, schema=SCORE_SCHEMA), tmp_path / "scores" / "p.parquet")
    con, _ = load_scores(tmp_path, exclude_generators=("gold",))
    assert con.execute("SELECT DISTINCT model FROM scores").fetchall() == [("m1",)]
    con, _ = load_scores(tmp_path)
    assert con.execute("SELECT count(DISTINCT model) FROM scores").fetchall() == [(2,)]
    from polysql_ray.statistics.summary import StatsConfig
    assert StatsConfig().exclude_generators == ("gold",)


def test_run_ex_table_and_statistics_count_alike(tmp_path):
    """One EX definition: the end-of-run table (pipeline.summary) equals the statistics'.

    The store holds what used to split them: an unavailable engine (left out of EX by both),
    a gold error, a timeout, and a question scored twice where the *later* ``scored_at`` sits
    in the file that sorts *first* (a reader keeping the last row read would pick the stale one).
    """
    from polysql_ray.pipeline.summary import ex_table as run_ex_table

    write_store(tmp_path, [score_row("m", "d", "sqlite", "l", "q0", "pass", scored_at_s=200)], "a/part-0")
    write_store(tmp_path, [score_row("m", "d", "sqlite", "l", "q0", "values", scored_at_s=100),
                           score_row("m", "d", "sqlite", "l", "q1", "unavailable"),
                           score_row("m", "d", "sqlite", "l", "q2", "gold_error"),
                           score_row("m", "d", "sqlite", "l", "q3", "timeout"),
                           score_row("m", "d", "sqlite", "l", "q4", "syntax"),
                           score_row("m", "d", "sqlite", "l", "q5", "pass", basis="proven")], "b/part-0")
    (run_row,) = run_ex_table(tmp_path).to_pylist()
    con, _ = load_scores(tmp_path, exclude_generators=())
    (st,) = ex_table(con)
    assert (run_row["n"], run_row["correct"], run_row["gold_errors"], run_row["unavailable"]) == (6, 2, 1, 1)
    assert (st["n_total"], st["correct"], st["gold_errors"], st["unavailable"]) == (6, 2, 1, 1)
    assert run_row["ex"] == pytest.approx(100 * st["ex"], abs=0.005) == pytest.approx(50.0)
    assert run_row["ex_no_timeouts"] == pytest.approx(100 * st["ex_no_timeout"], abs=0.005)
    assert (run_row["timeouts"], run_row["exec_errors"], run_row["proven"]) == (1, 1, 1)
    assert run_ex_table(tmp_path, cell_keys=[]).num_rows == 0
    assert run_ex_table(tmp_path / "nowhere").num_rows == 0
