"""Deterministic renderers: Markdown, CSV, JSON and a static, self-contained HTML page.

Determinism (same store -> byte-identical md, csv, json): every table is sorted upstream, floats
are written with :func:`fixed` (6 significant digits), NaN becomes empty / null, JSON keys are
sorted, and none of these three files holds a timestamp or absolute path.
"""
from __future__ import annotations

import csv
import html
import io
import json
import math
from collections.abc import Sequence

from polysql_ray.statistics.summary import Statistics

from .views import STANDIN_BADGE, View, all_views, cells_csv_columns, cells_view


def fixed(x: float) -> str:
    """Fixed float text: 6 significant digits (``repr``-free, platform-stable); NaN -> ``""``."""
    if math.isnan(x) or math.isinf(x):
        return ""
    return format(x, ".6g")


def _json_value(x: object) -> object:
    if isinstance(x, float):
        s = fixed(x)
        return float(s) if s else None
    if isinstance(x, dict):
        return {str(k): _json_value(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_value(v) for v in x]
    return x


def render_json(st: Statistics, store_sha256: str) -> str:
    """All statistics tables plus load summary, config and store hash, as sorted JSON."""
    from .schema import SCHEMA_VERSION

    doc = {"schema_version": SCHEMA_VERSION, "store_sha256": store_sha256, **st.meta(),
           "tables": st.tables()}
    return json.dumps(_json_value(doc), sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def render_csv(st: Statistics) -> str:
    """``leaderboard.csv``: one row per cell (model, dataset, level, dialect), raw numbers."""
    buf = io.StringIO()
    cols = cells_csv_columns()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in cells_view(st).rows:
        w.writerow([fixed(r[c]) if isinstance(r[c], float)
                    else ("" if r[c] is None else r[c]) for c in cols])
    return buf.getvalue()


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_value(c, r: dict) -> str:
    raw = r.get(c.key)
    if c.kind == "link" and isinstance(raw, (tuple, list)) and len(raw) == 2:
        return f"[{_md_cell(str(raw[0]))}]({raw[1]})"
    return _md_cell(c.format(r))


def view_markdown(v: View) -> str:
    """One view as a Markdown section (``## title``, note, pipe table)."""
    lines = [f"## {v.title}", "", v.note, ""]
    if not v.rows:
        return "\n".join(lines + ["(no data)", ""])
    lines.append("| " + " | ".join(_md_cell(c.header) for c in v.columns) + " |")
    lines.append("|" + "|".join("---" if c.kind == "text" else "---:" for c in v.columns) + "|")
    for r in v.rows:
        lines.append("| " + " | ".join(_md_value(c, r) for c in v.columns) + " |")
    return "\n".join(lines + [""])


def _summary_lines(st: Statistics, store_sha256: str) -> list[str]:
    ld, cfg = st.load, st.config
    return [
        f"- Store: {ld.files} Parquet files, {ld.rows_read} rows read, {ld.rows_kept} kept "
        f"({ld.duplicates_dropped} superseded duplicates dropped); sha256 `{store_sha256}`",
        f"- Comparison policy versions: {', '.join(ld.policy_versions) or '-'}",
        f"- Baseline dialect: {cfg.baseline}; CI: {cfg.ci_method}, {100 * (1 - cfg.alpha):g}%; "
        f"hierarchy p-adjustment: {cfg.p_adjust or 'none'}; counting policy "
        f"{cfg.counting.version}",
    ]


def render_markdown(st: Statistics, store_sha256: str, figures: Sequence[str] = ()) -> str:
    """``leaderboard.md``: summary, every view, links to the figures (relative paths)."""
    parts = ["# polysql_ray leaderboard", "", *_summary_lines(st, store_sha256), ""]
    if figures:
        parts += ["## Figures", ""] + [f"[![{f}]({f})]({f})" for f in figures] + [""]
    parts += [view_markdown(v) for v in all_views(st)]
    return "\n".join(parts).rstrip("\n") + "\n"


_JS = """
function sortTable(th) {
  const table = th.closest('table'), body = table.tBodies[0];
  const idx = Array.prototype.indexOf.call(th.parentNode.children, th);
  const asc = th.dataset.dir !== 'asc';
  table.querySelectorAll('th').forEach(h => delete h.dataset.dir);
  th.dataset.dir = asc ? 'asc' : 'desc';
  const key = tr => { const td = tr.children[idx]; const v = td.dataset.v;
    return v !== undefined && v !== '' && !isNaN(v) ? parseFloat(v) : td.textContent; };
  const rows = Array.from(body.rows);
  rows.sort((a, b) => { const x = key(a), y = key(b);
    const c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
    return asc ? c : -c; });
  rows.forEach(r => body.appendChild(r));
}
function checkImages() {
  const imgs = Array.from(document.images);
  const done = imgs.every(i => i.complete);
  if (!done) { setTimeout(checkImages, 50); return; }
  const ok = imgs.filter(i => i.naturalWidth > 0).length;
  document.body.dataset.imagesTotal = imgs.length;
  document.body.dataset.imagesLoaded = ok;
  document.body.dataset.imagesOk = (ok === imgs.length) ? 'true' : 'false';
}
function applyFilters() {
  const want = {};
  document.querySelectorAll('#filters select').forEach(s => { want[s.dataset.key] = s.value; });
  document.querySelectorAll('tbody tr').forEach(tr => {
    let show = true;
    for (const k in want) {
      const v = tr.dataset[k];
      if (want[k] && v !== undefined && v !== want[k] && v !== 'ALL') show = false;
    }
    tr.style.display = show ? '' : 'none';
  });
}
window.addEventListener('load', checkImages);
"""

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; }
th { background: #eef; cursor: pointer; user-select: none; }
th[data-dir=asc]::after { content: ' \\25B2'; } th[data-dir=desc]::after { content: ' \\25BC'; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #f7f7f7; }
#figures .figs { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
figure { margin: 0; max-width: 100%; }
#filters { position: sticky; top: 0; background: #fff; padding: 6px 0; border-bottom: 1px solid #ccc; z-index: 1; }
#filters label { margin-right: 1em; font-size: 14px; }
img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 13px; color: #555; }
.note { color: #555; font-size: 13px; }
.badge { background: #b00020; color: #fff; border-radius: 3px; padding: 0 4px; font-size: 11px;
         font-weight: bold; white-space: nowrap; }
"""


def _badged(text: str) -> str:
    """Escaped ``text`` with :data:`STANDIN_BADGE` drawn as a red badge."""
    return html.escape(text).replace(html.escape(STANDIN_BADGE), '<span class="badge">stand-in</span>')


def _sort_value(x: object) -> str:
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, (int, float)):
        return fixed(float(x))
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], float):
        return fixed(x[0])
    return ""


#: Views the HTML page shows above the figures (the rest follow them, in report order).
BEFORE_FIGURES = ("leaderboard", "policies", "engines", "native-gold")

#: Row keys that the page's filters act on -> the ``data-`` attribute name.
FILTER_KEYS = {"dataset": "dataset", "dialect": "dialect", "instruction_level": "level"}


def _cell_html(c, r: dict) -> str:
    raw = r.get(c.key)
    if c.kind == "link" and isinstance(raw, (tuple, list)) and len(raw) == 2:
        return f'<a href="{html.escape(str(raw[1]))}">{html.escape(str(raw[0]))}</a>'
    return _badged(c.format(r))


def view_html(v: View) -> str:
    """One view as an HTML section with a sortable table (click a header to sort)."""
    out = [f'<section id="{html.escape(v.slug)}"><h2>{html.escape(v.title)}</h2>',
           f'<p class="note">{_badged(v.note)}</p>']
    if not v.rows:
        return "\n".join(out + ["<p>(no data)</p></section>"])
    out.append(f'<table class="sortable" data-view="{html.escape(v.slug)}"><thead><tr>')
    out += [f'<th onclick="sortTable(this)">{_badged(c.header)}</th>' for c in v.columns]
    out.append("</tr></thead><tbody>")
    for r in v.rows:
        attrs = "".join(f' data-{a}="{html.escape(str(r[k]))}"' for k, a in FILTER_KEYS.items()
                        if r.get(k) is not None)
        tds = []
        for c in v.columns:
            raw = r.get(c.key)
            cls = ' class="num"' if c.kind != "text" else ""
            tds.append(f'<td{cls} data-v="{html.escape(_sort_value(raw))}">'
                       f"{_cell_html(c, r)}</td>")
        out.append(f"<tr{attrs}>" + "".join(tds) + "</tr>")
    out.append("</tbody></table></section>")
    return "\n".join(out)


def _filters_html(st: Statistics) -> str:
    """Select boxes for dataset, dialect and instruction level (they hide non-matching rows)."""
    parts = ['<div id="filters">Filter: ']
    for key, attr in FILTER_KEYS.items():
        values = sorted({str(r[key]) for r in st.ex_cells if r.get(key) is not None})
        opts = '<option value="">all</option>' + "".join(
            f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
        label = {"instruction_level": "instruction level"}.get(key, key)
        parts.append(f'<label>{label} <select data-key="{attr}" onchange="applyFilters()">'
                     f"{opts}</select></label>")
    parts.append("</div>")
    return "".join(parts)


def render_html(st: Statistics, store_sha256: str, figures: Sequence[tuple[str, str]] = ()) -> str:
    """``index.html``: static page, no network access; figures linked as relative PNG files.

    Args:
        figures: ``(file name, caption)`` pairs of PNGs in the same folder.
    """
    summary = "".join(f"<li>{html.escape(s[2:]).replace('`', '')}</li>"
                      for s in _summary_lines(st, store_sha256))
    figs = "".join(f'<figure><a href="{html.escape(f)}"><img src="{html.escape(f)}" '
                   f'alt="{html.escape(cap)}"></a><figcaption>{html.escape(cap)} '
                   f'(<a href="{html.escape(f)}">full size</a>)</figcaption></figure>'
                   for f, cap in figures)
    views = all_views(st)
    # the leaderboard, its policies, where each dialect ran and how far its verdicts can be
    # trusted come before the figures
    first = "\n".join(view_html(v) for v in views if v.slug in BEFORE_FIGURES)
    rest = "\n".join(view_html(v) for v in views if v.slug not in BEFORE_FIGURES)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>polysql_ray leaderboard</title>"
        f"<style>{_CSS}</style><script>{_JS}</script></head>\n<body>"
        f"<h1>polysql_ray leaderboard</h1><ul>{summary}</ul>\n{_filters_html(st)}\n{first}\n"
        f'<section id="figures"><h2>Figures</h2><div class="figs">{figs}</div></section>\n'
        f"{rest}\n</body></html>\n"
    )
