"""Judge-based error taxonomy: an LLM judge classifies the failed predictions of a results store.

The judge is any model generator of the project (``vllm``, ``openai`` for an OpenAI-compatible
endpoint, ``hf``), driven through its ``chat(message_lists)`` method. It sees the question,
the source schema, the gold SQL, the predicted SQL, the evaluation outcome and the engine error,
and picks the first class that applies, in the PolySQL paper's order (logic before syntax):
schema linking, filtering, aggregation, dialect syntax, invalid evaluation
(:func:`polysql_ray.statistics.taxonomy.build_judge_prompt`, :data:`JUDGE_LABELS`).

Caching and resuming. Each judge reply is stored in the generations store
(``<results_dir>/generations/judge-<name>/``) keyed by (judge fingerprint, prompt sha256), one
part file per batch, so an interrupted run resumes where it stopped and a rerun sends nothing
already answered. The verdicts of the current failures are written to
``<results_dir>/judgements/<name>.parquet`` (:data:`JUDGEMENT_SCHEMA`), which the statistics and
the leaderboard read (:func:`polysql_ray.statistics.taxonomy.judge_taxonomy`).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .load import SCORES_TABLE, dataset_index, load_scores, sql_list
from .taxonomy import (JUDGE_FAMILY, JUDGEMENTS_DIR, RULES, build_judge_prompt, classify_row,
                       parse_judge_label)

#: Version of the judge messages (part of every prompt, hence of every cache key).
JUDGE_PROMPT_VERSION = "judge-1"
JUDGE_SYSTEM = ("You audit text-to-SQL evaluations across SQL dialects. Reason about the logic "
                f"of the queries before their syntax. ({JUDGE_PROMPT_VERSION})")

JUDGEMENT_SCHEMA = pa.schema([
    ("key", pa.string()), ("judge", pa.string()), ("judge_fingerprint", pa.string()),
    ("prompt_sha256", pa.string()), ("model", pa.string()), ("dataset", pa.string()),
    ("dialect", pa.string()), ("instruction_level", pa.string()), ("question_id", pa.string()),
    ("verdict", pa.string()), ("reason", pa.string()), ("rule_class", pa.string()),
    ("rule_family", pa.string()), ("label", pa.string()), ("family", pa.string()),
    ("raw_output", pa.string()),
])


class JudgeConfigError(ValueError):
    """The judge configuration cannot judge (e.g. a replay or gold generator)."""


@dataclass
class JudgeRun:
    """What one judge run did.

    Attributes:
        judge: judge name; fingerprint: its generator fingerprint.
        failures: failed predictions selected; judged: replies generated now; reused: replies
            found in the cache; errors: items the judge could not answer (rerun retries them).
        labels: count per judge label; path: the judgements file.
        agreement: ``(rule_family, judge_family) -> count``; agree_rate, kappa: agreement of
            the judge's family with the rule-based family (Cohen's kappa over families).
    """

    judge: str
    fingerprint: str
    failures: int = 0
    judged: int = 0
    reused: int = 0
    errors: int = 0
    labels: Counter = field(default_factory=Counter)
    path: Path | None = None
    agreement: Counter = field(default_factory=Counter)
    agree_rate: float = math.nan
    kappa: float = math.nan


def _schema_text(engine: str, location: str, cache: dict) -> str:
    """Compact ``table(col, ...)`` schema of a source database, tables by name, read by its
    engine's replication reader (``comparison.equivalence.read_source_schema``); "" when it
    cannot be read."""
    from polysql_ray.comparison.equivalence import read_source_schema

    if (engine, location) not in cache:
        schema = read_source_schema(engine, location) or {}
        cache[(engine, location)] = "; ".join(f"{t}({', '.join(cols)})" for t, cols in sorted(schema.items()))
    return cache[(engine, location)]


def select_failures(results_dir: str | Path, models: Sequence[str] = (), dialects: Sequence[str] = (),
                    exclude_generators: Sequence[str] = ("gold",), limit: int | None = None) -> list[dict]:
    """The failed predictions to judge: counted in EX, not passing, verdict ``fail``.

    Returns:
        store rows (dicts) sorted by model, dataset, dialect, level, question_id; at most ``limit``.

    Raises:
        FileNotFoundError: the store has no score file.
    """
    con, _ = load_scores(results_dir, exclude_generators=tuple(exclude_generators))
    try:
        conds = ["NOT excluded", "NOT is_pass", "verdict = 'fail'"]
        if models:
            conds.append(f"model IN {sql_list(list(models))}")
        if dialects:
            conds.append(f"dialect IN {sql_list(list(dialects))}")
        lim = f"LIMIT {int(limit)}" if limit else ""
        rel = con.execute(f"""SELECT key, model, dataset, dialect, instruction_level, question_id, db_id,
                                     gold_sql, pred_sql, verdict, reason, pred_status, pred_error
                              FROM {SCORES_TABLE} WHERE {' AND '.join(conds)}
                              ORDER BY model, dataset, dialect, instruction_level, question_id {lim}""")
        names = [d[0] for d in rel.description]
        return [dict(zip(names, r)) for r in rel.fetchall()]
    finally:
        con.close()


def judge_messages(row: Mapping[str, object]) -> list[dict]:
    """Chat messages of one judge request (system + :func:`build_judge_prompt`)."""
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": build_judge_prompt(row)}]


def messages_sha256(messages: list[dict]) -> str:
    """sha256 of the messages as canonical JSON (the cache's prompt hash)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _kappa(pairs: Counter) -> float:
    n = sum(pairs.values())
    if not n:
        return math.nan
    po = sum(c for (a, b), c in pairs.items() if a == b) / n
    ra, rb = Counter(), Counter()
    for (a, b), c in pairs.items():
        ra[a] += c
        rb[b] += c
    pe = sum(ra[k] * rb[k] for k in set(ra) | set(rb)) / n / n
    return (po - pe) / (1 - pe) if pe < 1 else math.nan


def run_judge(results_dir: str | Path, judge_cfg: Mapping, models: Sequence[str] = (),
              dialects: Sequence[str] = (), limit: int | None = None, batch_size: int = 32,
              exclude_generators: Sequence[str] = ("gold",),
              log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
              generator=None) -> JudgeRun:
    """Judge every selected failure, reusing cached replies; write the judgements file.

    Args:
        judge_cfg: a model config (``conf/model/*.yaml`` shape) of a ``vllm``, ``openai`` or
            ``hf`` generator; ``name`` names the judge.
        batch_size: replies per cache part (the unit of resumption).
        generator: an already built generator (tests); made from ``judge_cfg`` otherwise.

    Raises:
        FileNotFoundError: empty store. GeneratorConfigError: bad judge config.
        JudgeConfigError: the generator has no ``chat`` method (replay and gold cannot judge).
    """
    from polysql_ray.generation.registry import make_generator
    from polysql_ray.store.generations import GenerationsStore, generation_key

    results_dir = Path(results_dir)
    rows = select_failures(results_dir, models, dialects, exclude_generators, limit)
    gen = generator or make_generator(dict(judge_cfg))
    if not hasattr(gen, "chat"):
        raise JudgeConfigError(f"judge {judge_cfg.get('name')!r}: generator {judge_cfg.get('generator')!r} "
                        "cannot chat; use a vllm, openai or hf model config")
    name = str(judge_cfg.get("name") or getattr(gen, "model", "judge"))
    run = JudgeRun(judge=name, fingerprint=gen.fingerprint(), failures=len(rows))
    questions, sources = dataset_index(results_dir)
    schemas: dict = {}
    msgs, shas, keys = [], [], []
    for r in rows:
        src = sources.get((r["dataset"], r["db_id"]))
        ctx = {**r, "question": questions.get((r["dataset"], str(r["question_id"]))),
               "db_schema": _schema_text(src[0], src[1], schemas) if src else None}
        m = judge_messages(ctx)
        msgs.append(m)
        shas.append(messages_sha256(m))
        keys.append(generation_key(run.fingerprint, shas[-1]))
    store = GenerationsStore(results_dir)
    cache_model = f"judge-{name}"
    found = store.lookup(cache_model, keys)
    todo, seen = [], set()
    for i, k in enumerate(keys):
        if k not in found and k not in seen:
            todo.append(i)
            seen.add(k)
    run.reused = sum(1 for k in keys if k in found)
    log(f"judge {name}: {len(rows)} failures, {run.reused} answered before, {len(todo)} to ask")
    try:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            preds = gen.chat([msgs[i] for i in batch])
            for i, p in zip(batch, preds):
                p.prompt_sha256, p.question_id = shas[i], str(rows[i]["question_id"])
            store.append(cache_model, run.fingerprint, "judge", "", JUDGE_PROMPT_VERSION, preds)
            for i, p in zip(batch, preds):
                if p.status.value != "error":
                    found[keys[i]] = p
                    run.judged += 1
            log(f"judge {name}: {min(start + batch_size, len(todo))}/{len(todo)} asked")
    finally:
        close = getattr(gen, "close", None)
        if callable(close):
            close()
    out = []
    for r, k, sha in zip(rows, keys, shas):
        p = found.get(k)
        if p is None:
            run.errors += 1
            continue
        label = parse_judge_label(p.raw_output) or "unparsed"
        rule = classify_row(r["verdict"], r["reason"], r["pred_status"], RULES)
        fam = JUDGE_FAMILY.get(label, "other")
        run.labels[label] += 1
        run.agreement[(rule.family, fam)] += 1
        out.append({"key": r["key"], "judge": name, "judge_fingerprint": run.fingerprint,
                    "prompt_sha256": sha, "model": r["model"], "dataset": r["dataset"],
                    "dialect": r["dialect"], "instruction_level": r["instruction_level"],
                    "question_id": str(r["question_id"]), "verdict": r["verdict"], "reason": r["reason"],
                    "rule_class": rule.label, "rule_family": rule.family, "label": label,
                    "family": fam, "raw_output": p.raw_output})
    n = sum(run.agreement.values())
    run.agree_rate = sum(c for (a, b), c in run.agreement.items() if a == b) / n if n else math.nan
    run.kappa = _kappa(run.agreement)
    folder = results_dir / JUDGEMENTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{''.join(ch if ch.isalnum() or ch in '._-' else '_' for ch in name)}.parquet"
    tmp = path.with_suffix(f".tmp-{os.getpid()}-{dt.datetime.now().timestamp():.0f}")
    pq.write_table(pa.Table.from_pylist(out, schema=JUDGEMENT_SCHEMA), tmp)
    os.replace(tmp, path)
    from polysql_ray.statistics.provenance import JUDGE_IDENTITY_SUFFIX, judge_identity

    side = path.with_name(path.stem + JUDGE_IDENTITY_SUFFIX)  # who judged: snapshots label stand-ins
    side.write_text(json.dumps({**judge_identity(dict(judge_cfg), run.fingerprint), "judge": name},
                               sort_keys=True, indent=1) + "\n", encoding="utf-8")
    run.path = path
    return run
