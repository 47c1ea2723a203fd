"""The run manifest written beside the store: composed config, package versions, git SHA."""
from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
from pathlib import Path

from polysql_ray.redaction import redact

PACKAGES = ("polysql_ray", "ray", "sqlglot", "duckdb", "pyarrow", "hydra-core", "psycopg", "pymysql", "chdb",
            "scipy", "statsmodels", "vllm", "transformers")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that can change a score (missing ones omitted)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def git_sha(path: str | Path | None = None) -> str | None:
    """HEAD commit of the project checkout (``-dirty`` appended when it has changes), else None."""
    root = Path(path or Path(__file__).resolve().parents[2])
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("-dirty" if dirty else "")) if sha else None


def run_manifest(cfg: dict, grid, policy) -> dict:
    """Everything needed to reproduce a run (secrets masked: :func:`polysql_ray.redaction.redact`)."""
    return {
        "config": redact(cfg),
        "packages": package_versions(),
        "git_sha": git_sha(),
        "policy_version": getattr(policy, "version", None),
        "policy_fingerprint": policy.fingerprint(),
        # every policy the cells are scored under (policies=[...]), its rules in full
        "policies": {name: {"fingerprint": p.fingerprint(), "rules": p.to_dict()}
                     for name, p in (getattr(grid, "policies", None) or {policy.name: policy}).items()},
        "cells": [vars(c) for c in grid.cells],
        "datasets": {k: len(v) for k, v in grid.datasets.items()},
        # what each engine ran on (product, version, stand-in, result-changing settings), read
        # at run start; the snapshots' provenance comes from here
        "engines": redact(dict(getattr(grid, "identities", {}) or {})),
        "sources": {f"{ds}/{db}": fp for (ds, db), fp in sorted((getattr(grid, "source_fps", {}) or {}).items())},
    }
