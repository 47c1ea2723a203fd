"""Optional dependencies (``polysql_ray.extras``): a run that needs an optional engine or
generator whose extra is not installed stops with one line naming the extra, once.

Each missing module is simulated through the real CLI (``python -m polysql_ray``) by a
``sitecustomize`` that blocks it (``sys.modules[name] = None``, what ``import`` treats as not
installed), in the CLI process and in every process it starts.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from polysql_ray.extras import EXTRA_OF, NEEDS, MissingExtra, install_line, require

ROOT = Path(__file__).resolve().parents[1]

#: One CLI run per entry of NEEDS: the overrides that ask for that part.
ASKS = {
    ("engine", "clickhouse"): ["dialects=[clickhouse]"],
    ("engine", "clickhouse+host"): ["dialects=[clickhouse]", "+engines.clickhouse.host=127.0.0.1"],
    ("engine", "snowflake"): ["dialects=[snowflake]"],
    ("engine", "bigquery"): ["dialects=[bigquery]"],
    ("generator", "hf"): ["dialects=[sqlite]", "sweep.models=[{name: tiny, generator: hf, model_id: x/y}]"],
    ("generator", "vllm"): ["dialects=[sqlite]", "sweep.models=[{name: big, generator: vllm, model_id: x/y}]"],
    ("generator", "openai"): ["dialects=[sqlite]", "sweep.models=[{name: remote, generator: openai, model_id: x/y, "
                                                   "base_url: 'http://127.0.0.1:9/v1'}]"],
}


def test_every_extra_named_is_an_extra_of_the_package():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_OF.values()) <= set(extras)
    assert {m for mods in NEEDS.values() for m in mods} == set(EXTRA_OF)
    assert set(ASKS) == set(NEEDS)  # every optional part is exercised below


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "chdb", None)
    with pytest.raises(MissingExtra, match=r"the clickhouse engine needs chdb: .*pip install 'polysql_ray\[clickhouse\]'"):
        require("chdb", "the clickhouse engine")
    assert install_line({"torch": "x", "transformers": "x"}).endswith("pip install 'polysql_ray[hf]'")


def _cli(tmp_path: Path, hide: tuple[str, ...], overrides: list[str]) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import sys\nfor _m in %r:\n    sys.modules[_m] = None\n" % (hide,))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(ROOT),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "polysql_ray", "+sweep=quickstart", "progress=false",
                           f"results_dir={tmp_path / 'results'}", f"replication.dir={tmp_path / 'replicas'}",
                           *overrides], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("part", sorted(NEEDS), ids=lambda p: f"{p[0]}-{p[1]}")
def test_missing_extra_is_one_line_once_through_the_cli(part, tmp_path):
    modules = NEEDS[part]
    p = _cli(tmp_path, modules, ASKS[part])
    extra = EXTRA_OF[modules[0]]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr[-3000:]
    named = [ln for ln in lines if f"pip install 'polysql_ray[{extra}]'" in ln]
    assert len(named) == 1, p.stderr[-3000:]
    assert [ln for ln in lines if "error" in ln.lower()] == named, p.stderr[-3000:]
    assert named[0].startswith("polysql_ray: error: ") and all(m in named[0] for m in modules)
    assert "No module named" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert not (tmp_path / "replicas").exists()  # stopped before any work
