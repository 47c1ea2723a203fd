"""First-hour comfort: progress lines in non-terminal logs, the EX table's legend and gold note,
quickstart names that match the README."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pyarrow as pa
from rich.console import Console

from polysql_ray.pipeline.progress import Progress
from polysql_ray.pipeline.summary import COLUMNS, GOLD_NOTE, legend_lines, render

REPO = Path(__file__).resolve().parents[1]


def test_progress_prints_one_line_reports_without_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    with Progress(console=console, interval_s=0) as p:
        a = p.add("replicate", 2)
        b = p.add("execute [duckdb]", 3)
        p.advance(a, 2)
        p.advance(b, 1)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("progress ") and "replicate 2/2" in lines[0]
    assert "execute [duckdb] 1/3" in lines[-1] and lines[-1].startswith("progress done")
    assert p.lines == len(lines) == 3


def test_progress_is_silent_when_disabled_and_throttled_by_interval():
    buf = io.StringIO()
    with Progress(enabled=False, console=Console(file=buf)) as p:
        p.advance(p.add("score", 5), 5)
    assert buf.getvalue() == ""
    buf = io.StringIO()
    with Progress(console=Console(file=buf), interval_s=3600) as p:
        t = p.add("score", 1000)
        for _ in range(1000):
            p.advance(t)
    assert buf.getvalue().count("\n") == 1 and "score 1000/1000" in buf.getvalue()


def test_a_stalled_run_keeps_reporting_where_it_is_stuck():
    """tick() (called by the scheduler while it waits) prints the line even when nothing
    advanced: a stalled run is visibly alive and shows the counts it is stuck at."""
    buf = io.StringIO()
    with Progress(console=Console(file=buf, force_terminal=False, width=200), interval_s=0) as p:
        p.add("execute [postgres]", 34)
        p.tick()
        p.tick()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3 and all("execute [postgres] 0/34" in ln for ln in lines)
    buf = io.StringIO()
    with Progress(console=Console(file=buf, force_terminal=False), interval_s=3600) as p:
        p.add("score", 5)
        p.tick()
    assert buf.getvalue().count("\n") == 1  # only the final line: throttled by interval_s


def test_ex_table_prints_a_legend_and_the_gold_note():
    names = [c for c, _, _ in COLUMNS]
    row = {c: (None if c.startswith("ex") and c != "exec_errors" else 1) for c in names}
    row.update(model="gold", dataset="d", dialect="duckdb", instruction_level="-", ex=64.3)
    table = pa.Table.from_pylist([row])
    buf = io.StringIO()
    render(table, Console(file=buf, width=200))
    text = buf.getvalue()
    for _, header, meaning in COLUMNS:
        if meaning:
            assert f"{header}: {meaning}" in text
    assert GOLD_NOTE in " ".join(text.split()) or "portability: a reference" in " ".join(text.split())
    assert GOLD_NOTE not in legend_lines(pa.Table.from_pylist([{**row, "model": "m"}]))


def test_quickstart_models_match_the_readme():
    sweep = (REPO / "conf" / "sweep" / "quickstart.yaml").read_text()
    names = re.findall(r"\{name: (\w+),", sweep)
    readme = (REPO / "README.md").read_text()
    section = readme.split("**Install and run the main job**", 1)[1].split("**Install and run the tests", 1)[0]
    assert names == ["gold", "rewritten", "flawed"]
    for n in names:
        assert f"`{n}`" in section, n


def test_run_ex_table_is_split_to_fit_100_columns(tmp_path):
    """The end-of-run EX table splits column-wise at 100 columns (each part repeats the cell
    columns) instead of squeezing numbers into ellipses."""
    from rich.console import Console

    from polysql_ray.pipeline.summary import ex_table, render
    from polysql_ray.statistics.synthetic import score_row, write_store

    write_store(tmp_path, [score_row("a_rather_long_model_name", "spider", "postgres", "-", f"q{i}",
                                     "pass" if i % 3 else "values") for i in range(30)])
    console = Console(width=100, record=True)
    render(ex_table(tmp_path), console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text.count("a_rather_long_model_name") >= 2          # the cell columns repeat per part
    assert "66.67" in text and "…" not in text                   # 20/30 in full, nothing cut
