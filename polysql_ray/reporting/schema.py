"""``leaderboard.schema.json``: the JSON Schema (draft 2020-12) of ``leaderboard.json``.

Other leaderboards can consume ``leaderboard.json`` by this schema: every table is an array of
flat objects; fractions are in [0, 1] (EX, CI bounds, shares), ``*_points``/``drop_pts`` are
percentage points, p-values are raw probabilities, and a missing number is ``null``.
"""
from __future__ import annotations

import json

#: Version of the document layout (bumped when a table or field changes meaning).
SCHEMA_VERSION = "polysql-leaderboard/3"  # 3: gold_portability (was gold_ceiling), provenance, judges

#: What each table holds (keys of ``tables``).
TABLES = {
    "ex_cells": "EX per evaluation cell (model, dataset, dialect, instruction_level).",
    "ex_model_dialect": "EX per (model, dialect), pooled over datasets and instruction levels.",
    "ex_dialect": "EX per dialect, pooled over everything.",
    "ex_dataset": "EX per (dataset, model, dialect), pooled over instruction levels.",
    "gold_portability": "EX of the gold SQL itself per (dataset, dialect); dataset ALL = pooled. "
                        "The gold SQL's portability: a reference, not a bound (models can exceed it).",
    "drops": "EX drop from the baseline dialect per cell (unpaired).",
    "drops_model": "EX drop from the baseline dialect per (model, dialect), pooled (unpaired).",
    "drops_paired": "Drop from the baseline on paired questions with a paired Wald CI.",
    "pairwise_model": "Per model and dialect pair: 2x2 counts, Cohen's kappa, McNemar p, adjusted p.",
    "pairwise_pooled": "Per dialect pair pooled over models: 2x2 counts, kappa, McNemar p, adjusted p.",
    "hierarchy": "Dialects easiest first, adjacent McNemar tests and tiers.",
    "ranks": "Model rank per dialect by pooled EX (1 = best).",
    "rank_intervals": "Model rank per dialect with the rank range its CI allows and CI-overlap ties.",
    "rank_instability": "Kendall's tau-b of each dialect's model ranking against the baseline's.",
    "taxonomy_dialect": "Rule-based error classes per dialect (share of failures).",
    "taxonomy_model_dialect": "Rule-based error classes per (model, dialect).",
    "judge_taxonomy_model_dialect": "Judge-based error families per (judge, model, dialect).",
    "judge_agreement": "Judged failures counted by rule family x judge family.",
    "provenance": "Per dialect and engine identity: product, version, stand-in (empty = the real "
                  "engine), result-changing settings and limits, as the runs recorded them at start.",
    "format_artefacts": "Per cell: failures (n), and those flagged as format artefacts: fn_space (a space "
                        "before a function's parenthesis the server refuses, count ( * )), identifier_case "
                        "(a name that exists in the source only in another case).",
    "judges": "Each judge's identity: generator, model id, revision, fingerprint, stand-in (empty = real).",
    "native_gold_agreement": "Share of independently written native gold called correct, per (dataset, dialect).",
}

#: Meaning of fields that recur across tables.
FIELDS = {
    "model": "model name as stored", "dataset": "dataset name (ALL = pooled)",
    "dialect": "target SQL dialect", "instruction_level": "prompt level XY (ALL = pooled)",
    "n": "questions in the EX denominator (gold errors and unavailable engines left out)",
    "n_total": "stored questions", "correct": "passing predictions",
    "gold_errors": "questions whose gold SQL could not run", "unavailable": "engine unavailable rows",
    "timeouts": "predictions stopped by the engine timeout (wrong in EX)",
    "ex": "execution accuracy, fraction in [0, 1]", "ex_lo": "CI lower bound, fraction",
    "ex_hi": "CI upper bound, fraction", "kappa": "Cohen's kappa of per-question correctness",
    "a_only": "pairs right on dialect_a only", "b_only": "pairs right on dialect_b only",
    "p_value": "McNemar p-value", "p_holm": "McNemar p adjusted over the family (config.p_adjust)",
    "drop": "drop from the baseline, fraction (positive = lower than the baseline)",
    "drop_lo": "paired CI lower bound, fraction", "drop_hi": "paired CI upper bound, fraction",
    "drop_points": "drop in percentage points", "rank": "rank by EX, 1 = best",
    "rank_best": "best rank the CIs allow", "rank_worst": "worst rank the CIs allow",
    "tied_with": "comma-separated models whose CIs overlap", "family": "error family",
    "share": "fraction of the group's failures", "count": "rows",
    "inconclusive": "verdicts the data cannot decide (counted in n, never correct)",
    "n_unflagged": "questions in n whose row carries no ambiguity flag",
    "correct_unflagged": "passing predictions among n_unflagged",
    "ex_unflagged": "EX over the unflagged questions, fraction in [0, 1]",
    "fn_space": "failures with a space before a function's '(' that the server's sql_mode refuses",
    "identifier_case": "failures on a name that exists in the source only in another case",
    "standin": "the stand-in that answered instead of the real engine or judge; empty = real",
    "suite_n": "questions in n with a suite verdict (suite.enabled; 0 = no suites)",
    "suite_correct": "predictions correct on the original database and on every suite database",
    "suite_ex_correct": "passing predictions (EX) among suite_n",
    "suite_unavailable": "predictions whose suite execution could not run (left out of suite EX)",
    "suite_ex": "suite EX (test-suite accuracy), fraction in [0, 1]",
    "suite_gap": "EX minus suite EX over the same questions, fraction",
}


def _type(v: object) -> list[str]:
    if isinstance(v, bool):
        return ["boolean"]
    if isinstance(v, int):
        return ["integer", "null"]
    if isinstance(v, float):
        return ["number", "null"]
    if v is None:
        return ["number", "string", "null"]
    return ["string", "null"]


def leaderboard_schema(tables: dict[str, list[dict]]) -> dict:
    """The JSON Schema of a ``leaderboard.json`` holding ``tables`` (field types from the rows)."""
    props = {}
    for name, rows in sorted(tables.items()):
        fields: dict[str, object] = {}
        for r in rows:
            for k, v in r.items():
                if k not in fields or fields[k] is None:
                    fields[k] = v
        item = {"type": "object", "properties": {
            k: {"type": _type(v), **({"description": FIELDS[k]} if k in FIELDS else {})}
            for k, v in sorted(fields.items())}}
        props[name] = {"type": "array", "description": TABLES.get(name, ""), "items": item}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_VERSION,
        "title": "polysql_ray leaderboard snapshot",
        "type": "object",
        "required": ["schema_version", "store_sha256", "config", "load", "tables"],
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "store_sha256": {"type": "string", "description": "sha256 of the results store"},
            "config": {"type": "object", "description": "statistics configuration"},
            "load": {"type": "object", "description": "files and rows read, duplicates dropped"},
            "tables": {"type": "object", "properties": props, "required": sorted(props)},
        },
    }


def render_schema(tables: dict[str, list[dict]]) -> str:
    """``leaderboard.schema.json`` text (sorted keys, deterministic)."""
    return json.dumps(leaderboard_schema(tables), sort_keys=True, indent=1) + "\n"
