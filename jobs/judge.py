"""Judge job: an LLM judge classifies the failed predictions of a results store.

Usage (Hydra overrides, as every job)::

    python -m jobs.judge results_dir=DIR judge=MODEL [judge.KEY=VALUE ...] [models=[a,b]]
        [dialects=[duckdb]] [limit=N] [batch_size=32] [exclude_generators=[gold]]

``judge`` names a model config in ``conf/model/`` (``openai_endpoint``, a vLLM model,
``tiny_hf``, ``loopback_judge``); ``judge.base_url=...`` etc. override its keys. Replies are
cached in the store by (judge fingerprint, prompt hash): a rerun asks nothing twice and an
interrupted run resumes. Prints the judge labels and the agreement with the rule-based
families; the leaderboard then shows both taxonomies side by side.
See :mod:`polysql_ray.statistics.judge`.
"""
from __future__ import annotations

from polysql_ray.jobs_cli import REQUIRED, as_list, parse_overrides, run_job

PROG = "jobs.judge"
KEYS = {"results_dir": REQUIRED, "judge": REQUIRED, "models": None, "dialects": None,
        "limit": None, "batch_size": 32, "exclude_generators": ["gold"]}


def main(argv: list[str]) -> int:
    """Run the job on Hydra override strings; returns the exit code."""
    from rich.console import Console
    from rich.table import Table

    from polysql_ray.config import compose
    from polysql_ray.statistics.judge import run_judge
    from polysql_ray.statistics.load import store_files

    judge_over = [a.lstrip("+") for a in argv if a.lstrip("+").startswith("judge.")]
    kv = parse_overrides([a for a in argv if a.lstrip("+") not in judge_over], KEYS, PROG)
    cfg, _, _ = compose([f"model={kv['judge']}", *("model." + a[len("judge."):] for a in judge_over)])
    store_files(str(kv["results_dir"]))  # a missing store is named before any model loads
    run = run_judge(str(kv["results_dir"]), cfg["model"], as_list(kv["models"]), as_list(kv["dialects"]),
                    int(kv["limit"]) if kv["limit"] else None, int(kv["batch_size"]),
                    tuple(as_list(kv["exclude_generators"])))
    console = Console()
    console.print(f"judge {run.judge}: {run.failures} failures | asked now {run.judged} | "
                  f"from cache {run.reused} | unanswered {run.errors} (rerun retries them) | "
                  f"judgements: {run.path}", highlight=False)
    t = Table(title=f"Judge family vs rule-based family ({run.judge})")
    judge_fams = sorted({b for _, b in run.agreement})
    t.add_column("rule family \\ judge")
    for f in judge_fams:
        t.add_column(f, justify="right")
    for a in sorted({a for a, _ in run.agreement}):
        t.add_row(a, *(str(run.agreement.get((a, b), 0)) for b in judge_fams))
    console.print(t)
    console.print(f"agreement {100 * run.agree_rate:.1f}% | Cohen's kappa {run.kappa:.3f} | labels: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(run.labels.items())), highlight=False)
    unparsed, answered = run.labels.get("unparsed", 0), sum(run.labels.values())
    if unparsed:
        what = ("no reply named a label: these judgements are noise, not a taxonomy" if unparsed == answered
                else "the agreement above counts them as family `other`")
        console.print(f"warning: {unparsed} of {answered} judge replies are unparsable (label `unparsed`; "
                      f"raw replies in {run.path}): {what}", highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
