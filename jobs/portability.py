"""Gold portability: run every dataset's gold SQL *unchanged* on each target replica.

Usage (Hydra-style overrides, like ``python -m polysql_ray``)::

    python -m jobs.portability dataset=spider 'dialects=[duckdb,postgres,mysql]' results_dir=DIR
    python -m jobs.portability report results_dir=DIR        # summarise an existing store only

The gold SQL is written for the source dialect; running it unchanged on a target replica and
comparing with the source's own result gives, per dialect, the share of questions that run and
the share that match: the ceiling a source-dialect query has on that target (context for the
leaderboard, never a model). Structural proofs are switched off (``pipeline.structural_check=off``):
the gold compared with itself would otherwise be "proven" without running on the target.

Output: one table per dialect (questions with a working gold, share that runs, share that
matches) and the top causes of the rest, each cause being the target engine's first error line
with names, numbers and quoted text replaced by placeholders (or the comparison reason when the
query ran but returned another result). Also written as ``DIR/portability.json``.
"""
from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

#: Overrides always applied by the job (after the user's): the gold generator, no proofs.
FORCED = ("model=gold", "pipeline.structural_check=off", "progress=false")

_QUOTED = re.compile(r"(\"[^\"]*\"|'[^']*'|`[^`]*`)")
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
_LINE_INFO = re.compile(r"\s*(LINE \d+:.*|at line \d+.*|HINT:.*)$", re.IGNORECASE)


def cause_of(row: dict) -> str:
    """One short, groupable cause for a gold that did not port (``row``: a score row dict)."""
    if row["pred_status"] == "ok":
        if row.get("verdict") == "inconclusive":  # e.g. a nondeterministic gold (README: flags)
            return f"runs, inconclusive ({row.get('flags') or row['reason']})"
        return f"runs, different result ({row['reason']})"
    msg = (row.get("pred_error") or "").strip().splitlines()
    first = msg[0] if msg else ""
    first = _LINE_INFO.sub("", first)
    first = _QUOTED.sub("<x>", first)
    first = _NUMBER.sub("<n>", first)
    first = re.sub(r"\s+", " ", first).strip()[:110]
    return f"{row['pred_status']}: {first}" if first else str(row["pred_status"])


def summarise(rows: list[dict], top: int = 6) -> dict[str, dict]:
    """Per dialect: ``n`` (gold works on the source), ``runs``/``matches`` (counts and %),
    ``causes`` (top ``top`` causes with counts) from gold-model score rows."""
    by: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        if r["model"] == "gold" and r["verdict"] != "gold_error":
            by[r["dialect"]].append(r)
    out = {}
    for dialect, rs in sorted(by.items()):
        n = len(rs)
        runs = sum(r["pred_status"] in ("ok", "skipped") for r in rs)
        match = sum(bool(r["correct"]) for r in rs)
        causes = collections.Counter(cause_of(r) for r in rs if not r["correct"])
        out[dialect] = {"n": n, "runs": runs, "matches": match,
                        "runs_pct": round(100 * runs / n, 2) if n else 0.0,
                        "matches_pct": round(100 * match / n, 2) if n else 0.0,
                        "causes": causes.most_common(top)}
    return out


def render(summary: dict[str, dict]) -> str:
    """Plain-text report of :func:`summarise`."""
    lines = ["dialect    n     runs %   matches %   top causes of the rest"]
    for d, s in summary.items():
        lines.append(f"{d:<10} {s['n']:<5} {s['runs_pct']:>6.2f}   {s['matches_pct']:>8.2f}")
        for cause, k in s["causes"]:
            lines.append(f"{'':>36}{k:>5}  {cause}")
    return "\n".join(lines)


def load_rows(results_dir: str | Path) -> list[dict]:
    """Every stored score row of ``results_dir`` (latest row per key)."""
    import pyarrow.dataset as ds

    root = Path(results_dir) / "scores"
    if not root.exists():
        raise FileNotFoundError(f"no scores under {root}: run the job (or a sweep) first")
    cols = ["key", "model", "dialect", "verdict", "correct", "reason", "pred_status", "pred_error", "flags",
            "scored_at"]
    t = ds.dataset(str(root), format="parquet").to_table(columns=cols).sort_by("scored_at")
    latest = {r["key"]: r for r in t.to_pylist()}
    return list(latest.values())


PROG = "jobs.portability"


def main(argv: list[str] | None = None) -> int:
    """Run the gold grid (unless ``report``), then print and write the summary. ``--help``
    prints the usage (exit 0); bad input is one line through :func:`run_job` (exit 2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in args):
        print(__doc__.split("Output:")[0].strip())
        return 0
    report_only = bool(args) and args[0] == "report"
    if report_only:
        args = args[1:]
    kv = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("+"))
    if report_only:
        rdir = kv.get("results_dir")
        if not rdir:
            print("python -m jobs.portability report results_dir=DIR", file=sys.stderr)
            return 2
    else:
        from omegaconf import OmegaConf  # noqa: F401  (hydra is a dependency)

        from polysql_ray.config import compose
        from polysql_ray.pipeline.driver import run

        plain, loader, yaml_text = compose([*args, *FORCED])
        plain["sweep"] = {**(plain.get("sweep") or {}), "name": "portability", "models": None}
        stats, _ = run(plain, loader, yaml_text)
        rdir = plain["results_dir"]
        for e in stats.errors:
            print(f"portability: error: {e}", file=sys.stderr)
    summary = summarise(load_rows(rdir))
    Path(rdir, "portability.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(render(summary))
    return 0


if __name__ == "__main__":
    from polysql_ray.jobs_cli import run_job

    raise SystemExit(run_job(PROG, main))
