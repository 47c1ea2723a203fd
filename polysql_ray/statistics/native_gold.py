"""The evaluator's own error rate, per dialect: native gold scored against the source gold.

Where a dataset carries gold SQL written *independently* for another dialect, that native gold
answers the same question as the source gold, so the evaluator should call it correct. Scored as
predictions (model ``native_gold_<dialect>``, only on ``<dialect>``) against the source gold on
that dialect's replica, the share that passes is the **agreement** of the dialect's verdicts
with the truth; every disagreement is either an evaluator error, a dialect difference the
comparison policy does not absorb, or two golds that really ask different things -- each is
listed with its verdict, reason and flags for a reader to judge (:func:`report`).

Native gold sets (:func:`native_sets`), all that a dataset has:

* ``spider`` layout with SpiderMan beside it (``<shared>/data/spiderman``): its MySQL gold
  (``fidelity.spiderman_rows``, aligned to ``dev.json`` order) -> dialect ``mysql``;
* any layout whose records carry ``gold_sql_<dialect>`` keys (a ``jsonl`` dataset:
  ``{"db_id", "question", "gold_sql", "gold_sql_postgres": ...}``) -> that dialect;
* ``bird`` layout (Mini-Dev): ``mini_dev_mysql.json`` / ``mini_dev_postgresql.json`` beside the
  question file (records ``question_id``, ``SQL``) -> ``mysql`` / ``postgres``;
* overlay files given to the job (``native=[FILE,...]``): JSON lines ``{"question_id", "db_id",
  "gold_sql_<dialect>": ...}`` keyed to the dataset's question ids, for native gold written for
  a dataset that does not ship it (``benchmarks/data/spider_postgres_native.jsonl``: PostgreSQL
  gold hand-written for 45 Spider dev questions). A question id or db_id the dataset does not
  have is refused with one line.

Agreement = ``pass / scored`` where *scored* leaves out questions whose source gold does not
run (``gold_error``) and those the infrastructure could not decide (``unavailable``, rescored by
the next run); ``inconclusive`` counts as a disagreement (the evaluator could not confirm it).
"""
from __future__ import annotations

import collections
import json
import re
from pathlib import Path

#: model name of a dialect's native gold
MODEL = "native_gold_{dialect}"
#: name prefix of every native-gold model (the leaderboard's model tables leave them out: their
#: figure is the dialect's verdict agreement, :func:`read_agreement`)
MODEL_PREFIX = MODEL.split("{")[0]
#: instruction level of a replayed native gold (no prompt: the driver's level of such generators)
LEVEL = "-"

#: record key of a native gold column (jsonl and any layout whose extras carry it)
GOLD_COLUMN = re.compile(r"^gold_sql_(?P<dialect>[a-z0-9_]+)$")

#: BIRD Mini-Dev: file beside the question file -> dialect of its ``SQL``
BIRD_NATIVE = {"mini_dev_mysql.json": "mysql", "mini_dev_postgresql.json": "postgres"}

#: verdicts left out of the agreement's denominator (module doc)
NOT_SCORED = ("gold_error", "unavailable")


def model_name(dialect: str) -> str:
    """``native_gold_<dialect>``."""
    return MODEL.format(dialect=dialect)


def native_sets(dataset_cfg: dict, shared: str | Path | None = None,
                overlays: list[str | Path] = ()) -> dict[str, list[dict]]:
    """Native gold per dialect for the dataset ``dataset_cfg`` (module doc): ``dialect ->
    [{"question_id", "db_id", "pred_sql"}]`` in dataset order. Empty when it has none.

    Raises:
        ValueError: a native gold names a dialect no engine declares (the message names it).
    """
    from polysql_ray.datasets.registry import load_dataset
    from polysql_ray.engines.registry import engine_for_dialect

    out: dict[str, list[dict]] = {}
    layout = dataset_cfg.get("layout")
    root = Path(str(dataset_cfg.get("root") or "."))
    if layout == "spider" and shared is not None:
        from polysql_ray.statistics.fidelity import spiderman_rows

        sm = Path(shared) / "data" / "spiderman"
        dev = root / str(dataset_cfg.get("file") or "dev.json")
        if (sm / "test_queries.csv").exists() and dev.exists():
            out["mysql"] = spiderman_rows(sm, dev)
    if layout == "bird":
        folder = (root / str(dataset_cfg.get("file") or "dev.json")).parent
        for fname, dialect in BIRD_NATIVE.items():
            if (folder / fname).exists():
                recs = json.loads((folder / fname).read_text(encoding="utf-8"))
                out[dialect] = [{"question_id": str(r["question_id"]), "db_id": r["db_id"],
                                 "pred_sql": r["SQL"]} for r in recs]
    examples = load_dataset(dataset_cfg)
    for e in examples:
        for k, v in (e.extra or {}).items():
            m = GOLD_COLUMN.match(k)
            if m and isinstance(v, str) and v.strip():
                out.setdefault(m["dialect"], []).append(
                    {"question_id": e.question_id, "db_id": e.db_id, "pred_sql": v})
    known = {e.question_id: e.db_id for e in examples}
    for path in overlays:
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            q = str(rec.get("question_id"))
            if q not in known and (dataset_cfg.get("db_ids") or dataset_cfg.get("limit")):
                continue  # a question the run's selection leaves out
            if known.get(q) != rec.get("db_id"):
                raise ValueError(f"{path}, line {n}: question_id {q!r} with db_id {rec.get('db_id')!r} "
                                 f"is not a question of dataset {dataset_cfg.get('name')!r}")
            for k, v in rec.items():
                m = GOLD_COLUMN.match(k)
                if m and isinstance(v, str) and v.strip():
                    out.setdefault(m["dialect"], []).append({"question_id": q, "db_id": rec["db_id"],
                                                             "pred_sql": v})
    for d in out:
        try:
            engine_for_dialect(d)
        except KeyError:
            raise ValueError(f"native gold for dialect {d!r} (gold_sql_{d}): no engine declares that "
                             f"dialect; rename the column to gold_sql_<dialect>") from None
    return out


def models(sets: dict[str, list[dict]], folder: str | Path) -> list[dict]:
    """Write each dialect's set as replay JSONL into ``folder`` and return the sweep's model
    configs: one replay model per dialect, restricted to it (``dialects``), questions without a
    native gold left as ``missing`` (``allow_partial``)."""
    from polysql_ray.statistics.fidelity import write_jsonl

    out = []
    for dialect, rows in sorted(sets.items()):
        path = Path(folder) / f"{model_name(dialect)}.jsonl"
        write_jsonl(rows, path)
        out.append({"name": model_name(dialect), "generator": "replay", "format": "jsonl",
                    "predictions": str(path), "allow_partial": True, "dialects": [dialect]})
    return out


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:200] if (text or "").strip() else ""


def summarize(dialect: str, rows: list[dict], manual: dict | None = None,
              questions: set[str] | None = None) -> dict:
    """One dialect's agreement (module doc) and its disagreements, each with verdict, reason,
    flags (the store's comma-separated text, as a list), the prediction's status and first error
    line, both SQL texts, and a reviewed cause where ``manual`` (question_id -> (cause,
    subcause, note)) has one. ``questions``: the ids that have a native gold (others left out)."""
    rows = [r for r in rows if r["reason"] != "missing"  # questions without a native gold
            and (questions is None or str(r["question_id"]) in questions)]
    verdicts = collections.Counter(r["verdict"] for r in rows)
    scored = [r for r in rows if r["verdict"] not in NOT_SCORED]
    agree = sum(r["verdict"] == "pass" for r in scored)
    dis = []
    for r in scored:
        if r["verdict"] == "pass":
            continue
        cause = (manual or {}).get(str(r["question_id"]))
        dis.append({"question_id": str(r["question_id"]), "db_id": r["db_id"], "verdict": r["verdict"],
                    "reason": r["reason"], "flags": [f for f in (r.get("flags") or "").split(",") if f],
                    "pred_status": r.get("pred_status"), "error": _first_line(r.get("pred_error")),
                    "cause": f"{cause[0]}:{cause[1]}" if cause else None,
                    "note": cause[2] if cause else None,
                    "gold_sql": r["gold_sql"], "native_sql": r["pred_sql"]})
    return {"dialect": dialect, "model": model_name(dialect), "questions": len(rows),
            "verdicts": dict(verdicts), "scored": len(scored), "agree": agree,
            "agreement": round(agree / len(scored), 4) if scored else None,
            "by_reason": dict(collections.Counter(d["reason"] for d in dis).most_common()),
            "by_flag": dict(collections.Counter(f for d in dis for f in d["flags"]).most_common()),
            "disagreements": dis}


def report(results_dir: str | Path, dataset: str, dialects: list[str]) -> tuple[dict, str]:
    """The native-gold agreement report of ``dataset`` from the store: ``(json-able dict,
    markdown)``; ``dict["agreement"]`` maps dialect -> agreement (the leaderboard's field)."""
    from polysql_ray.statistics.fidelity import MANUAL, latest_rows

    out = []
    for d in dialects:
        rows = latest_rows(results_dir, model_name(d), dataset, d)
        preds = Path(results_dir) / "fidelity" / "native_predictions" / f"{model_name(d)}.jsonl"
        ids = ({str(json.loads(x)["question_id"]) for x in preds.read_text(encoding="utf-8").splitlines()
                if x.strip()} if preds.exists() else None)
        if rows:
            out.append(summarize(d, rows, MANUAL if (dataset, d) == ("spider", "mysql") else None, ids))
    data = {"dataset": dataset, "agreement": {s["dialect"]: s["agreement"] for s in out}, "dialects": out}
    return data, render_markdown(data)


def render_markdown(data: dict, examples: int | None = None) -> str:
    """The report as Markdown: per dialect the agreement, counts by reason and flag, and every
    disagreement (``examples`` caps them per dialect; None: all)."""
    lines = [f"# Native-gold agreement: {data['dataset']}", "",
             "Gold written independently for a dialect, scored as predictions against the source "
             "gold on that dialect's replica (`python -m jobs.fidelity step=native`).", "",
             "| dialect | scored | agree | agreement | verdicts |", "|---|---|---|---|---|"]
    for s in data["dialects"]:
        lines.append(f"| {s['dialect']} | {s['scored']} | {s['agree']} | {s['agreement']} | {s['verdicts']} |")
    for s in data["dialects"]:
        lines += ["", f"## {s['dialect']}: {len(s['disagreements'])} disagreements", "",
                  f"- by reason: {s['by_reason']}", f"- by flag: {s['by_flag']}", "",
                  "| q | db | verdict | reason | flags | status | cause / error |", "|---|---|---|---|---|---|---|"]
        for d in s["disagreements"][:examples]:
            why = d["cause"] or d["error"] or ""
            lines.append(f"| {d['question_id']} | {d['db_id']} | {d['verdict']} | {d['reason']} | "
                         f"{','.join(d['flags'])} | {d['pred_status']} | {why.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def read_agreement(results_dir: str | Path) -> list[dict]:
    """One row per (dataset, dialect) from every ``fidelity/native_<dataset>.json`` of
    ``results_dir`` (empty when the job has not run; object stores: none): ``{"dataset",
    "dialect", "agreement" (fraction or None), "scored", "agree", "disagreements", "by_reason"
    (``"values 3, row_count 1"``), "report" (the Markdown report's path relative to
    ``results_dir``)}``, sorted by dataset and dialect; the leaderboard's column of each dialect."""
    out = []
    root = Path(str(getattr(results_dir, "uri", results_dir))) / "fidelity"
    for p in sorted(root.glob("native_*.json")):
        data = json.loads(p.read_text(encoding="utf-8"))
        for s in data["dialects"]:
            out.append({"dataset": data["dataset"], "dialect": s["dialect"], "agreement": s["agreement"],
                        "scored": s["scored"], "agree": s["agree"], "disagreements": len(s["disagreements"]),
                        "by_reason": ", ".join(f"{k} {v}" for k, v in s["by_reason"].items()),
                        "report": f"fidelity/{p.stem}.md"})
    return sorted(out, key=lambda r: (r["dataset"], r["dialect"]))


def pooled_agreement(rows: list[dict]) -> dict[str, dict]:
    """``dialect -> {"agreement", "scored", "agree", "datasets"}`` pooled over the datasets of
    :func:`read_agreement` rows (``agree / scored`` summed; agreement None when nothing scored)."""
    out: dict[str, dict] = {}
    for r in rows:
        p = out.setdefault(r["dialect"], {"scored": 0, "agree": 0, "datasets": []})
        p["scored"] += r["scored"]
        p["agree"] += r["agree"]
        p["datasets"].append(r["dataset"])
    for p in out.values():
        p["agreement"] = p["agree"] / p["scored"] if p["scored"] else None
    return out


def cell(dataset: str, dialect: str) -> dict:
    """The store cell (``model, dataset, dialect, instruction_level``) of one native gold set."""
    return {"model": model_name(dialect), "dataset": dataset, "dialect": dialect, "instruction_level": LEVEL}


def drop_missing(con, table: str = "scores") -> None:
    """Delete the rows of native-gold models whose question has no native gold (replayed as
    ``missing``): they are not the study's (the drill pages and agreement leave them out)."""
    con.execute(f"DELETE FROM {table} WHERE starts_with(model, ?) AND reason = 'missing'", [MODEL_PREFIX])
