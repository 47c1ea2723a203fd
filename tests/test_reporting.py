"""Leaderboard snapshots: determinism, file contents, manifest, job CLI, HTML in headless Chromium."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from polysql_ray.reporting import store_sha256, write_snapshot
from polysql_ray.statistics.synthetic import random_store

REPO = Path(__file__).resolve().parents[1]
DETERMINISTIC = ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "index.html")
MODELS = {"model-a": 0.75, "model-b": 0.7, "model-c": 0.55}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    random_store(root, models=MODELS, datasets=("bird", "spider"), levels=("basic", "full"),
                 n_questions=40, seed=3, files_per_model=2)
    return root


@pytest.fixture(scope="module")
def snapshot(store, tmp_path_factory):
    return write_snapshot(store, tmp_path_factory.mktemp("snap"))


def test_snapshot_is_byte_deterministic_and_location_independent(store, snapshot, tmp_path):
    write_snapshot(store, tmp_path / "again")
    moved_store = tmp_path / "moved"
    shutil.copytree(store, moved_store)
    moved = write_snapshot(moved_store, tmp_path / "moved_out")
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.json"):
        ref = (snapshot.files["md"].parent / name).read_bytes()
        assert ref == (tmp_path / "again" / name).read_bytes(), name
        assert ref == (tmp_path / "moved_out" / name).read_bytes(), name
    assert moved.store_sha256 == snapshot.store_sha256


def test_store_hash_tracks_content(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    h0 = store_sha256(copy)
    assert h0 == store_sha256(store)
    victim = sorted((copy / "scores").rglob("*.parquet"))[0]
    victim.rename(victim.with_name("renamed.parquet"))
    assert store_sha256(copy) != h0


def test_csv_json_md_contents(snapshot):
    st = snapshot.stats
    out = snapshot.files["md"].parent
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    # 3 models x 2 datasets x 2 levels x 5 dialects
    assert len(rows) == len(st.ex_cells) == 60
    by_key = {(r["model"], r["dataset"], r["instruction_level"], r["dialect"]): r for r in rows}
    for c in st.ex_cells:
        r = by_key[(c["model"], c["dataset"], c["instruction_level"], c["dialect"])]
        assert int(r["n"]) == c["n"] == 39  # q0 is a gold error
        assert int(r["gold_errors"]) == 1
        assert float(r["ex"]) == pytest.approx(c["correct"] / c["n"], abs=1e-6)
        if c["dialect"] == "sqlite":
            assert r["drop_points"] == ""
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["store_sha256"] == snapshot.store_sha256
    assert doc["load"]["rows_kept"] == 3 * 2 * 2 * 5 * 40
    assert len(doc["tables"]["pairwise_pooled"]) == 10  # C(5, 2) dialect pairs
    assert [h["dialect"] for h in doc["tables"]["hierarchy"]] == [
        h["dialect"] for h in st.hierarchy]
    md = (out / "leaderboard.md").read_text()
    for title in ("Leaderboard", "Dialect difficulty hierarchy", "Rank instability",
                  "Error taxonomy", "Per-query agreement"):
        assert title in md
    assert "policy-1" in md and re.search(r"\| model-a \| \d+\.\d \|", md)


def test_figures_are_valid_pngs(snapshot):
    from polysql_ray.reporting.figures import FIGURES

    assert len(FIGURES) == 5
    for name, _ in FIGURES:
        img = mpimg.imread(snapshot.files[name])
        assert img.shape[0] > 200 and img.shape[1] > 300, name
        assert img[..., :3].std() > 0.05, f"{name} looks blank"


def test_manifest(snapshot, store):
    m = json.loads(snapshot.files["manifest"].read_text())
    assert m["store_sha256"] == store_sha256(store)
    assert m["policy_versions"] == ["policy-1"] and m["store_files"] == 6
    assert m["packages"]["duckdb"] and m["packages"]["statsmodels"]
    assert "generated_at" in m and "git_sha" in m
    md_hash = m["outputs"]["md"]["sha256"]
    import hashlib
    assert md_hash == hashlib.sha256(snapshot.files["md"].read_bytes()).hexdigest()


def test_leaderboard_job_cli(store, tmp_path):
    out = tmp_path / "lb"
    proc = subprocess.run([sys.executable, "-m", "jobs.leaderboard", f"results_dir={store}",
                           f"out={out}", "figures=false"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "model-a" in proc.stdout and "sqlite" in proc.stdout
    assert {p.name for p in out.iterdir()} >= {"leaderboard.md", "leaderboard.csv",
                                               "leaderboard.json", "index.html", "manifest.json"}
    bad = subprocess.run([sys.executable, "-m", "jobs.leaderboard", f"results_dir={store}"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "missing out" in bad.stderr


def test_stats_job_main(store, tmp_path, capsys):
    from jobs.stats import main

    out = tmp_path / "stats.json"
    assert main([f"results_dir={store}", f"json={out}", "views=hierarchy", "ci=beta"]) == 0
    assert "hierarchy" in capsys.readouterr().out.lower()
    assert json.loads(out.read_text())["config"]["ci_method"] == "beta"
    from polysql_ray.jobs_cli import UsageError

    with pytest.raises(UsageError, match="unknown key 'colour'"):
        main([f"results_dir={store}", "colour=blue"])


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium_run(binary: str, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        return subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
             *args], capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_html_renders_in_headless_chromium(snapshot, tmp_path):
    binary = _chromium()
    if binary is None:
        if os.environ.get("POLYSQL_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium not found but POLYSQL_REQUIRE_BROWSER=1")
        pytest.skip("chromium not installed (apt-get install -y chromium); "
                    "set POLYSQL_REQUIRE_BROWSER=1 to make this mandatory")
    page = snapshot.files["html"]
    dom = _chromium_run(binary, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    body = re.search(r"<body[^>]*>", html).group(0)
    assert 'data-images-ok="true"' in body and 'data-images-loaded="5"' in body, body
    assert len(re.findall(r"<img ", html)) == 5
    cells = re.search(r'<table class="sortable" data-view="cells">.*?</table>', html, re.S).group(0)
    assert len(re.findall(r"<tr[ >]", cells)) == 1 + len(snapshot.stats.ex_cells)
    board = re.search(r'<table class="sortable" data-view="leaderboard">.*?</table>', html, re.S)
    assert board and len(re.findall(r"<tr[ >]", board.group(0))) == 1 + len(MODELS)

    shot = tmp_path / "shot.png"
    res = _chromium_run(binary, f"--screenshot={shot}", "--window-size=1200,1600",
                        "--hide-scrollbars", page.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (1600, 1200) and img[..., :3].std() > 0.05

    # the drill-down page of a cell is reachable from the cells table and renders
    href = re.search(r'<a href="(drill/[^"]+)"', cells).group(1)
    drill_page = page.parent / href
    assert drill_page.exists()
    shot2 = tmp_path / "drill.png"
    res = _chromium_run(binary, f"--screenshot={shot2}", "--window-size=1000,1200",
                        "--hide-scrollbars", drill_page.as_uri())
    assert res.returncode == 0 and mpimg.imread(shot2)[..., :3].std() > 0.02, res.stderr[-2000:]

    # the dialect filter hides rows of other dialects (run in the browser)
    js_page = tmp_path / "filtered.html"
    js_page.write_text(page.read_text().replace(
        "</body>", "<script>window.addEventListener('load', () => { const s = document.querySelector("
        "'#filters select[data-key=dialect]'); s.value = 'duckdb'; applyFilters(); "
        "document.body.dataset.visible = Array.from(document.querySelectorAll("
        "'table[data-view=cells] tbody tr')).filter(t => t.style.display !== 'none').length; });"
        "</script></body>"))
    for f in page.parent.iterdir():
        if f.suffix == ".png":
            shutil.copy(f, tmp_path / f.name)
    dom3 = _chromium_run(binary, "--dump-dom", js_page.as_uri())
    visible = re.search(r'data-visible="(\d+)"', dom3.stdout)
    assert visible and int(visible.group(1)) == sum(
        1 for c in snapshot.stats.ex_cells if c["dialect"] == "duckdb")

    # a missing figure must be detected by the page's image check
    broken = tmp_path / "broken"
    shutil.copytree(page.parent, broken)
    (broken / "rank_bump.png").unlink()
    dom2 = _chromium_run(binary, "--dump-dom", (broken / "index.html").as_uri())
    assert 'data-images-ok="false"' in re.search(r"<body[^>]*>", dom2.stdout).group(0)


def test_degenerate_store_single_dialect(tmp_path):
    from polysql_ray.statistics.synthetic import score_row, write_store

    write_store(tmp_path / "store", [score_row("m", "d", "postgres", "l", f"q{i}",
                                               "pass" if i % 2 else "values") for i in range(5)])
    snap = write_snapshot(tmp_path / "store", tmp_path / "out")
    assert snap.stats.pairwise_pooled == [] and snap.stats.drops == []
    assert snap.stats.hierarchy[0]["next_dialect"] is None
    text = snap.files["json"].read_text()
    assert "NaN" not in text  # NaN is written as null: strict JSON
    doc = json.loads(text)
    assert doc["tables"]["rank_instability"][0]["tau"] is None
    assert "(no data)" in snap.files["md"].read_text()


def test_figures_survive_a_perfect_cell(tmp_path):
    """EX = 100% (the gold generator on its own engine) puts the Wilson upper bound a float
    rounding away from EX; the error bar must not go negative (found on the Spider sweep)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from polysql_ray.reporting.snapshot import write_snapshot
    from polysql_ray.statistics.summary import StatsConfig
    from polysql_ray.store.schema import SCORE_SCHEMA

    rows = []
    for dialect, correct in (("sqlite", [True] * 972), ("duckdb", [True] * 600 + [False] * 372)):
        for q, ok in enumerate(correct):
            rows.append({f.name: None for f in SCORE_SCHEMA} | {
                "key": f"{dialect}-{q}", "cell_key": dialect, "model": "gold", "dataset": "spider",
                "dialect": dialect, "instruction_level": "-", "question_id": str(q), "db_id": "d",
                "correct": ok, "verdict": "pass" if ok else "fail", "reason": "match" if ok else "values",
                "pred_status": "ok", "gold_status": "ok", "basis": "observed", "policy_version": "cmp-1"})
    store = tmp_path / "store" / "scores" / "x"
    store.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCORE_SCHEMA), store / "part.parquet")
    snap = write_snapshot(tmp_path / "store", tmp_path / "snap", StatsConfig())
    assert (tmp_path / "snap" / "ex_by_dialect.png").stat().st_size > 1000
    assert snap is not None


def test_every_link_and_image_resolves_offline(snapshot):
    """index.html and every drill page link only to files inside the snapshot folder."""
    out = snapshot.files["html"].parent
    pages = [out / "index.html", *sorted((out / "drill").glob("*.html"))]
    assert len(pages) == 1 + len(snapshot.stats.ex_cells)
    for page in pages:
        text = page.read_text()
        for ref in re.findall(r'(?:href|src)="([^"#]+)', text):
            assert not re.match(r"[a-z]+://", ref), (page.name, ref)
            assert (page.parent / ref).resolve().is_file(), (page.name, ref)
        assert "http://" not in text and "https://" not in text


def test_json_validates_against_its_documented_schema(snapshot):
    import jsonschema

    out = snapshot.files["html"].parent
    doc = json.loads((out / "leaderboard.json").read_text())
    schema = json.loads((out / "leaderboard.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["schema_version"] == schema["properties"]["schema_version"]["const"]
    described = schema["properties"]["tables"]["properties"]
    assert all(described[t]["description"] for t in doc["tables"])
    assert described["ex_cells"]["items"]["properties"]["ex"]["description"]


def test_gold_portability_paired_drop_and_rank_ties(tmp_path):
    """The gold generator gives the ceiling row; a paired drop matches the hand formula; two
    models a question apart share ranks."""
    import math

    from polysql_ray.statistics.summary import compute_statistics
    from polysql_ray.statistics.synthetic import score_row, write_store

    rows = []
    for q in range(40):
        # model m: right on sqlite for q < 30; on duckdb for q < 22 and q in {35}
        rows.append(score_row("m", "d", "sqlite", "-", f"q{q}", "pass" if q < 30 else "values"))
        rows.append(score_row("m", "d", "duckdb", "-", f"q{q}",
                              "pass" if q < 22 or q == 35 else "syntax"))
        rows.append(score_row("n", "d", "sqlite", "-", f"q{q}", "pass" if q < 29 else "values"))
        rows.append(score_row("n", "d", "duckdb", "-", f"q{q}", "pass" if q < 21 else "values"))
        rows.append(score_row("gold", "d", "sqlite", "-", f"q{q}", "pass", generator="gold"))
        rows.append(score_row("gold", "d", "duckdb", "-", f"q{q}", "pass" if q < 32 else "syntax",
                              generator="gold"))
    write_store(tmp_path, rows)
    st = compute_statistics(tmp_path)
    ceiling = {(r["dataset"], r["dialect"]): r["ex"] for r in st.gold_portability}
    assert ceiling[("d", "duckdb")] == ceiling[("ALL", "duckdb")] == 32 / 40
    assert ceiling[("ALL", "sqlite")] == 1.0
    assert {r["model"] for r in st.ex_model_dialect} == {"m", "n"}  # gold is context, not a model
    (drop,) = [r for r in st.drops_paired if r["model"] == "m"]
    b, c, n = 8, 1, 40  # right on sqlite only: q22..q29; on duckdb only: q35
    se = math.sqrt(b + c - (b - c) ** 2 / n) / n
    assert drop["drop"] == pytest.approx((b - c) / n)
    assert (drop["drop_lo"], drop["drop_hi"]) == pytest.approx(((b - c) / n - 1.959964 * se,
                                                                (b - c) / n + 1.959964 * se), abs=1e-5)
    ranks = {(r["model"], r["dialect"]): r for r in st.rank_intervals}
    assert ranks[("m", "sqlite")]["rank"] == 1 and ranks[("n", "sqlite")]["rank"] == 2
    assert ranks[("n", "sqlite")]["rank_best"] == 1 and ranks[("m", "sqlite")]["tied_with"] == "n"
    assert all("p_holm" in r and r["p_holm"] >= r["p_value"] for r in st.pairwise_pooled)
    from polysql_ray.reporting.views import GOLD_ROW, leaderboard_view

    board = leaderboard_view(st)
    assert board.rows[-1]["model"] == GOLD_ROW and board.rows[-1]["ex:duckdb"] == 32 / 40


def test_stats_tables_fit_100_columns(snapshot):
    """Every statistics table printed at 100 columns keeps each line within the width and
    every model name whole."""
    from rich.console import Console

    from polysql_ray.reporting.console import print_views
    from polysql_ray.reporting.views import all_views

    buf = io.StringIO()
    print_views(all_views(snapshot.stats), Console(file=buf, width=100, color_system=None))
    lines = buf.getvalue().splitlines()
    assert max(len(x) for x in lines) <= 100
    for m in MODELS:
        assert any(m in x for x in lines)
    assert not any("…" in x for x in lines)
