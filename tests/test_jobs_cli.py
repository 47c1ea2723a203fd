"""Every job: one command-line style (Hydra overrides) and one clear line per user error."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from polysql_ray.jobs_cli import REQUIRED, UsageError, parse_overrides

REPO = Path(__file__).resolve().parents[1]


def _job(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_overrides_are_typed_and_checked():
    keys = {"results_dir": REQUIRED, "alpha": 0.05, "views": None, "figures": True}
    kv = parse_overrides(["results_dir=/tmp/x", "+alpha=0.01", "views=[a,b]", "figures=false"], keys, "jobs.t")
    assert kv == {"results_dir": "/tmp/x", "alpha": 0.01, "views": ["a", "b"], "figures": False}
    with pytest.raises(UsageError, match="missing results_dir"):
        parse_overrides([], keys, "jobs.t")
    with pytest.raises(UsageError, match="unknown key 'colour'.*usage: python -m jobs.t"):
        parse_overrides(["results_dir=x", "colour=blue"], keys, "jobs.t")
    with pytest.raises(UsageError, match="bad argument"):
        parse_overrides(["results_dir=[x"], keys, "jobs.t")


@pytest.mark.parametrize("args, expect", [
    (("jobs.leaderboard", "results_dir={tmp}/empty", "out={tmp}/lb"), "no score files under"),
    (("jobs.stats", "results_dir={tmp}/empty"), "run a sweep first"),
    (("jobs.stats",), "missing results_dir"),
    (("jobs.judge", "results_dir={tmp}/empty", "judge=loopback_judge"), "no score files under"),
    (("jobs.judge", "results_dir={tmp}/empty", "judge=no_such_model"), "Could not find 'model/no_such_model'"),
    (("jobs.leaderboard", "results_dir=x", "out=y", "--source-dir=z"), "bad argument"),
    (("jobs.replicate", "source_dir={tmp}/nowhere"), "is not a folder"),
    (("jobs.replicate", "source_dir={tmp}", "target=duckbd"), "target=duckbd: no target writer; known:"),
    (("jobs.leaderboard", "results_dir={tmp}", "out={tmp}/a_file"), "is a file: give a folder"),
    (("jobs.fidelity", "step=publish", "results_dir={tmp}"), "expected step=native, step=prepare or step=report"),
    (("jobs.compact", "results_dir={tmp}/empty"), "no score files under"),
    (("jobs.compact",), "missing results_dir"),
    (("jobs.compact", "results_dir=s3://"), "names no bucket"),
    (("jobs.compact", "results_dir={tmp}", "wait=maybe"), "wait must be true or false"),
])
def test_user_errors_are_one_line(tmp_path, args, expect):
    (tmp_path / "a_file").write_text("x")
    proc = _job(*(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{args[0]}: error: ") and expect in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_jobs_are_not_installed_as_a_top_level_package():
    """pyproject packages only polysql_ray: no module named ``jobs`` lands in site-packages."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = cfg["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["polysql_ray*"]
    from setuptools import find_packages

    found = find_packages(where=str(REPO), include=include)
    assert found and all(p.split(".")[0] == "polysql_ray" for p in found)


@pytest.mark.parametrize("job", ["stats", "leaderboard", "judge", "replicate", "fidelity", "compact",
                                 "suites", "standins", "portability"])
def test_help_prints_the_usage_and_exits_0(job):
    """``--help`` is a request, not an error: the job's docstring (its usage) on stdout, rc 0."""
    proc = _job(f"jobs.{job}", "--help")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert f"python -m jobs.{job}" in proc.stdout and "Usage" in proc.stdout, proc.stdout[:500]
