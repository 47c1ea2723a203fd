"""Leaderboard snapshot: statistics of a results store written as md, csv, json, html, PNG.

Output folder contents:

* ``leaderboard.md``, ``leaderboard.csv``, ``leaderboard.json``: byte-identical for the same
  store and config (sorted, fixed float formatting, no timestamps);
* ``index.html``: static sortable tables + the PNG figures (relative links, no network);
* the PNG figures of :data:`polysql_ray.reporting.figures.FIGURES`;
* ``leaderboard.schema.json``: JSON Schema of ``leaderboard.json`` (:mod:`.schema`);
* ``drill/*.html``: one per-question drill-down page per cell (:mod:`.drill`), and one per
  native gold set of ``jobs.fidelity step=native`` (its disagreements; linked from the
  'Native-gold agreement' table);
* ``manifest.json``: store sha256, package versions, git SHA, policy versions, timestamp.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from polysql_ray.statistics.summary import Statistics, StatsConfig, compute_statistics

from polysql_ray.statistics.load import load_scores

from .drill import write_drill_pages
from .figures import FIGURES, write_figures
from .manifest import build_manifest, store_sha256
from .render import render_csv, render_html, render_json, render_markdown
from .schema import render_schema


@dataclass(frozen=True)
class Snapshot:
    """A written snapshot.

    Attributes:
        stats: the computed statistics.
        store_sha256: content hash of the store.
        files: output name (``md``, ``csv``, ``json``, ``html``, ``manifest``, figure names)
            -> path.
    """

    stats: Statistics
    store_sha256: str
    files: dict[str, Path]


class PublicationError(ValueError):
    """The snapshot would publish a stand-in judge's figures without the explicit opt-in."""


def write_snapshot(results_dir: str | Path, out_dir: str | Path,
                   config: StatsConfig = StatsConfig(), figures: bool = True,
                   drill: bool = True, allow_standin_judges: bool = False) -> Snapshot:
    """Compute statistics of ``results_dir`` and write the snapshot into ``out_dir``.

    Args:
        results_dir: folder holding ``scores/**/*.parquet``.
        out_dir: created if missing; existing snapshot files are overwritten.
        config: statistics knobs (baseline dialect, alpha, CI method ...).
        figures: also draw the PNG figures (and show them in the HTML page).
        drill: also write the per-question drill-down pages.
        allow_standin_judges: publish figures of a stand-in judge (labelled as one); without
            it such a snapshot is refused before anything is written.

    Raises:
        FileNotFoundError: the store has no Parquet file.
        PublicationError: a judge of the store is a stand-in and ``allow_standin_judges`` is False.
    """
    out = Path(out_dir)
    st = compute_statistics(results_dir, config)
    fake = [j for j in st.judges if j.get("standin")]
    if fake and not allow_standin_judges and (st.judge_taxonomy_model_dialect or st.judge_agreement):
        j = fake[0]
        raise PublicationError(
            f"judge {j['judge']!r} is a stand-in ({j['standin']}): its error families are not "
            f"judgements; set allow_standin_judges=true to publish them labelled as a stand-in, or "
            f"judge with a real model (python -m jobs.judge judge=...)")
    out.mkdir(parents=True, exist_ok=True)
    digest = store_sha256(results_dir)
    files: dict[str, Path] = {}
    figs = list(FIGURES) if figures else []
    if figures:
        for p in write_figures(st, out):
            files[p.name] = p
    texts = {
        "md": ("leaderboard.md", render_markdown(st, digest, [f for f, _ in figs])),
        "csv": ("leaderboard.csv", render_csv(st)),
        "json": ("leaderboard.json", render_json(st, digest)),
        "schema": ("leaderboard.schema.json", render_schema(st.tables())),
        "html": ("index.html", render_html(st, digest, figs)),
    }
    for name, (fname, text) in texts.items():
        p = out / fname
        p.write_text(text, encoding="utf-8", newline="\n")
        files[name] = p
    if drill:
        con, _ = load_scores(results_dir, policy_version=config.policy_version,
                             exclude_generators=config.exclude_generators, counting=config.counting)
        try:
            for i, p in enumerate(write_drill_pages(results_dir, out, con, st.ex_cells)):
                files[f"drill{i}"] = p
        finally:
            con.close()
        if st.native_gold_agreement:  # the native gold's disagreements (its models are not in ex_cells)
            from polysql_ray.statistics.native_gold import cell, drop_missing

            con, _ = load_scores(results_dir, policy_version=config.policy_version, counting=config.counting,
                                 policy=st.policy)
            try:
                drop_missing(con)
                cells = [cell(r["dataset"], r["dialect"]) for r in st.native_gold_agreement]
                for i, p in enumerate(write_drill_pages(results_dir, out, con, cells)):
                    files[f"native_drill{i}"] = p
            finally:
                con.close()
    manifest = build_manifest(results_dir, digest, list(st.load.policy_versions), files,
                              extra=st.meta())
    mp = out / "manifest.json"
    mp.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    files["manifest"] = mp
    return Snapshot(st, digest, files)
