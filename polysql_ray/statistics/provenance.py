"""Where the scores of a store came from: each dialect's engine and each judge's identity.

Read from what the runs recorded, never guessed from names:

* ``runs/<run_id>/manifest.json`` (``pipeline/manifest.py``): ``engines`` holds the
  identity every engine reported at run start (``EngineDeclaration.identity``: product,
  version, stand-in, result-changing settings, endpoint), ``cells`` which dialect ran on which
  engine, ``config.limits`` the sandbox limits. :func:`engine_provenance` gives one row per
  (dialect, identity) over every run of the store; a run written before identities were
  recorded gives ``product = "unrecorded"``.
* ``judgements/<judge>.identity.json`` (written by ``statistics.judge.run_judge``): the
  judge's generator, model id and whether it is a stand-in (:func:`judge_provenance`).

A *stand-in* is anything that answers in place of the real engine or judge (fakesnow and
bqemulator run DuckDB underneath; the loopback judge answers from a fixed table): its figures
are labelled in every snapshot and kept out of pooled means unless asked for
(``StatsConfig.include_standins``), and a snapshot with a stand-in judge is refused unless
``allow_standin_judges`` (``reporting.snapshot.write_snapshot``).
"""
from __future__ import annotations

import json
from pathlib import Path

#: Identity keys shown as columns (the rest of an identity is its ``settings``).
IDENTITY_COLUMNS = ("engine", "product", "version", "standin", "endpoint")


def _manifests(results_dir) -> list[tuple[str, dict]]:
    """``(run_id, manifest)`` of every readable run manifest, oldest first."""
    from polysql_ray.statistics.load import store_location
    from polysql_ray.store.parquet import read_bytes

    import pyarrow.fs as pafs

    loc = store_location(results_dir)
    try:
        infos = loc.fs.get_file_info(pafs.FileSelector(loc.join("runs"), recursive=True))
    except (FileNotFoundError, OSError):
        return []
    out = []
    for info in sorted(infos, key=lambda i: i.path):
        if info.type == pafs.FileType.File and info.path.endswith("/manifest.json"):
            try:
                out.append((info.path.rsplit("/", 2)[-2], json.loads(read_bytes(loc, info.path))))
            except (OSError, ValueError):
                continue  # a damaged manifest: that run's provenance is unknown, not fatal
    return out


def _text(mapping: dict | None) -> str:
    return "; ".join(f"{k}={v}" for k, v in sorted((mapping or {}).items()))


def engine_provenance(results_dir) -> list[dict]:
    """One row per (dialect, engine identity) of the store's runs, sorted by dialect then
    first run: ``dialect, engine, product, version, standin, endpoint, settings`` (``k=v; ...``),
    ``limits`` (``k=v; ...``), ``runs`` (how many runs used it), ``first_run``, ``last_run``.
    ``standin`` is ``""`` for a real engine. Empty when no run manifest is there."""
    rows: dict[tuple, dict] = {}
    for run_id, m in _manifests(results_dir):
        engines = m.get("engines") or {}
        limits = _text((m.get("config") or {}).get("limits"))
        for dialect, engine in sorted({(c.get("dialect"), c.get("target_engine")) for c in m.get("cells") or []}):
            ident = engines.get(engine) or {"engine": engine, "product": "unrecorded"}
            row = {"dialect": dialect, "engine": engine,
                   **{k: str(ident.get(k) or "") for k in IDENTITY_COLUMNS if k != "engine"},
                   "settings": _text(ident.get("settings")), "limits": limits}
            if ident.get("unreachable"):
                row["settings"] = ("unreachable at run start: " + str(ident["unreachable"])
                                   + ("; " + row["settings"] if row["settings"] else ""))
            key = tuple(row.items())
            seen = rows.setdefault(key, {**row, "runs": 0, "first_run": run_id})
            seen["runs"] += 1
            seen["last_run"] = run_id
    return sorted(rows.values(), key=lambda r: (str(r["dialect"]), r["first_run"]))


def standin_dialects(provenance: list[dict]) -> dict[str, str]:
    """``{dialect: stand-in name}`` for the dialects any run scored on a stand-in."""
    out: dict[str, str] = {}
    for r in provenance:
        if r.get("standin"):
            out.setdefault(str(r["dialect"]), str(r["standin"]))
    return out


#: File beside a judge's judgements naming the judge (``statistics.judge.run_judge``).
JUDGE_IDENTITY_SUFFIX = ".identity.json"


def judge_identity(judge_cfg: dict, fingerprint: str) -> dict:
    """What identifies a judge: ``judge`` (its name), ``generator``, ``model_id``, ``revision``,
    ``fingerprint`` and ``standin`` (the config's ``standin`` text, or ``"stand-in model"``
    when the model id says it is one; ``""`` for a real model)."""
    model_id = str(judge_cfg.get("model_id") or judge_cfg.get("model") or "")
    standin = str(judge_cfg.get("standin") or ("stand-in model" if "stand-in" in model_id.lower() else ""))
    return {"judge": str(judge_cfg.get("name") or model_id or "judge"),
            "generator": str(judge_cfg.get("generator") or ""), "model_id": model_id,
            "revision": str(judge_cfg.get("revision") or ""), "fingerprint": fingerprint, "standin": standin}


def judge_provenance(results_dir) -> list[dict]:
    """The identity of every judge with judgements in the store (:func:`judge_identity` rows,
    sorted by judge). A judge without its identity file (written before it existed) is listed
    with ``generator = "unrecorded"`` and counts as a stand-in until rerun: an unknown judge
    is not published as a model's judgement."""
    from polysql_ray.statistics.taxonomy import JUDGEMENTS_DIR

    folder = Path(results_dir) / JUDGEMENTS_DIR
    if not folder.is_dir():
        return []
    out = []
    for f in sorted(folder.glob("*.parquet")):
        side = f.with_name(f.stem + JUDGE_IDENTITY_SUFFIX)
        try:
            out.append(json.loads(side.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            out.append({"judge": f.stem, "generator": "unrecorded", "model_id": "", "revision": "",
                        "fingerprint": "", "standin": "identity not recorded (rerun the judge job)"})
    return sorted(out, key=lambda r: r["judge"])
